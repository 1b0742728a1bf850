"""A model run simulated as three short runs (sim/scenario/periodic_run.py): the report, JSON
and text, byte-identical to the full simulation's on every schedule and the options that touch
the pipeline; the shortcut taken where claimed, and the cases where it is never taken."""

from __future__ import annotations

import json

import pytest
from conftest import TOPOLOGIES, WORKLOADS

import sim.scenario.periodic_run as periodic_run
from sim.cli import main
from sim.engine.periodic import extrapolate_counts, later_windows, short_counts

GPT2 = ["--model", str(WORKLOADS / "models" / "gpt2-medium.yaml"),
        "--topo", str(TOPOLOGIES / "tiny-fattree-8.yaml")]
MOE = ["--model", str(WORKLOADS / "models" / "moe-gpt-small.yaml"),
       "--topo", str(TOPOLOGIES / "tiny-fattree-8.yaml")]

CASES = {  # name: (arguments, taken: whether the three short runs prove periodicity)
    "1f1b": (GPT2 + ["--pp", "2", "--global-batch", "192"], True),
    "interleaved": (GPT2 + ["--pp", "2", "--vpp", "2", "--global-batch", "192"], True),
    "interleaved-group": (GPT2 + ["--pp", "2", "--vpp", "2", "--global-batch", "384",
                                  "--microbatch-group-size-per-virtual-pipeline-stage", "4"],
                          True),
    "zb-h1": (GPT2 + ["--tp", "2", "--pp", "4", "--schedule", "zb-h1",
                      "--global-batch", "96"], True),
    "zb-v": (GPT2 + ["--pp", "4", "--vpp", "2", "--schedule", "zb-v",
                     "--global-batch", "192"], True),
    "dualpipe": (GPT2 + ["--pp", "2", "--vpp", "2", "--schedule", "dualpipe",
                         "--global-batch", "256"], True),
    "cp": (GPT2 + ["--pp", "2", "--cp", "2", "--global-batch", "96"], True),
    "overlaps": (GPT2 + ["--tp", "2", "--pp", "2", "--global-batch", "96",
                         "--sequence-parallel", "--distributed-optimizer",
                         "--overlap-grad-reduce", "--overlap-param-gather",
                         "--tp-comm-overlap"], True),
    "defer-embedding-wgrad": (GPT2 + ["--pp", "2", "--global-batch", "192",
                                      "--defer-embedding-wgrad-compute"], True),
    "moe": (MOE + ["--pp", "2", "--ep", "2", "--global-batch", "192"], True),
    # all forwards, then all backwards: its counts do not step equally (the full run)
    "gpipe": (GPT2 + ["--tp", "2", "--pp", "2", "--schedule", "gpipe", "--recompute",
                      "full", "--global-batch", "96"], False),
}


def _spy(monkeypatch) -> list[tuple[list[int], bool]]:
    """Every extrapolation: the short runs' microbatch counts and whether it was taken."""
    seen = []
    real = periodic_run.extrapolate

    def spy(results, n, full=False):
        out = real(results, n, full)
        seen.append(([r.program.microbatches for r in results], out is not None))
        return out

    monkeypatch.setattr(periodic_run, "extrapolate", spy)
    return seen


def _run(args, tmp_path, name, capsys) -> tuple[bytes, str]:
    out = tmp_path / f"{name}.json"
    assert main([*args, "--json", str(out)]) == 0
    return out.read_bytes(), capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(CASES))
def test_report_equals_the_full_simulation(name, tmp_path, capsys, monkeypatch):
    args, taken = CASES[name]
    seen = _spy(monkeypatch)
    short_json, short_text = _run(args, tmp_path, "short", capsys)
    # the first window (M0, M0 + k, M0 + 2k); where it does not step evenly, the window one
    # period later (M0 + k, M0 + 2k, M0 + 3k); the last one tried decides
    assert 1 <= len(seen) <= 2 and seen[-1][1] is taken, seen
    assert not any(ok for _, ok in seen[:-1])
    if len(seen) == 2:
        assert seen[1][0] == [m + seen[0][0][1] - seen[0][0][0] for m in seen[0][0]]
    full_json, full_text = _run([*args, "--full-simulation"], tmp_path, "full", capsys)
    assert len(seen) <= 2  # --full-simulation: no short runs
    assert short_json == full_json
    assert short_text == full_text


def test_timing_says_what_was_simulated(capsys):
    args = CASES["1f1b"][0]  # M = 192 / 4 = 48, k = PP = 2: M0 = 4 (≥ 2·PP)
    assert main([*args, "--quiet", "--timing"]) == 0
    err = capsys.readouterr().err
    assert "extrapolated from short runs of 4, 6, 8 microbatches" in err
    assert main([*args, "--quiet", "--timing", "--full-simulation"]) == 0
    assert "extrapolated" not in capsys.readouterr().err


@pytest.mark.parametrize("extra", [
    # its effect depends on the microbatch count
    ["--defer-embedding-wgrad-compute", "--wgrad-deferral-limit", "2"],
    ["--slow-gpu", "3:1.5"],  # faults
    ["--plot", "PLOT"],  # a timeline shows every microbatch
    ["--global-batch", "32"],  # M = 8: three short runs would not save 1.5×
])
def test_not_taken(extra, tmp_path, monkeypatch):
    seen = _spy(monkeypatch)
    args = [a for a in CASES["1f1b"][0]]
    if "--global-batch" in extra:
        i = args.index("--global-batch")
        args[i + 1] = extra[1]
        extra = []
    extra = [str(tmp_path / "t.png") if a == "PLOT" else a for a in extra]
    assert main([*args, *extra, "--quiet"]) == 0
    assert seen == []


def test_watchdog_sees_the_full_iteration(capsys):
    """An iteration longer than --max-sim-time-s stops with the watchdog's error, as the full
    simulation does, although the short runs end before the limit."""
    args = CASES["1f1b"][0]
    assert main([*args, "--quiet", "--json", "-"]) == 0
    it = json.loads(capsys.readouterr().out)["iteration_time_s"]
    limit = f"{it * 0.7:.6f}"  # past the 10-microbatch short run, before the 48-microbatch end
    assert main([*args, "--quiet", "--max-sim-time-s", limit]) == 2
    assert "watchdog" in capsys.readouterr().err
    assert main([*args, "--quiet", "--max-sim-time-s", limit, "--full-simulation"]) == 2


def test_workload_file_not_taken(monkeypatch):
    seen = _spy(monkeypatch)
    assert main(["--workload", str(WORKLOADS / "aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt"),
                 "--topo", str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--quiet"]) == 0
    assert seen == []


def test_short_counts_and_counter_steps():
    # M = 128, k = PP = 4: M0 = 128 mod 4 = 0 → 8 (the first ≥ 2·4); the first window
    # 8 + 12 + 16 = 36 microbatches, 36 · 1.5 ≤ 128
    assert short_counts(128, 4, 4) == (8, 12, 16, 20)
    # M = 30: M0 = 10, the first window 10 + 14 + 18 = 42 microbatches > 30 / 1.5
    assert short_counts(30, 4, 4) is None
    assert short_counts(64, 2, 4) == (8, 10, 12, 14)  # (8 + 10 + 12) · 1.5 = 45 ≤ 64
    assert short_counts(128, 8, 8) == (16, 24, 32, 40)  # 72 · 1.5 = 108 ≤ 128
    assert short_counts(100, 8, 8) is None  # M0 = 20: (20 + 28 + 36) · 1.5 = 126 > 100
    # with a tolerance, later windows while all short runs stay within the full run's M:
    # M = 192, k = 8: 16 + 24 + 32 + 40 = 112, + 48 = 160 ≤ 192, + 56 = 216 > 192
    assert later_windows((16, 24, 32, 40), 192) == (16, 24, 32, 40, 48)
    # M = 128, k = 4: 56, + 24 = 80, + 28 = 108 ≤ 128, + 32 = 140 > 128
    assert later_windows((8, 12, 16, 20), 128) == (8, 12, 16, 20, 24, 28)
    assert later_windows((16, 24, 32, 40), 150) == (16, 24, 32, 40)  # 160 > 150
    a, b, c = {"x": 5, "y": 1}, {"x": 8, "y": 1}, {"x": 11, "y": 1}
    assert extrapolate_counts([a, b, c], 10) == {"x": 35, "y": 1}
    assert extrapolate_counts([a, b, {"x": 12, "y": 1}], 10) is None  # unequal steps
    assert extrapolate_counts([a, b, {"y": 1, "x": 11}], 10) is None  # keys in another order

"""The terminal summary: units in headers, the numbers of the report, the assumptions."""

from __future__ import annotations

import json
import re

import pytest
from conftest import SEED_1024, TOPOLOGIES, WORKLOADS

from sim.assumption import Assumption as A
from sim.cli import main
from sim.comm import GroupKind
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork
from sim.report import build_report, format_report
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program


def stage(i, compute, tp, dp, bubble, it):
    busy = it - bubble
    return {"stage": i, "rank": 8 * i, "compute_s": compute, "optimizer_s": 0.01,
            "exposed_comm_s": {"TP": tp, "DP": dp, "EP": 0.0, "DP_EP": 0.0, "PP": 0.0},
            "bubble_s": bubble, "bubble_fraction": bubble / busy, "idle_fraction": bubble / it,
            "finish_time_s": it - 0.1 * i}


def synthetic(**extra):
    it = 1.5
    rep = {"simrun_version": "0.1.0", "workload": "w.txt", "topology": "t.yaml",
           "iteration_time_s": it, "bubble_fraction": 0.0, "ideal_bubble_fraction": 0.5,
           "ideal_bubble_formula": "(p-1)/M", "pipeline_stages": 2, "microbatches": 2,
           "virtual_pipeline_size": 1, "schedule": "1f1b",
           "parallelism": {"tp": 8, "pp": 2, "dp": 1, "ep": 1, "world_size": 16},
           "stages": [stage(0, 1.0, 0.2, 0.09, 0.2, it), stage(1, 0.9, 0.3, 0.09, 0.2, it)],
           "layers": [], "assumptions": ["first assumption", "second (with units: ns)"]}
    rep["bubble_fraction"] = sum(s["bubble_fraction"] for s in rep["stages"]) / 2
    rep.update(extra)
    return rep


def row(text, name):
    """The value of the headline line whose quantity is ``name``."""
    for line in text.splitlines():
        if line.startswith(f"  {name}  "):
            return line[len(name) + 2:].strip()
    raise AssertionError(f"no line {name!r} in\n{text}")


def test_headline_has_values_units_and_the_ideal():
    text = format_report(synthetic(tokens_per_s=12345.67, mfu=0.4321, hfu=0.45,
                                   peak_tflops_per_gpu=312.0, tflops_per_gpu=134.8))
    assert row(text, "iteration time") == "1500.000 ms"
    assert row(text, "throughput") == "12345.7 tokens/s (whole cluster)"
    assert row(text, "MFU / HFU") == ("43.21% / 45.00% of 312 TFLOP/s peak (134.80 model "
                                      "TFLOP/s per GPU)")
    # 0.2 / 1.3 on both stages; ideal (p-1)/M = 1/2; idle 0.2 / 1.5 = 13.3%
    assert row(text, "bubble") == (
        "0.1538 of the busy time (pipeline bubble; ideal (p-1)/M = 0.5000, p = 2, M = 2); idle "
        "13.3% of the iteration (all waits for other stages)")
    # TP: mean of 0.2 s and 0.3 s = 250 ms = 16.7% of 1.5 s; DP 90 ms = 6.0%; largest first
    assert row(text, "exposed comm") == ("TP 250.000 ms (16.7%), DP 90.000 ms (6.0%), mean "
                                         "over stages")
    # compute (1.0 + 0.9) / 2 / 1.5 = 63.3%; losses: TP 16.7%, idle 13.3%
    assert row(text, "bottleneck") == (
        "compute is 63.3% of the iteration; the largest loss is exposed tensor-parallel "
        "communication (16.7%), then idle time waiting for other stages (13.3%)")


def test_no_throughput_lines_without_model_numbers():
    text = format_report(synthetic())
    assert "throughput" not in text and "MFU" not in text and "memory per GPU" not in text


def test_memory_against_capacity():
    mem = {"capacity_bytes": 80e9, "peak_stage": 1, "peak_bytes": {
        "weights_bytes": 5e9, "grads_bytes": 10e9, "optimizer_bytes": 2e9,
        "activations_bytes": 13e9, "reserved_bytes": 2e9, "total_bytes": 32e9}}
    assert row(format_report(synthetic(memory=mem)), "memory per GPU") == (
        "32.0 of 80.0 GB (40%) on stage 1: weights 5.0, gradients 10.0, optimizer 2.0, "
        "activations 13.0, reserved 2.0 GB")


def test_singular_microbatch():
    assert "schedule 1f1b, 1 microbatch\n" in format_report(synthetic(microbatches=1))
    assert "schedule 1f1b, 2 microbatches\n" in format_report(synthetic())


def test_small_shares_keep_two_decimals():
    rep = synthetic(healthy_iteration_time_s=1.4994, fault_slowdown_s=0.0006,
                    faults=["failed NIC 1.0"])
    # 0.6 ms of 1499.4 ms = 0.04%
    assert row(format_report(rep), "iteration time") == (
        "1500.000 ms, 0.600 ms (0.04%) longer than the healthy 1499.400 ms")


def test_stage_table_headers_carry_units_and_rows_sum_to_the_iteration():
    text = format_report(synthetic())
    lines = text.splitlines()
    i = lines.index("per stage (ms; each row sums to the iteration time):")
    head = lines[i + 1].split()
    assert head == ["stage", "rank", "compute_ms", "optimizer_ms", "TP_exposed_ms",
                    "DP_exposed_ms", "idle_ms", "bubble_frac"]
    rows = [ln.split() for ln in lines[i + 2:i + 5]]
    assert [r[0] for r in rows] == ["0", "1", "mean"]
    assert [r[1] for r in rows[:2]] == ["0", "8"]
    for r in rows[:2]:
        assert sum(float(x) for x in r[2:7]) == pytest.approx(1500.0, abs=1e-6)
    assert rows[2][1:4] == ["950.000", "10.000", "250.000"]


def test_default_lists_three_assumptions_verbose_all_verbatim():
    # typed lines (sim.assumption): the summary reads their keys, not their words
    rep = synthetic(assumptions=[A("schedule: 1f1b", "schedule"),
                                 A("TP communication per Megatron", "tp-comm"), "x", "y",
                                 A("compute model (A100): roofline", "compute-model")])
    short = format_report(rep).split("assumptions that matter most (3 of 5; --verbose lists "
                                     "all):\n", 1)[1].splitlines()
    # largest parts first: compute 63.3%, exposed TP 16.7%, idle 13.3%
    assert short == ["  - compute model (A100): roofline", "  - TP communication per Megatron",
                     "  - schedule: 1f1b"]
    tail = format_report(rep, verbose=True).split("assumptions:\n", 1)[1].splitlines()
    assert tail == [f"  - {a}" for a in rep["assumptions"]]


def test_departures_from_the_input_are_always_listed():
    rep = synthetic(assumptions=[A("schedule: 1f1b", "schedule"), "a",
                                 A("header vpp: 8 cannot be a virtual pipeline size here",
                                   "header-vpp", departs=True),
                                 A("WARNING: NIC faster than its port", "topology-warning",
                                   departs=True),
                                 A("compute model (A100): roofline", "compute-model"),
                                 A("TP communication", "tp-comm")])
    short = format_report(rep).split("--verbose lists all):\n", 1)[1].splitlines()
    assert short[:2] == ["  - header vpp: 8 cannot be a virtual pipeline size here",
                         "  - WARNING: NIC faster than its port"]
    assert len(short) == 5


def test_many_stages_show_first_last_busiest_and_latest_by_default():
    it = 1.5
    stages = [stage(i, 1.0, 0.1, 0.09, 0.3, it) for i in range(8)]
    stages[5] = stage(5, 1.2, 0.1, 0.09, 0.1, it)  # busiest
    stages[3]["finish_time_s"] = it  # last to finish
    stages[0]["finish_time_s"] = it - 0.2
    rep = synthetic(stages=stages, pipeline_stages=8)
    lines = format_report(rep).splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("per stage"))
    assert "the busiest (5), the last to finish (3); --verbose lists all 8" in lines[i]
    assert [ln.split()[0] for ln in lines[i + 2:i + 7]] == ["0", "3", "5", "7", "mean"]
    verbose = format_report(rep, verbose=True).splitlines()
    j = verbose.index("per stage (ms; each row sums to the iteration time):")
    assert [ln.split()[0] for ln in verbose[j + 2:j + 11]] == [*map(str, range(8)), "mean"]


def test_generated_model_layers_are_totals_per_operator_type():
    def layer(name, f):
        return {"name": name, "stages": "0", "count": 2, "forward_s": f, "input_grad_s": f,
                "weight_grad_s": 0.0, "exposed_comm_s": {"TP": 0.001}}
    layers = [layer("embedding", 0.01), layer("layer0_attn_qkv", 0.1),
              layer("layer1_attn_qkv", 0.2), layer("layer0_mlp_fc1", 0.3)]
    text = format_report(synthetic(layers=layers, model={"name": "m"}), verbose=True)
    rows = {ln.split()[0]: ln.split() for ln in text.splitlines()[1:]
            if ln.startswith("  ") and len(ln.split()) == 7}
    assert rows["attn_qkv"][1:5] == ["2", "4", "300.000", "300.000"]
    assert rows["mlp_fc1"][1:4] == ["1", "2", "300.000"]
    assert "layer0_attn_qkv" not in text
    by_name = format_report(synthetic(layers=layers), verbose=True)  # a workload file's layers
    assert "per layer (" in by_name and "  layer0_attn_qkv  " in by_name
    assert "per layer" not in format_report(synthetic(layers=layers))  # not by default


def test_fault_run_shows_the_slow_ranks_row_and_says_what_delayed_it(capsys):
    assert main(["--workload", str(SEED_1024), "--topo", str(TOPOLOGIES / "dgx-a100-1024.yaml"),
                 "--slow-gpu", "300:1.5"]) == 0
    text = capsys.readouterr().out
    rep_it = row(text, "iteration time")
    slow = float(rep_it.split(", ")[1].split(" ms")[0])
    assert "longer than the healthy" in rep_it
    assert (f"what delayed it: slow GPU 300: compute × 1.5; the iteration takes {slow:.3f} ms"
            in text)
    assert "rank 300 (stage 4) sets the pace" in text
    assert "pipeline's bottleneck" not in text and "most work" not in text
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("per stage"))
    head = lines[i + 1].split()
    own = next(ln.split() for ln in lines[i + 2:] if ln.split()[:2] == ["4", "300"])
    rep4 = next(ln.split() for ln in lines[i + 2:] if ln.split()[:1] == ["4"]
                and ln.split()[1] != "300")
    compute = float(dict(zip(head, own, strict=True))["compute_ms"])
    base = float(dict(zip(head, rep4, strict=True))["compute_ms"])
    assert f"rank 300 (stage 4) computes {compute:.3f} ms against {base:.3f} ms" in text
    # the slow GPU computes 1.5 × its healthy stage-mate (the factor applies to compute kernels)
    assert compute == pytest.approx(1.5 * base, rel=1e-3)
    # its bubble over busy time counts its own pipeline span: never negative
    assert float(dict(zip(head, own, strict=True))["bubble_frac"]) >= 0
    assert len(lines) <= 30 and max(map(len, lines)) <= 200


def test_fault_run_says_where_the_time_went_against_the_healthy_run(capsys, tmp_path):
    base = ["--workload", str(SEED_1024), "--topo", str(TOPOLOGIES / "dgx-a100-1024.yaml")]
    assert main([*base, "--json", str(tmp_path / "healthy.json"), "--quiet"]) == 0
    assert main([*base, "--slow-gpu", "300:1.5", "--json", str(tmp_path / "slow.json")]) == 0
    text = capsys.readouterr().out
    healthy, slow = (json.loads((tmp_path / f).read_text()) for f in ("healthy.json",
                                                                       "slow.json"))

    def mean_ms(rep, key):
        return sum(key(s) for s in rep["stages"]) / len(rep["stages"]) * 1e3

    def dp(s):
        return s["exposed_comm_s"]["DP"]

    line = next(ln for ln in text.splitlines() if "against the healthy run" in ln)
    # the other ranks of rank 300's DP groups wait for it in the gradient reduction
    got = float(re.search(r"exposed DP \+([\d.]+) ms", line)[1])
    assert got == pytest.approx(mean_ms(slow, dp) - mean_ms(healthy, dp), abs=2e-3)
    assert got > 0.5 * (slow["iteration_time_s"] - healthy["iteration_time_s"]) * 1e3


def test_seed_report_table_matches_the_report():
    prog = build_program(read_workload(SEED_1024), LayoutOptions())
    res = simulate(prog, AlphaBetaNetwork(1000, {g: 100.0 for g in GroupKind}))
    rep = build_report(res, workload=str(SEED_1024), topology="alpha-beta")
    assert row(format_report(rep), "iteration time") == f"{rep['iteration_time_s'] * 1e3:.3f} ms"
    text = format_report(rep, verbose=True)
    lines = text.splitlines()
    i = lines.index("per stage (ms; each row sums to the iteration time):")
    head = lines[i + 1].split()
    rows = [ln.split() for ln in lines[i + 2:i + 2 + 16]]
    assert [int(r[0]) for r in rows] == list(range(16))
    it_ms = rep["iteration_time_s"] * 1e3
    for r, s in zip(rows, rep["stages"], strict=True):
        cells = dict(zip(head, r, strict=True))
        assert float(cells["compute_ms"]) == pytest.approx(s["compute_s"] * 1e3, abs=5e-4)
        assert float(cells["TP_exposed_ms"]) == pytest.approx(
            s["exposed_comm_s"]["TP"] * 1e3, abs=5e-4)
        ms = [float(cells[h]) for h in head if h.endswith("_ms")]
        assert sum(ms) == pytest.approx(it_ms, abs=5e-4 * len(ms))


def test_readme_model_example_prints_a_short_summary_and_verbose_has_the_rest(capsys):
    args = ["--model", str(WORKLOADS / "models" / "gpt3-175b.yaml"), "--topo",
            str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--tp", "8", "--pp", "8", "--vpp", "3",
            "--global-batch", "1536", "--sequence-parallel", "--recompute", "selective",
            "--distributed-optimizer"]
    assert main(args) == 0
    short = capsys.readouterr().out.splitlines()
    assert len(short) <= 30 and max(map(len, short)) <= 200
    for q in ("iteration time", "throughput", "MFU / HFU", "memory per GPU", "bubble",
              "exposed comm", "bottleneck"):
        assert any(ln.startswith(f"  {q}  ") for ln in short), q
    assert main([*args, "--verbose"]) == 0
    full = capsys.readouterr().out
    assert "per operator type, summed over layers" in full and "  attn_qkv  " in full
    assert "layer0_" not in full
    assert full.count("\n  - ") > 30  # every assumption
    stage_rows = [ln for ln in full.splitlines() if re.match(r"  [0-7] ", ln)]
    assert len(stage_rows) == 8  # every stage


def test_set_overrides_are_always_in_the_short_report(capsys):
    assert main(["--workload", str(SEED_1024), "--topo", str(TOPOLOGIES / "dgx-a100-1024.yaml"),
                 "--set", "fabric.link_bandwidth_gbps=400"]) == 0
    text = capsys.readouterr().out
    assert "  - topology override (--set): fabric.link_bandwidth_gbps = 400 (file: 200)" in text
    assert len(text.splitlines()) <= 30


def test_long_departures_are_wrapped_not_cut():
    long = "WARNING: " + " ".join(f"word{i}" for i in range(60))  # about 420 characters
    rep = synthetic(assumptions=[A(long, "topology-warning", departs=True),
                                 A("schedule: 1f1b", "schedule"),
                                 A("compute model: x" + "y" * 300, "compute-model")])
    lines = format_report(rep).splitlines()
    assert max(map(len, lines)) <= 200
    i = next(k for k, ln in enumerate(lines) if ln.startswith("  - WARNING: word0 "))
    assert lines[i + 1].startswith("    word") and lines[i + 2].startswith("    word")
    kept = " ".join(ln.strip() for ln in lines[i:i + 3])
    assert kept == "- " + long
    assert any(ln.endswith("…") and ln.startswith("  - compute model: x") for ln in lines)


def test_a_bubble_larger_than_the_busy_time_is_said_as_a_multiple():
    # p = 8, M = 1 (the 512-GPU AICB example): the bubble is 7 times the busy time
    text = format_report(synthetic(bubble_fraction=7.0, ideal_bubble_fraction=7.0,
                                   pipeline_stages=8, microbatches=1))
    assert row(text, "bubble").startswith("7.00× the busy time (pipeline bubble; ideal (p-1)/M "
                                          "= 7.0000, p = 8, M = 1)")

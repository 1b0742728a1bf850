"""Sweeps a person can act on: ``--limit 0`` (count and list), swept training options (lists
and ``--vary``), the early feasibility pass, ``--memory-headroom`` and the compact table."""

from __future__ import annotations

import json

import pytest
from conftest import TOPOLOGIES, WORKLOADS

from sim.cli import main
from sim.errors import UsageError
from sim.models import load_model
from sim.sweep import SweepContext, Training
from sim.sweep import SweepPoint as Layout
from sim.sweep.evaluate import evaluate, infeasible_row
from sim.sweep.output import DEFAULT_HEADROOM_GB, ranked, table_lines
from sim.sweep.variants import split_argv
from sim.topology import load_topology

GPT2 = str(WORKLOADS / "models" / "gpt2-medium.yaml")
TINY = str(TOPOLOGIES / "tiny-fattree-8.yaml")
BASE = ["sweep", "--model", GPT2, "--topo", TINY, "--gpus", "8", "--tp", "1,2", "--pp", "1,2",
        "--global-batch", "16", "--no-progress", "--no-plot", "--workers", "1"]


def test_limit_0_counts_and_lists_without_simulating_or_writing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*BASE, "--limit", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    # TP {1,2} × PP {1,2} on 8 GPUs: 4 layouts, all valid
    assert out[0].startswith("4 valid layouts (0 combinations skipped as invalid): 4 fit in")
    assert "nothing simulated (--limit 0)" in out[0]
    assert sorted(line.split()[0] for line in out[1:]) == [
        "tp1-pp1-dp8-vpp1-mb1", "tp1-pp2-dp4-vpp1-mb1", "tp2-pp1-dp4-vpp1-mb1",
        "tp2-pp2-dp2-vpp1-mb1"]
    assert list(tmp_path.iterdir()) == []  # no results directory


def test_split_argv_derives_dimensions_from_the_declarations():
    vs = split_argv(["--recompute", "none,selective", "--vary", "sequence-parallel",
                     "--dtype=bf16"])
    assert [v.label for v in vs] == [
        (("recompute", "none"), ("sequence_parallel", "off")),
        (("recompute", "none"), ("sequence_parallel", "on")),
        (("recompute", "selective"), ("sequence_parallel", "off")),
        (("recompute", "selective"), ("sequence_parallel", "on"))]
    assert vs[3].argv == ("--recompute", "selective", "--dtype=bf16", "--sequence-parallel")
    assert split_argv(["--dtype=bf16,fp8"])[1].argv == ("--dtype=fp8",)
    assert [v.label for v in split_argv(["--tp", "1,2"])] == [()]  # layout lists: not here
    with pytest.raises(UsageError, match="not a training switch"):
        split_argv(["--vary", "recompute"])
    with pytest.raises(UsageError, match="leave the flag out"):
        split_argv(["--vary", "sequence-parallel", "--sequence-parallel"])


def test_swept_training_options_equal_the_sweeps_with_them_fixed(tmp_path, capsys):
    out = tmp_path / "v"
    assert main([*BASE, "--tp", "2", "--pp", "1", "--recompute", "none,full", "--vary",
                 "sequence-parallel", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    rows = {r["layout"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert len(rows) == 4
    for rec in ("none", "full"):
        for sp in ("off", "on"):
            key = f"tp2-pp1-dp4-vpp1-mb1-recompute-{rec}-sequence_parallel-{sp}"
            row = rows[key]
            assert (row["recompute"], row["sequence_parallel"]) == (rec, sp)
            fixed = tmp_path / f"{rec}-{sp}"
            argv = [*BASE, "--tp", "2", "--pp", "1", "--recompute", rec, "--out", str(fixed)]
            assert main(argv + (["--sequence-parallel"] if sp == "on" else [])) == 0
            (one,) = json.loads((fixed / "results.json").read_text())["rows"]
            for k in ("iteration_time_s", "memory_per_gpu_bytes", "events", "mfu"):
                assert row[k] == one[k], (key, k)
    # the table has a column per swept option
    head = next(line for line in table.splitlines() if "iter_time_s" in line)
    assert "recompute" in head and "sequence_parallel" in head
    # full recomputation keeps less: less memory, more time than none
    a = rows["tp2-pp1-dp4-vpp1-mb1-recompute-none-sequence_parallel-off"]
    b = rows["tp2-pp1-dp4-vpp1-mb1-recompute-full-sequence_parallel-off"]
    assert b["memory_per_gpu_bytes"] < a["memory_per_gpu_bytes"]
    assert b["iteration_time_s"] > a["iteration_time_s"]


def test_early_pass_rows_are_the_evaluated_rows():
    # Llama 3 70B on 32 H100: TP 1 PP 4 does not fit (17.5 B parameters per GPU); TP 8 PP 4
    model = load_model("llama3-70b")
    topo = load_topology(str(TOPOLOGIES / "dgx-h100-scalable.yaml"), nodes=4)
    ctx = SweepContext(model, topo, Training(global_batch=8, sequence_parallel=True))
    bad, good = Layout(1, 4, 8), Layout(8, 4, 1)
    row = infeasible_row(ctx, bad)
    assert row is not None and row["status"] == "infeasible"
    full = evaluate(ctx, bad)
    assert {k: v for k, v in row.items() if k != "elapsed_s"} == {
        k: v for k, v in full.items() if k != "elapsed_s"}
    assert infeasible_row(ctx, good) is None  # has to be simulated


GB = 10**9


def _row(key, t, used_gb, status="ok", reason=""):
    return {"layout": key, "status": status, "tp": 1, "pp": 1, "dp": 8, "vpp": 1, "ep": 1,
            "micro_batch": 1, "iteration_time_s": t if status == "ok" else None,
            "memory_per_gpu_bytes": int(used_gb * GB), "memory_capacity_bytes": 80 * GB,
            "reason": reason, "mfu": 0.4, "tokens_per_s": 1.0, "bubble_fraction": 0.1}


def test_headroom_ranks_layouts_with_the_margin_first_and_flags_the_others():
    assert DEFAULT_HEADROOM_GB == 2.5
    rows = ranked([_row("fast-tight", 1.0, 79.4), _row("slow-safe", 1.2, 60.0),
                   _row("mid-tight", 1.1, 77.6), _row("oom", 0, 90.0, "infeasible", "too big")],
                  headroom_bytes=int(2.5 * GB))
    assert [(r["layout"], r["rank"]) for r in rows] == [
        ("slow-safe", 1), ("fast-tight", 2), ("mid-tight", 3), ("oom", None)]
    assert [r.get("memory_within_headroom", False) for r in rows] == [False, True, True, False]
    # a zero headroom: by time only
    assert [r["layout"] for r in ranked(rows, 0)][:3] == ["fast-tight", "mid-tight",
                                                          "slow-safe"]
    lines = table_lines(rows, headroom_bytes=int(2.5 * GB))
    assert "79.4!" in lines[2] and "60.0!" not in lines[1]
    assert any(line.startswith("! within 2.5 GB") for line in lines)
    assert lines[-1].startswith("1 layout infeasible (e.g. oom: too big); --show-infeasible")
    full = table_lines(rows, headroom_bytes=int(2.5 * GB), show_infeasible=True)
    assert full[-1] == "infeasible  oom: too big"


def test_table_shows_every_swept_dimension():
    rows = ranked([_row("a", 1.0, 10) | {"cp": 2}, _row("b", 2.0, 10)])
    head = table_lines(rows)[0].split()
    assert head[:3] == ["rank", "layout", "cp"]  # tp, pp, ... equal in both rows: not shown
    assert table_lines(rows)[1].split()[2] == "2" and table_lines(rows)[2].split()[2] == "1"

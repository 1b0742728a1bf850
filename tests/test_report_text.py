"""The terminal summary: units in headers, the numbers of the report, the assumptions."""

from __future__ import annotations

import re

import pytest
from conftest import SEED_1024

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
            "bubble_s": bubble, "bubble_fraction": bubble / busy, "finish_time_s": it - 0.1 * i}


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
    """The cells of the headline-table row whose quantity is ``name``."""
    for line in text.splitlines():
        if line.startswith(f"  {name}  "):
            return re.split(r"\s{2,}", line.strip())
    raise AssertionError(f"no row {name!r} in\n{text}")


def test_headline_table_has_values_units_and_the_ideal():
    text = format_report(synthetic(tokens_per_s=12345.67, mfu=0.4321, tflops_per_gpu=134.8))
    assert row(text, "quantity") == ["quantity", "value", "unit", "note"]
    assert row(text, "iteration time") == ["iteration time", "1500.000", "ms"]
    assert row(text, "throughput")[1:3] == ["12345.7", "tokens/s"]
    assert row(text, "MFU")[1:3] == ["43.21", "%"]
    assert row(text, "model FLOP rate per GPU")[1:3] == ["134.80", "TFLOP/s"]
    assert row(text, "bubble fraction")[1] == "0.1538"  # 0.2 / 1.3 on both stages
    ideal = row(text, "ideal bubble fraction")
    assert ideal[1] == "0.5000" and ideal[3].startswith("(p-1)/M, p = 2, M = 2")
    tp = row(text, "exposed TP comm")
    assert tp[1:3] == ["250.000", "ms"]  # mean of 0.2 s and 0.3 s
    assert "16.7% of the iteration" in tp[3] and "max 300.000 ms on stage 1" in tp[3]
    assert row(text, "exposed DP comm")[1] == "90.000"
    assert "exposed EP comm" not in text and "exposed PP comm" not in text  # all zero
    assert row(text, "busiest stage")[1] == "0"  # both busy 1.3 s: the lower stage
    assert row(text, "last stage to finish")[1] == "0"


def test_no_throughput_rows_without_model_numbers():
    text = format_report(synthetic())
    assert "throughput" not in text and "MFU" not in text


def test_stage_table_headers_carry_units_and_rows_sum_to_the_iteration():
    text = format_report(synthetic())
    lines = text.splitlines()
    i = lines.index("per stage (each row sums to the iteration time):")
    head = lines[i + 1].split()
    assert head == ["stage", "compute_ms", "optimizer_ms", "TP_exposed_ms", "DP_exposed_ms",
                    "bubble_ms", "bubble_frac"]
    rows = [ln.split() for ln in lines[i + 2:i + 5]]
    assert [r[0] for r in rows] == ["0", "1", "mean"]
    for r in rows[:2]:
        assert sum(float(x) for x in r[1:6]) == pytest.approx(1500.0, abs=1e-6)
    assert rows[2][1:4] == ["950.000", "10.000", "250.000"]


def test_assumptions_are_listed_verbatim():
    text = format_report(synthetic())
    tail = text.split("assumptions:\n", 1)[1].splitlines()
    assert tail == ["  - first assumption", "  - second (with units: ns)"]


def test_seed_report_table_matches_the_report():
    prog = build_program(read_workload(SEED_1024), LayoutOptions())
    res = simulate(prog, AlphaBetaNetwork(1000, {g: 100.0 for g in GroupKind}))
    rep = build_report(res, workload=str(SEED_1024), topology="alpha-beta")
    text = format_report(rep)
    assert row(text, "iteration time")[1] == f"{rep['iteration_time_s'] * 1e3:.3f}"
    lines = text.splitlines()
    i = lines.index("per stage (each row sums to the iteration time):")
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

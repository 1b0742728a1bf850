"""``--trace DIR --trace-format kineto`` (sim/viz/kineto.py): per-rank Kineto-shaped JSON that
HolisticTraceAnalysis (HTA, a test dependency) loads; its temporal breakdown and its
communication/computation overlap agree with simrun's own report and Chrome trace."""

from __future__ import annotations

import json

import pytest

from sim.cli import main

hta = pytest.importorskip("hta.trace_analysis")

RUN = ["--model", "gpt-1.7b", "--topo", "dgx-a100-1024", "--nodes", "1", "--tp", "2",
       "--global-batch", "16", "--micro-batch", "2", "--quiet"]


def _union_us(intervals) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("kineto")
    assert main([*RUN, "--trace", str(d / "k"), "--trace-format", "kineto",
                 "--json", str(d / "r.json")]) == 0
    assert main([*RUN, "--trace", str(d / "c.json")]) == 0
    return d


def test_hta_temporal_breakdown_matches_the_report(runs, monkeypatch):
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # keep simrun's ns (HTA rounds to µs)
    report = json.loads((runs / "r.json").read_text())
    st = report["stages"][0]  # TP 2, DP 4, one stage: rank 0 shows every rank
    events = json.loads((runs / "c.json").read_text())["traceEvents"]
    slowed_us = sum(e["dur"] for e in events if e.get("ph") == "X" and e["tid"] == 2 and
                    e["args"].get("reason") == "slowed by communication")
    assert slowed_us > 0  # DP reductions share the SMs of the last backward's kernels
    t = hta.TraceAnalysis(trace_dir=str(runs / "k"))
    (row,) = t.get_temporal_breakdown(visualize=False).to_dict("records")
    exposed_us = sum(st["exposed_comm_s"].values()) * 1e6
    assert row["kernel_time(us)"] == pytest.approx(report["iteration_time_s"] * 1e6, abs=1e-3)
    assert row["compute_time(us)"] == pytest.approx(
        (st["compute_s"] + st["optimizer_s"]) * 1e6 + slowed_us, abs=1e-3)
    assert row["non_compute_time(us)"] == pytest.approx(exposed_us - slowed_us, abs=1e-3)
    assert row["idle_time(us)"] == pytest.approx(0, abs=1e-3)  # no pipeline: no bubble


def test_hta_comm_comp_overlap_matches_the_chrome_trace(runs, monkeypatch):
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    report = json.loads((runs / "r.json").read_text())
    st = report["stages"][0]
    events = json.loads((runs / "c.json").read_text())["traceEvents"]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and
            e["pid"] == 1 and e["cat"] in ("comm_blocking", "comm_async", "pp_transfer")]
    slowed_us = sum(e["dur"] for e in events if e.get("ph") == "X" and e["tid"] == 2 and
                    e["args"].get("reason") == "slowed by communication")
    comm_us = _union_us(comm)
    # communication that no compute kernel runs beside: the exposed part the compute stream
    # waited for (exposed minus the slowed compute, which does run beside it)
    alone_us = sum(st["exposed_comm_s"].values()) * 1e6 - slowed_us
    t = hta.TraceAnalysis(trace_dir=str(runs / "k"))
    (row,) = t.get_comm_comp_overlap(visualize=False).to_dict("records")
    assert row["comp_comm_overlap_pctg"] == pytest.approx(
        100 * (comm_us - alone_us) / comm_us, abs=0.01)


def test_kineto_files_carry_rank_and_kernel_streams(runs):
    doc = json.loads((runs / "k" / "rank0.trace.json").read_text())
    assert doc["distributedInfo"] == {"backend": "nccl", "rank": 0, "world_size": 8}
    kinds = {e["name"].split(" ")[0] for e in doc["traceEvents"]}
    assert {"forward", "input_grad", "weight_grad", "optimizer"} <= kinds
    assert any(k.startswith("ncclDevKernel_Allreduce") for k in kinds)


def test_trace_format_without_trace_is_refused(capsys):
    assert main([*RUN, "--trace-format", "kineto"]) == 2
    assert "--trace-format" in capsys.readouterr().err

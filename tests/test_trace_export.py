"""Chrome trace export: format rules, bounds, no overlap per track, and sums = the report."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import SEED_512, SEED_1024, TOPOLOGIES, uniform_program
from test_trace_checks import breakdown, process_names, thread_names, validate

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.report import build_report
from sim.viz.trace import build_trace, rank_list, trace_text, write_trace


def hand_case():
    """docs/engine.md worked example: p = 2, M = 2, f = 10, b = 20 ns, transfers 5 ns."""
    prog = uniform_program(2, 2, 10, 20, pp_bytes=5)
    return simulate(prog, AlphaBetaNetwork(0, {GroupKind.PP: 1.0}), record_spans=True)


def tp_dp_program() -> PipelineProgram:
    """One stage, M = 2, layers a, b: 10 ns compute per phase; forward and input-grad end with
    a blocking TP all-reduce of 4 bytes, weight-grad with a non-blocking DP all-reduce of 8
    bytes; the optimizer (5 ns) waits for the DP reductions.

    With α = 0 and 1 GB/s (1 byte/ns), a 2-rank ring all-reduce of S bytes takes S ns:
    TP 4 ns, DP 8 ns. Timeline (ns): F0 [0,28) = a 0-10, TP 10-14, b 14-24, TP 24-28;
    B0 [28,76) = b.ig 28-38, TP 38-42, b.wg 42-52, a.ig 52-62, TP 62-66, a.wg 66-76;
    F1 [76,104); B1 [104,152) issues DP(b) at 128 (runs 128-136) and DP(a) at 152 (152-160);
    the optimizer waits 152-160 (exposed DP 8) and runs 160-165. Iteration 165 ns:
    compute 120, TP 8 × 4 = 32, DP 8, optimizer 5, bubble 0.
    """
    tp = Comm(CollKind.ALLREDUCE, GroupKind.TP, 4)
    dp = Comm(CollKind.ALLREDUCE, GroupKind.DP, 8, blocking=False)
    a = Layer("a", Phase(10, tp), Phase(10, tp), Phase(10, dp))
    b = Layer("b", Phase(10, tp), Phase(10, tp), Phase(10, dp))
    opt = Task("optimizer", TaskKind.OPTIMIZER, compute_ns=5, wait_async=True)
    st = StageProgram(0, [(a, b)], epilogue=(opt,))
    return PipelineProgram(tp=2, pp=1, dp=2, ep=1, vpp=1, microbatches=2, pp_bytes=0,
                           stages=[st], schedule="1f1b")


def tp_dp_case():
    net = AlphaBetaNetwork(0, {GroupKind.TP: 1.0, GroupKind.DP: 1.0, GroupKind.PP: 1.0})
    return simulate(tp_dp_program(), net, record_spans=True)


def assert_sums_match(doc, res, rep):
    """Per shown rank, trace sums == engine ints == report seconds."""
    sums = breakdown(doc)
    by_rank = {st.rank: st for st in res.ranks}
    rep_by_rank = {s["rank"]: s for s in rep["stages"]}
    assert sums, "no events"
    for pid, b in sums.items():
        st = by_rank[pid - 1]
        assert b["compute"] == st.compute_ns
        assert b["optimizer"] == st.optimizer_ns
        assert b["bubble"] == st.bubble_ns
        assert {g: v for g, v in b["exposed"].items() if v} == {
            g.value: v for g, v in st.exposed_comm_ns.items() if v}
        rs = rep_by_rank.get(st.rank)
        if rs is not None:
            assert b["compute"] * 1e-9 == pytest.approx(rs["compute_s"], rel=1e-12, abs=1e-15)
            assert b["bubble"] * 1e-9 == pytest.approx(rs["bubble_s"], rel=1e-12, abs=1e-15)
            for g, v in rs["exposed_comm_s"].items():
                assert b["exposed"].get(g, 0) * 1e-9 == pytest.approx(v, rel=1e-12, abs=1e-15)
        total = b["compute"] + b["optimizer"] + b["bubble"] + sum(b["exposed"].values())
        assert total == res.iteration_ns


def test_hand_worked_case_trace_is_valid_and_sums_to_the_breakdown():
    res = hand_case()
    doc = build_trace(res)
    tracks = validate(doc, res.iteration_ns)
    assert_sums_match(doc, res, build_report(res))
    sums = breakdown(doc)
    # hand-derived (docs/engine.md): stage 0 compute 60, PP 10, bubble 30; stage 1 60, 5, 35
    assert (sums[1]["compute"], sums[1]["exposed"]["PP"], sums[1]["bubble"]) == (60, 10, 30)
    assert (sums[2]["compute"], sums[2]["exposed"]["PP"], sums[2]["bubble"]) == (60, 5, 35)
    assert process_names(doc) == {1: "stage 0 · rank 0", 2: "stage 1 · rank 1"}
    names = thread_names(doc)
    assert names[(1, 1)] == "pipeline ops" and names[(1, 2)] == "compute"
    assert names[(1, 3)] == "PP send"
    ops = [(a, b, e["name"]) for a, b, e in tracks[(2, 1)]]
    assert ops == [(15, 25, "F0"), (25, 45, "B0"), (45, 55, "F1"), (55, 75, "B1")]
    compute = [(a, b, e["name"], e["args"].get("microbatch")) for a, b, e in tracks[(1, 2)]]
    assert compute == [
        (0, 10, "fwd layer", 0), (10, 20, "fwd layer", 1), (20, 45, "bubble", None),
        (45, 50, "exposed PP: transfer in flight", None), (50, 60, "bwd-input layer", 0),
        (60, 70, "bwd-weight layer", 0), (70, 75, "bubble", None),
        (75, 80, "exposed PP: transfer in flight", None), (80, 90, "bwd-input layer", 1),
        (90, 100, "bwd-weight layer", 1)]
    sends = [(a, b, e["name"], e["args"]["bytes"], e["args"]["to_rank"], e["args"]["algbw_GBps"])
             for a, b, e in tracks[(2, 3)]]
    assert sends == [(45, 50, "send B0 → stage 0", 5, 0, 1.0),
                     (75, 80, "send B1 → stage 0", 5, 0, 1.0)]


def test_tp_and_dp_collectives_carry_group_bytes_algorithm_and_bandwidth():
    res = tp_dp_case()
    assert res.iteration_ns == 165
    doc = build_trace(res)
    tracks = validate(doc, 165)
    rep = build_report(res)
    assert_sums_match(doc, res, rep)
    b = breakdown(doc)[1]
    assert (b["compute"], b["optimizer"], b["bubble"]) == (120, 5, 0)
    assert dict(b["exposed"]) == {"TP": 32, "DP": 8}
    names = thread_names(doc)
    tid = {v: k[1] for k, v in names.items() if k[0] == 1}
    tp = [(a, b_, e["name"]) for a, b_, e in tracks[(1, tid["TP comm"])]]
    assert [(a, b_) for a, b_, _ in tp] == [(10, 14), (24, 28), (38, 42), (62, 66), (86, 90),
                                            (100, 104), (114, 118), (138, 142)]
    assert tp[0][2] == "ALLREDUCE a.forward" and tp[2][2] == "ALLREDUCE b.input_grad"
    ev = tracks[(1, tid["TP comm"])][0][2]
    assert ev["cat"] == "comm_blocking"
    assert ev["args"] == {"op": "ALLREDUCE", "group": "TP", "group_size": 2,
                          "group_ranks": "0,1", "bytes": 4, "algorithm": "ring",
                          "exposed": True, "microbatch": 0, "chunk": 0,
                          "algbw_GBps": 1.0, "busbw_GBps": 1.0}  # 2(n-1)/n = 1 for n = 2
    dp = tracks[(1, tid["DP comm"])]
    assert [(a, b_, e["name"], e["cat"]) for a, b_, e in dp] == [
        (128, 136, "ALLREDUCE b.weight_grad", "comm_async"),
        (152, 160, "ALLREDUCE a.weight_grad", "comm_async")]
    assert dp[0][2]["args"]["group_ranks"] == "0,2" and dp[0][2]["args"]["exposed"] is False
    ops = [(a, b_, e["name"]) for a, b_, e in tracks[(1, 1)]]
    assert ops == [(0, 28, "F0"), (28, 76, "B0"), (76, 104, "F1"), (104, 152, "B1")]
    waits = [(a, b_, e["name"]) for a, b_, e in tracks[(1, 2)] if e["cat"] in (
        "exposed_comm", "optimizer")]
    assert waits == [(152, 160, "exposed DP: outstanding gradient reductions"),
                     (160, 165, "optimizer")]


def test_overlapping_transfers_get_their_own_tracks():
    # 100-byte messages at 1 GB/s take 100 ns; ops take 10 ns, so sends overlap
    prog = uniform_program(2, 4, 10, 20, pp_bytes=100)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.PP: 1.0}), record_spans=True)
    doc = build_trace(res)
    tracks = validate(doc, res.iteration_ns)
    names = thread_names(doc)
    pp_tracks = [k for k, v in names.items() if k[0] == 1 and v.startswith("PP send")]
    assert len(pp_tracks) > 1 and names[pp_tracks[1]] == "PP send #2"
    assert sum(len(tracks.get(k, [])) for k in pp_tracks) == 4  # F0..F3 from stage 0
    assert_sums_match(doc, res, build_report(res))


def test_trace_ranks_selects_simulated_ranks_in_per_rank_mode():
    prog = uniform_program(2, 2, 10, 20, pp_bytes=5)
    prog.dp = 2  # ranks: dp + 2·stage (tp-dp-pp order)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.PP: 1.0}), per_rank=True,
                   record_spans=True)
    assert sorted(process_names(build_trace(res, ranks="all"))) == [1, 2, 3, 4]
    doc = build_trace(res, ranks="0,1")
    assert process_names(doc) == {1: "stage 0 · rank 0", 2: "stage 0 · rank 1"}
    validate(doc, res.iteration_ns)
    assert_sums_match(doc, res, build_report(res))
    assert len(process_names(build_trace(res))) == 2  # default: one per stage


def test_trace_ranks_errors_are_usage_errors():
    res = hand_case()
    with pytest.raises(UsageError, match="--per-rank"):
        build_trace(res, ranks="5")
    with pytest.raises(UsageError, match="trace_ranks"):
        build_trace(res, ranks="zero")


def test_rank_list_is_compact():
    assert rank_list([0, 1, 2, 3]) == "0-3"
    assert rank_list(range(0, 64, 8)) == "0..56 step 8"
    assert rank_list([3, 5]) == "3,5"
    assert rank_list([0, 1, 5]) == "0,1,5"


def test_trace_is_byte_identical_across_runs_and_gzip_is_deterministic(tmp_path):
    texts = [trace_text(build_trace(tp_dp_case())) for _ in range(2)]
    assert texts[0] == texts[1]
    json.loads(texts[0])
    for name in ("a.json.gz", "b.json.gz"):
        write_trace(tmp_path / name, build_trace(tp_dp_case()))
    a, b = (tmp_path / "a.json.gz").read_bytes(), (tmp_path / "b.json.gz").read_bytes()
    assert a == b and gzip.decompress(a).decode() == texts[0]


def test_trace_without_spans_is_an_error():
    res = simulate(uniform_program(2, 2, 10, 20), AlphaBetaNetwork(0, {GroupKind.PP: 1.0}))
    with pytest.raises(ValueError, match="record_spans"):
        build_trace(res)


def _cli_trace(tmp_path, workload, topo, *extra):
    trace, rep_path = tmp_path / "t.json", tmp_path / "r.json"
    assert main(["--workload", str(workload), "--topo", str(TOPOLOGIES / topo), "--quiet",
                 "--json", str(rep_path), "--trace", str(trace), *extra]) == 0
    return json.loads(trace.read_text()), json.loads(rep_path.read_text())


def _check_against_report(doc, rep):
    it_ns = round(rep["iteration_time_s"] * 1e9)
    validate(doc, it_ns)
    sums = breakdown(doc)
    assert len(sums) == rep["pipeline_stages"]
    for s in rep["stages"]:
        b = sums[s["rank"] + 1]
        assert b["compute"] * 1e-9 == pytest.approx(s["compute_s"], rel=1e-9)
        assert b["optimizer"] * 1e-9 == pytest.approx(s["optimizer_s"], rel=1e-9)
        assert b["bubble"] * 1e-9 == pytest.approx(s["bubble_s"], rel=1e-9, abs=1e-12)
        for g, v in s["exposed_comm_s"].items():
            assert b["exposed"].get(g, 0) * 1e-9 == pytest.approx(v, rel=1e-9, abs=1e-12)
    return sums


def _x(doc, pid, cat=None, prefix=None):
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid
            and (cat is None or e["cat"] == cat) and (prefix is None
                                                      or e["name"].startswith(prefix))]


def test_seed_1024_trace_matches_the_report(tmp_path):
    doc, rep = _cli_trace(tmp_path, SEED_1024, "dgx-a100-1024.yaml")
    _check_against_report(doc, rep)
    pid1 = rep["stages"][1]["rank"] + 1
    # a middle stage runs the 32 transformer rows of the block (8 × attention_column,
    # attention_row, mlp_column, mlp_row) for each of the 16 microbatches, in each phase
    for cat in ("forward", "input_grad", "weight_grad"):
        assert len(_x(doc, pid1, cat)) == 16 * 32
    assert len(_x(doc, pid1, "op")) == 32  # F0..F15, B0..B15
    # pipeline sends: first stage 16 activations, last 16 gradients, middle 32
    sends = [len(_x(doc, s["rank"] + 1, "pp_transfer")) for s in rep["stages"]]
    assert sends == [16] + [32] * 14 + [16]
    tp = _x(doc, pid1, "comm_blocking")
    assert tp and all(e["args"]["group"] == "TP" and e["args"]["group_size"] == 8
                      and e["args"]["bytes"] > 0 and e["args"]["algorithm"]
                      and e["args"]["algbw_GBps"] > 0 for e in tp)


def test_seed_512_interleaved_trace_matches_the_report(tmp_path):
    doc, rep = _cli_trace(tmp_path, SEED_512, "dgx-a100-512.yaml", "--microbatches", "8")
    assert rep["schedule"] == "interleaved" and rep["virtual_pipeline_size"] == 8
    _check_against_report(doc, rep)
    pid = rep["stages"][3]["rank"] + 1
    ops = sorted(e["name"] for e in _x(doc, pid, "op"))
    assert ops == sorted(f"{d}{m}.{c}" for d in "FB" for m in range(8) for c in range(8))

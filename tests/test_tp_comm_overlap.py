"""Megatron-Core --tp-comm-overlap (Transformer Engine userbuffers): each overlap method and the
SM interference on hand-derived timelines, the generated layers' pairing, the refusals, and
that turning it on never makes an iteration slower."""

import json

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.engine.overlap import overlapped_ns
from sim.errors import UsageError
from sim.models import build_model_plan, load_model
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import GemmOverlap, Layer, Phase

TOPO = str(ROOT / "topologies" / "dgx-a100-1024.yaml")
GPT22 = str(ROOT / "workloads" / "models" / "gpt-22b.yaml")


def test_overlap_formulas_hand_derived():
    # ring exchange, TP 2: one transfer of C beside half the GEMM, then the other half alone
    assert overlapped_ns("ring_exchange", 40, 60, 2, 132, 0) == 60 + 20
    assert overlapped_ns("ring_exchange", 40, 20, 2, 132, 0) == 20 + 20  # hidden
    # ring exchange, TP 4: 3 transfers of 30 beside GEMM chunks of 10, last chunk alone
    assert overlapped_ns("ring_exchange", 40, 90, 4, 132, 0) == 3 * 30 + 10
    # pipeline, 4 splits, GEMM at 3/4 speed while a chunk's reduce-scatter (8) runs: a step is
    # 8 + (10 − 8·3/4) = 12; first GEMM chunk and last reduce-scatter chunk alone
    assert overlapped_ns("pipeline", 40, 32, 4, 4, 1) == 10 + 3 * 12 + 8
    # bulk: GEMM at 3/4 speed for the collective's 20 ns, then the rest alone: 20 + 40 − 15
    assert overlapped_ns("bulk", 40, 20, 1, 4, 1) == 45
    assert overlapped_ns("bulk", 40, 80, 1, 4, 1) == 80  # the GEMM fits under the collective
    # never better than max(G, C), never worse than G + C
    for method, splits in (("ring_exchange", 8), ("pipeline", 4), ("bulk", 1)):
        for g, c in ((1000, 10), (10, 1000), (500, 500), (0, 7), (7, 0)):
            t = overlapped_ns(method, g, c, splits, 132, 16)
            assert max(g, c) <= t <= g + c


def _overlap_in_fractions(method, g, c, splits, sms, comm_sms):
    """The module doc's steps in exact rationals: a step of GEMM work x beside a transfer y
    takes max(y, y + x − y·speed)."""
    import math
    from fractions import Fraction

    g, c, speed = Fraction(g), Fraction(c), Fraction(sms - comm_sms, sms)

    def step(x, y):
        return max(y, y + x - y * speed)
    if c == 0 or g == 0:
        t = g + c
    elif method in ("bulk", "nccl") or splits <= 1:
        t = step(g, c)
    elif method == "ring_exchange":
        t = (splits - 1) * step(g / splits, c / (splits - 1)) + g / splits
    else:
        t = g / splits + (splits - 1) * step(g / splits, c / splits) + c / splits
    return math.ceil(t)


def test_overlap_rounds_up_exactly():
    # odd sizes, SM counts and splits, so that most results are not whole nanoseconds
    import random

    rng = random.Random(11)
    for _ in range(20000):
        method = rng.choice(("ring_exchange", "pipeline", "bulk", "nccl"))
        sms = rng.choice((7, 108, 132, 148))
        args = (method, rng.randint(0, 10**7), rng.randint(0, 10**7), rng.randint(0, 9), sms,
                rng.randint(0, sms - 1))
        assert overlapped_ns(*args) == _overlap_in_fractions(*args), args


def tp_comm(kind: CollKind, size: int) -> Comm:
    return Comm(kind, GroupKind.TP, size)


def program(overlap: bool) -> PipelineProgram:
    """One stage, TP 2 (at 1 GB/s a TP collective of S bytes takes S/2 ns), one microbatch;
    forward only. L1: a 40 ns GEMM fed by an all-gather of 120 bytes (60 ns), ring exchange;
    L2: a 40 ns GEMM feeding a reduce-scatter of 64 bytes (32 ns), pipelined in 4 splits with
    1 of 4 SMs taken; L3: 10 ns of other compute + a 40 ns GEMM beside a bulk all-gather of 40
    bytes (20 ns), 1 of 4 SMs taken."""
    ag, rs = tp_comm(CollKind.ALLGATHER, 120), tp_comm(CollKind.REDUCESCATTER, 64)
    bulk = tp_comm(CollKind.ALLGATHER, 40)
    if overlap:
        f1 = Phase(40, overlaps=(GemmOverlap(ag, 40, "ring_exchange", 2, 0, 4),))
        f2 = Phase(40, overlaps=(GemmOverlap(rs, 40, "pipeline", 4, 1, 4),))
        f3 = Phase(50, overlaps=(GemmOverlap(bulk, 40, "bulk", 1, 1, 4),))
        layers = (Layer("L1", f1), Layer("L2", f2), Layer("L3", f3))
    else:
        layers = (Layer("L0", Phase(0, ag)), Layer("L1", Phase(40)), Layer("L2", Phase(40, rs)),
                  Layer("L3", Phase(50, bulk)))
    return PipelineProgram(tp=2, pp=1, dp=1, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [layers])], schedule="1f1b")


@pytest.mark.parametrize("fuse", [True, False])
def test_each_method_on_a_hand_derived_timeline(fuse):
    """L1: 80 (GEMM 0..40 compute, 40 exposed); L2: 10 + 3·12 + 8 = 54 (14 exposed); L3: 10
    compute + bulk 45 (5 exposed). Iteration 80 + 54 + 55 = 189 against 60 + 40 + 40 + 32 +
    50 + 20 = 242 serially."""
    net = AlphaBetaNetwork(0, {GroupKind.TP: 1.0})
    res = simulate(program(True), net, record_spans=True, fuse=fuse)
    assert res.iteration_ns == 189
    st = res.ranks[0]
    assert st.compute_ns == 130 and st.exposed_comm_ns[GroupKind.TP] == 40 + 14 + 5
    log = sorted((s.start_ns, s.end_ns, s.stream, s.label) for s in res.spans
                 if s.kind != "bubble")
    if fuse:  # the GEMM's compute, then what the overlap leaves exposed
        assert log == [(0, 40, "compute", "L1"), (40, 80, "TP", "L1.forward"),
                       (80, 120, "compute", "L2"), (120, 134, "TP", "L2.forward"),
                       (134, 184, "compute", "L3"), (184, 189, "TP", "L3.forward")]
    else:  # costed as it runs: the whole overlapped span on the TP stream
        assert log == [(0, 80, "TP", "L1.forward"), (80, 134, "TP", "L2.forward"),
                       (134, 144, "compute", "L3"), (144, 189, "TP", "L3.forward")]
    serial = simulate(program(False), net)
    assert serial.iteration_ns == 242
    assert serial.ranks[0].exposed_comm_ns[GroupKind.TP] == 60 + 32 + 20


def test_generated_layer_pairs_every_collective_with_transformer_engines_gemm():
    model = load_model(ROOT / "workloads/models/gpt-22b.yaml")
    par = make_par(tp=8, global_batch=1, sequence_parallel=True, tp_comm_overlap=True)
    rows = {r.name: r for r in build_model_plan(model, par).stages[0].chunks[0]
            if r.name.startswith("layer0_")}
    got = {(name[7:], ph): [(c.kind.value, op, how) for c, op, how in getattr(r, ph + "_ovl")]
           for name, r in rows.items() for ph in ("fwd", "ig", "wg") if getattr(r, ph + "_ovl")}
    assert got == {
        ("attn_qkv", "fwd"): [("ALLGATHER", "qkv", "ring_exchange")],
        ("attn_qkv", "ig"): [("ALLGATHER", "qkv_dgrad", "bulk")],
        ("attn_qkv", "wg"): [("REDUCESCATTER", "qkv_wgrad", "bulk")],
        ("attn_proj", "fwd"): [("REDUCESCATTER", "proj", "pipeline")],
        ("attn_proj", "ig"): [("ALLGATHER", "proj_dgrad", "ring_exchange")],
        ("mlp_fc1", "fwd"): [("ALLGATHER", "fc1", "ring_exchange")],
        ("mlp_fc1", "ig"): [("ALLGATHER", "fc1_dgrad", "bulk")],
        ("mlp_fc1", "wg"): [("REDUCESCATTER", "fc1_wgrad", "bulk")],
        ("mlp_fc2", "fwd"): [("REDUCESCATTER", "fc2", "pipeline")],
        ("mlp_fc2", "ig"): [("ALLGATHER", "fc2_dgrad", "ring_exchange")],
    }
    # no TP collective of the layer is left serial
    assert all(getattr(r, ph + "_comm") is None for r in rows.values()
               for ph in ("fwd", "ig", "wg"))


@pytest.mark.parametrize("kw, msg", [
    ({"tp": 8}, "needs --sequence-parallel"),
    ({"tp": 1, "sequence_parallel": True}, "needs --sequence-parallel and TP > 1"),
])
def test_refused_where_it_cannot_apply(kw, msg):
    model = load_model(ROOT / "workloads/models/gpt-22b.yaml")
    with pytest.raises(UsageError, match=msg):
        build_model_plan(model, make_par(global_batch=1, tp_comm_overlap=True, **kw))


def test_refused_for_workload_files(capsys):
    rc = main(["--workload", str(ROOT / "workloads/aicb-gpt13b-tp8-pp8-512gpu.txt"), "--topo",
               TOPO, "--tp-comm-overlap"])
    assert rc == 2 and "--tp-comm-overlap: applies to --model runs" in capsys.readouterr().err


LAYOUTS = [
    ["--tp", 8, "--pp", 1, "--global-batch", 4, "--micro-batch", 4, "--nodes", 1],
    ["--tp", 8, "--pp", 2, "--global-batch", 8, "--nodes", 2, "--recompute", "full"],
    ["--tp", 4, "--pp", 2, "--global-batch", 8, "--nodes", 2, "--recompute", "selective"],
    ["--tp", 2, "--pp", 4, "--vpp", 2, "--global-batch", 8, "--nodes", 2,
     "--distributed-optimizer"],
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=range(len(LAYOUTS)))
def test_turning_it_on_never_makes_an_iteration_slower(tmp_path, layout):
    times, tp = [], []
    for extra in ([], ["--tp-comm-overlap"]):
        out = tmp_path / f"r{len(times)}.json"
        assert main(["--model", GPT22, "--topo", TOPO, "--sequence-parallel", "--quiet",
                     "--json", str(out), *map(str, layout), *extra]) == 0
        rep = json.loads(out.read_text())
        times.append(rep["iteration_time_s"])
        tp.append(sum(s["exposed_comm_s"]["TP"] for s in rep["stages"]))
        if extra:
            assert any("--tp-comm-overlap (Transformer Engine" in a
                       for a in rep["assumptions"])
    assert times[1] < times[0] and tp[1] < tp[0]

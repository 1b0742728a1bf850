"""--tp-comm-overlap with context parallelism and in MoE layers: a hand-derived timeline of a
TP 2 / CP 2 attention block (userbuffer overlaps around qkv and proj, the CP ring exchange
between them), the generated pairing with CP (sizes of the rank's s/cp tokens) and in MoE
layers (attention and shared experts overlapped, routed experts serial), and that turning the
flag on never makes an iteration slower, with CP and MoE too."""

import json

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.models import build_model_plan, load_model
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import GemmOverlap, Layer, Phase

TP, CP = GroupKind.TP, GroupKind.CP
AG, RS = CollKind.ALLGATHER, CollKind.REDUCESCATTER


def _tp(kind: CollKind, size: int) -> Comm:
    return Comm(kind, TP, size)


def _cp(size: int) -> Comm:
    return Comm(AG, CP, size, blocking=False, overlap=True)


def _program(overlap: bool) -> PipelineProgram:
    """One stage, TP 2, CP 2, DP 1, one microbatch; the attention block of one CP rank as the
    generator lays it out: qkv, the two ring-attention steps, proj. At α = 0 and 1 GB/s a TP
    collective of S bytes takes S/2 ns (TP 2) and a CP exchange of S bytes S/2 ns (the ring
    all-gather of CP 2). GEMMs 40 ns; attention steps 10 ns forward, 15 ns backward; SMs: 1 of
    4 taken by pipeline/bulk kernels."""
    ag_in, rs_out = _tp(AG, 120), _tp(RS, 64)  # 60 ns, 32 ns
    ag_grad, ag_bulk, rs_bulk = _tp(AG, 120), _tp(AG, 40), _tp(RS, 40)  # 60, 20, 20 ns
    kv, kv_dkv = _cp(40), _cp(80)  # 20 ns, 40 ns
    cp0 = Layer("attn_cp0", Phase(10, kv), Phase(15, kv_dkv))
    cp1 = Layer("attn_cp1", Phase(10), Phase(15, kv_dkv))
    if overlap:
        qkv = Layer("attn_qkv",
                    Phase(40, overlaps=(GemmOverlap(ag_in, 40, "ring_exchange", 2, 0, 4),)),
                    Phase(40, overlaps=(GemmOverlap(ag_bulk, 40, "bulk", 1, 1, 4),)),
                    Phase(40, overlaps=(GemmOverlap(rs_bulk, 40, "bulk", 1, 1, 4),)))
        proj = Layer("attn_proj",
                     Phase(40, overlaps=(GemmOverlap(rs_out, 40, "pipeline", 4, 1, 4),)),
                     Phase(40, overlaps=(GemmOverlap(ag_grad, 40, "ring_exchange", 2, 0, 4),)))
        layers = (qkv, cp0, cp1, proj)
    else:  # the same collectives in their serial slots (as the generator places them)
        layers = (Layer("attn_norm", Phase(0, ag_in)),
                  Layer("attn_qkv", Phase(40), Phase(40, rs_bulk), Phase(40)), cp0, cp1,
                  Layer("attn_proj", Phase(40, rs_out), Phase(40, ag_bulk)),
                  Layer("mlp_norm", input_grad=Phase(0, ag_grad)))
    return PipelineProgram(tp=2, pp=1, dp=2, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [layers])], schedule="1f1b", cp=2)


def _net() -> AlphaBetaNetwork:
    return AlphaBetaNetwork(0, {TP: 1.0, CP: 1.0})


def test_tp_overlap_with_cp2_hand_derived_timeline():
    """Forward: qkv ring exchange (TP 2): the transfer (60) beside the first GEMM half, then
    the second half (20) alone → 80, compute 0–40, 40 exposed. Ring step 0 computes 80–90
    while its KV block travels 80–100; step 1 at 100–110. proj pipelined in 4: 10 + 3·(8 +
    (10 − 8·3/4)) + 8 = 54 → 110–150 compute, 14 exposed to 164.
    Backward: proj dgrad ring exchange 80 (164–204 compute, 40 exposed to 244); step 1 then
    step 0, each 15 of compute beside a 40 ns KV+dKV exchange (244–284, 284–324); qkv dgrad
    beside the bulk all-gather: 20 + 40 − 20·3/4 = 45 (324–364, 5 exposed); qkv wgrad beside
    the bulk reduce-scatter, the same 45 (369–409, 5 exposed). Iteration 414."""
    res = simulate(_program(True), _net(), record_spans=True)
    log = sorted((s.start_ns, s.end_ns, s.stream, s.label) for s in res.spans
                 if s.kind != "bubble")
    assert log == [
        (0, 40, "compute", "attn_qkv"), (40, 80, "TP", "attn_qkv.forward"),
        (80, 90, "compute", "attn_cp0"), (80, 100, "CP", "attn_cp0.forward"),
        (90, 100, "compute", "wait CP"),
        (100, 110, "compute", "attn_cp1"),
        (110, 150, "compute", "attn_proj"), (150, 164, "TP", "attn_proj.forward"),
        (164, 204, "compute", "attn_proj"), (204, 244, "TP", "attn_proj.input_grad"),
        (244, 259, "compute", "attn_cp1"), (244, 284, "CP", "attn_cp1.input_grad"),
        (259, 284, "compute", "wait CP"),
        (284, 299, "compute", "attn_cp0"), (284, 324, "CP", "attn_cp0.input_grad"),
        (299, 324, "compute", "wait CP"),
        (324, 364, "compute", "attn_qkv"), (364, 369, "TP", "attn_qkv.input_grad"),
        (369, 409, "compute", "attn_qkv"), (409, 414, "TP", "attn_qkv.weight_grad"),
    ]
    assert res.iteration_ns == 414
    st = res.ranks[0]
    assert st.exposed_comm_ns[TP] == 40 + 14 + 40 + 5 + 5
    assert st.exposed_comm_ns[CP] == 10 + 25 + 25
    assert st.compute_ns == 5 * 40 + 2 * 10 + 2 * 15


def test_serial_slots_of_the_same_block_take_longer():
    """The same collectives serial: forward 60 + 40 + 20 + 10 + 40 + 32 = 202; backward
    60 + 40 + 20 + 40 + 40 + 40 + 20 + 40 = 300; TP exposed 60 + 32 + 60 + 20 + 20."""
    res = simulate(_program(False), _net())
    assert res.iteration_ns == 502
    assert res.ranks[0].exposed_comm_ns[TP] == 192
    assert res.ranks[0].exposed_comm_ns[CP] == 10 + 25 + 25


def _layer_ovl(rows, layer: int) -> dict:
    pre = f"layer{layer}_"
    return {(r.name[len(pre):], ph): [(c.kind.value, c.size_bytes, op, how)
                                      for c, op, how in getattr(r, ph + "_ovl")]
            for r in rows if r.name.startswith(pre)
            for ph in ("fwd", "ig", "wg") if getattr(r, ph + "_ovl")}


def test_generated_cp2_layer_overlaps_the_ranks_s_over_cp_tokens():
    model = load_model(ROOT / "workloads/models/gpt-22b.yaml")
    par = make_par(tp=4, cp=2, global_batch=1, sequence_parallel=True,
                         tp_comm_overlap=True)
    rows = build_model_plan(model, par).stages[0].chunks[0]
    b = model.seq_len // 2 * model.hidden * 2  # the rank's s/cp tokens × h, 2 bytes
    got = _layer_ovl(rows, 0)
    assert got[("attn_qkv", "fwd")] == [("ALLGATHER", b, "qkv", "ring_exchange")]
    assert got[("attn_proj", "fwd")] == [("REDUCESCATTER", b, "proj", "pipeline")]
    assert got[("attn_proj", "ig")] == [("ALLGATHER", b, "proj_dgrad", "ring_exchange")]
    assert got[("attn_qkv", "ig")] == [("ALLGATHER", b, "qkv_dgrad", "bulk")]
    assert got[("mlp_fc2", "ig")] == [("ALLGATHER", b, "fc2_dgrad", "ring_exchange")]
    assert sum(len(v) for v in got.values()) == 10
    layer0 = [r for r in rows if r.name.startswith("layer0_")]
    # no TP collective left serial; the ring exchanges kept, in the CP group
    assert [r.name for r in layer0 if any(
        c is not None and c.group is TP for c in (r.fwd_comm, r.ig_comm, r.wg_comm))] == []
    cp_rows = [r for r in layer0 if r.name in ("layer0_attn_cp0", "layer0_attn_cp1")]
    assert len(cp_rows) == 2  # the ring steps (sim.models.features.context)
    assert all(r.ig_comm.group is CP for r in cp_rows) and cp_rows[0].fwd_comm.group is CP


def test_moe_layer_overlaps_attention_and_shared_experts_not_routed_experts():
    model = load_model(ROOT / "workloads/models/deepseek-v3-like.yaml")
    par = make_par(tp=4, ep=8, dp=8, global_batch=8, sequence_parallel=True,
                         tp_comm_overlap=True)
    rows = build_model_plan(model, par).stages[0].chunks[0]
    moe = model.moe.dense_layers  # the first MoE layer
    got = {k: [(kind, op, how) for kind, _, op, how in v]
           for k, v in _layer_ovl(rows, moe).items()}
    assert got == {
        ("attn_qkv", "fwd"): [("ALLGATHER", "qkv", "ring_exchange")],
        ("attn_qkv", "ig"): [("ALLGATHER", "qkv_dgrad", "bulk")],
        ("attn_qkv", "wg"): [("REDUCESCATTER", "qkv_wgrad", "bulk")],
        ("attn_proj", "fwd"): [("REDUCESCATTER", "proj", "pipeline")],
        ("attn_proj", "ig"): [("ALLGATHER", "proj_dgrad", "ring_exchange")],
        ("shared_mlp_fc1", "fwd"): [("ALLGATHER", "fc1", "ring_exchange")],
        ("shared_mlp_fc2", "fwd"): [("REDUCESCATTER", "fc2", "pipeline")],
        ("shared_mlp_fc2", "ig"): [("ALLGATHER", "fc2_dgrad", "ring_exchange")],
    }
    pre = f"layer{moe}_"
    serial = sorted((r.name[len(pre):], ph, c.kind.value) for r in rows
                    if r.name.startswith(pre)
                    for ph, c in (("fwd", r.fwd_comm), ("ig", r.ig_comm), ("wg", r.wg_comm))
                    if c is not None and c.group is TP)
    # the routed experts' TP collectives (the dispatcher's, NCCL) and the shared fc1's
    # backward all-gather / reduce-scatter (no bulk overlap in a plain TE column linear); the
    # dispatcher's reduce-scatters sit next to its sorts by local expert (all-gather then sort
    # in dispatch_postprocess, unsort then reduce-scatter in combine_preprocess)
    assert serial == [
        ("moe_router_fwd_comm", "fwd", "ALLGATHER"),
        ("moe_sort_by_expert", "ig", "REDUCESCATTER"),
        ("moe_unpermute_bwd_comm", "ig", "ALLGATHER"),
        ("moe_unsort_by_expert", "fwd", "REDUCESCATTER"),
        ("shared_mlp_fc1", "ig", "REDUCESCATTER"), ("shared_mlp_fc2", "ig", "ALLGATHER"),
    ]
    # a dense layer of the same model keeps all ten
    assert sum(len(v) for v in _layer_ovl(rows, 0).values()) == 10


GPT22 = ["--model", "gpt-22b", "--sequence-parallel"]
MIXTRAL = ["--model", "mixtral-8x7b", "--sequence-parallel"]
LAYOUTS = [
    GPT22 + ["--tp", 4, "--cp", 2, "--global-batch", 4, "--nodes", 1, "--ignore-memory"],
    GPT22 + ["--tp", 2, "--cp", 2, "--pp", 2, "--global-batch", 8, "--nodes", 1,
             "--distributed-optimizer"],
    MIXTRAL + ["--tp", 2, "--ep", 4, "--global-batch", 8, "--nodes", 1, "--ignore-memory"],
    MIXTRAL + ["--tp", 2, "--ep", 2, "--cp", 2, "--global-batch", 8, "--nodes", 1,
               "--ignore-memory"],
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=range(len(LAYOUTS)))
def test_turning_it_on_never_makes_an_iteration_slower(tmp_path, layout):
    times, tp = [], []
    for extra in ([], ["--tp-comm-overlap"]):
        out = tmp_path / f"r{len(times)}.json"
        assert main(["--topo", "dgx-h100-1024", "--quiet", "--json",
                     str(out), *map(str, layout), *extra]) == 0
        rep = json.loads(out.read_text())
        times.append(rep["iteration_time_s"])
        tp.append(sum(s["exposed_comm_s"]["TP"] for s in rep["stages"]))
    assert times[1] < times[0] and tp[1] < tp[0]

"""Context parallelism: the ring exchange overlapped with the attention steps (hand-derived
timeline), the generated rows, FLOPs and activation memory ÷ cp."""

import pytest
from conftest import ROOT
from par_support import make_par

from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.models.memory import layer_activation_bytes
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import load_model
from sim.network.simple import AlphaBetaNetwork
from sim.parallel.placement import Placement
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase


def _ring_program(c_f, c_b, fwd_bytes, bwd_bytes, n=3):
    """One stage, one microbatch, n attention steps as a CP rank runs them."""
    layers = []
    for k in range(n):
        fc = Comm(CollKind.ALLGATHER, GroupKind.CP, fwd_bytes, blocking=False, overlap=True)
        bc = Comm(CollKind.ALLGATHER, GroupKind.CP, bwd_bytes, blocking=False, overlap=True)
        layers.append(Layer(f"attn_cp{k}", Phase(c_f, fc if k < n - 1 else None),
                            Phase(c_b, bc)))
    return PipelineProgram(tp=1, pp=1, dp=n, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [tuple(layers)])], schedule="1f1b", cp=n)


def test_ring_exchange_overlaps_attention_hand_derived_timeline():
    # cp = 3, α = 0, 1 GB/s: an exchange of S bytes costs 2/3·S ns (one ring all-gather step
    # per edge). Forward exchange 30 B -> 20 ns, backward (KV + dKV) 60 B -> 40 ns; attention
    # step 10 ns forward, 15 ns backward.
    # forward: step0 compute 0-10 while the KV block travels 0-20; step1 starts at 20 (its KV
    # arrived), computes 20-30 while the next block travels 20-40; step2 computes 40-50.
    # backward (rows in reverse): each step issues its exchange and computes 15 ns, waits to 40.
    prog = _ring_program(10, 15, 30, 60)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.CP: 1.0}), record_spans=True)
    log = sorted((s.start_ns, s.end_ns, s.stream, s.kind, s.label) for s in res.spans
                 if s.kind != "bubble")
    assert log == [
        (0, 10, "compute", "forward", "attn_cp0"),
        (0, 20, "CP", "comm", "attn_cp0.forward"),
        (10, 20, "compute", "comm_wait", "wait CP"),
        (20, 30, "compute", "forward", "attn_cp1"),
        (20, 40, "CP", "comm", "attn_cp1.forward"),
        (30, 40, "compute", "comm_wait", "wait CP"),
        (40, 50, "compute", "forward", "attn_cp2"),
        (50, 65, "compute", "input_grad", "attn_cp2"),
        (50, 90, "CP", "comm", "attn_cp2.input_grad"),
        (65, 90, "compute", "comm_wait", "wait CP"),
        (90, 105, "compute", "input_grad", "attn_cp1"),
        (90, 130, "CP", "comm", "attn_cp1.input_grad"),
        (105, 130, "compute", "comm_wait", "wait CP"),
        (130, 145, "compute", "input_grad", "attn_cp0"),
        (130, 170, "CP", "comm", "attn_cp0.input_grad"),
        (145, 170, "compute", "comm_wait", "wait CP"),
    ]
    assert res.iteration_ns == 170  # (n-1)·max(c, x) + c forward, n·max(c, x) backward
    st = res.ranks[0]
    assert st.exposed_comm_ns[GroupKind.CP] == 10 + 10 + 3 * 25
    assert st.compute_ns == 3 * 10 + 3 * 15


def test_ring_exchange_hidden_when_attention_is_longer():
    res = simulate(_ring_program(50, 80, 30, 60), AlphaBetaNetwork(0, {GroupKind.CP: 1.0}))
    assert res.iteration_ns == 3 * 50 + 3 * 80
    assert res.ranks[0].exposed_comm_ns[GroupKind.CP] == 0


def test_cp_groups_follow_tp_cp_dp_pp_order():
    pl = Placement(2, 4, 2, order="tp-cp-dp-pp", cp=2)  # dp here = DP×CP = 4
    assert pl.group(GroupKind.CP, 0) == (0, 2)
    assert pl.group(GroupKind.CP, 5) == (5, 7)
    assert pl.group(GroupKind.DP, 0) == (0, 2, 4, 6)  # gradients over DP×CP
    assert pl.group(GroupKind.TP, 0) == (0, 1)
    with pytest.raises(UsageError, match="cp must come directly before dp"):
        Placement(2, 4, 2, order="cp-tp-dp-pp", cp=2)


MODEL = ROOT / "workloads/models/llama3-8b.yaml"


def _par(cp, **kw):
    return make_par(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8, cp=cp,
                          flash_attention=True, sequence_parallel=True, **kw)


def test_generated_layers_have_cp_attention_steps_with_ring_exchanges():
    model = load_model(MODEL)
    plan = build_model_plan(model, _par(4))
    rows = [r for r in plan.stages[0].chunks[0] if r.name.startswith("layer0_attn_cp")]
    assert [r.name for r in rows] == [f"layer0_attn_cp{k}{x}" for k in range(4)
                                      for x in ("_dkv", "")] + ["layer0_attn_cp_merge"]
    s_local, kvh, t = model.seq_len // 4, model.kv_hidden, 2
    kv = 2 * s_local * kvh // t * 2  # K and V of the rank's tokens, bf16, this TP shard
    steps = [r for r in rows if r.name[len("layer0_attn_cp"):].isdigit()]
    for k, r in enumerate(steps):
        # backward (TransformerEngine step 3 − k): KV only first, dKV only last, both between
        carried = kv if k in (0, 3) else 2 * kv
        assert r.ig_comm == Comm(CollKind.ALLGATHER, GroupKind.CP, carried * 4 // 3,
                                 blocking=False, overlap=True)
        if k < 3:
            assert r.fwd_comm == Comm(CollKind.ALLGATHER, GroupKind.CP, kv * 4 // 3,
                                      blocking=False, overlap=True)
        else:
            assert r.fwd_comm is None
    assert all(r.fwd_comm is None and r.ig_comm is None for r in rows if r not in steps)


def test_dkv_update_waits_for_the_exchange_hand_derived_timeline():
    """cp = 2 as the generator lays it out: rows dkv0, cp0, dkv1, cp1, merge. α = 0, 1 GB/s:
    an exchange of S bytes (the all-gather size, 2 blocks at cp 2) costs S/2 ns. Forward: the
    KV concatenation 0-2, step 0 2-12 with its KV exchange 2-22, step 1 22-32, the output merge
    32-37. Backward (reversed): the KV copy 37-40; step "1" issues the KV exchange (40-60) and
    computes 40-55; its dK/dV update waits for the exchange: 60-64; step "0" issues the dKV
    exchange 64-84 and computes 64-79; the last dK/dV update 84-88."""
    def ring(size):
        return Comm(CollKind.ALLGATHER, GroupKind.CP, size, blocking=False, overlap=True)

    layers = (Layer("dkv0", Phase(2), Phase(4)), Layer("cp0", Phase(10, ring(40)),
                                                        Phase(15, ring(40))),
              Layer("dkv1", Phase(0), Phase(4)), Layer("cp1", Phase(10), Phase(15, ring(40))),
              Layer("merge", Phase(5), Phase(3)))
    prog = PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [layers])], schedule="1f1b", cp=2)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.CP: 1.0}), record_spans=True)
    log = sorted((s.start_ns, s.end_ns, s.stream, s.kind, s.label) for s in res.spans
                 if s.kind != "bubble" and s.end_ns > s.start_ns)
    assert log == [
        (0, 2, "compute", "forward", "dkv0"),
        (2, 12, "compute", "forward", "cp0"),
        (2, 22, "CP", "comm", "cp0.forward"),
        (12, 22, "compute", "comm_wait", "wait CP"),
        (22, 32, "compute", "forward", "cp1"),
        (32, 37, "compute", "forward", "merge"),
        (37, 40, "compute", "input_grad", "merge"),
        (40, 55, "compute", "input_grad", "cp1"),
        (40, 60, "CP", "comm", "cp1.input_grad"),
        (55, 60, "compute", "comm_wait", "wait CP"),
        (60, 64, "compute", "input_grad", "dkv1"),
        (64, 79, "compute", "input_grad", "cp0"),
        (64, 84, "CP", "comm", "cp0.input_grad"),
        (79, 84, "compute", "comm_wait", "wait CP"),
        (84, 88, "compute", "input_grad", "dkv0"),
    ]
    assert res.iteration_ns == 88


def test_cp_keeps_the_model_flops_and_divides_activations():
    model = load_model(MODEL)
    one, four = build_model_plan(model, _par(1)), build_model_plan(model, _par(4))
    assert one.iteration_flops()[0] == four.iteration_flops()[0]
    assert layer_activation_bytes(model, _par(1)) == 4 * layer_activation_bytes(model, _par(4))


def test_cp_constraints():
    model = load_model(MODEL)
    with pytest.raises(UsageError, match="fused attention"):
        build_model_plan(model, make_par(tp=2, dp=2, global_batch=8, cp=2,
                                                      attention_backend="unfused"))
    with pytest.raises(UsageError, match="2·cp"):
        build_model_plan(model, _par(3))

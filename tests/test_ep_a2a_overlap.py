"""Megatron-Core's ``--overlap-moe-expert-parallel-comm`` (combined 1F1B): the op orders as data
against Megatron's warm-up count worked by hand, a hand-derived timeline of the F&B ops with
their all-to-alls beside the compute, TP collectives kept blocking, and the refusals
(Megatron-Core's asserts, megatron/core/transformer/transformer_config.py)."""

import pytest
from par_support import make_par

from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.models import generate
from sim.models.vocab.spec import ModelSpec, MoESpec
from sim.network.simple import AlphaBetaNetwork
from sim.pipeline.schedules import schedule_table
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.topology.gpu import GpuSpec


def names(ops):
    return " ".join(o.label(True) for o in ops)


def test_order_without_pipelining():
    # combined_1f1b_schedule_for_no_pipelining: the first forward alone, then the backward of
    # microbatch i with the forward of i + 1, then the last backward
    (ops,) = schedule_table("1f1b", 1, 4, 1, ep_a2a_overlap=True)
    assert " ".join(o.label(False) for o in ops) == "F0 F1&B0 F2&B1 F3&B2 B3"


def test_interleaved_order_has_one_more_warmup_forward():
    # p = 2, v = 2, M = 4 (group N = p = 2). Megatron's warm-up: 2(p − r − 1) + (v − 1)N + 1
    # = 5 forwards on rank 0, 3 on rank 1 (one more than the interleaved schedule's 4 and 2);
    # the forwards and backwards then follow the interleaved table, each steady forward k
    # paired with backward k − w
    plain = schedule_table("interleaved", 2, 4, 2)
    combined = schedule_table("interleaved", 2, 4, 2, ep_a2a_overlap=True)
    assert names(plain[0]) == ("F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 "
                               "B2.1 B3.1 B2.0 B3.0")
    assert names(combined[0]) == ("F0.0 F1.0 F0.1 F1.1 F2.0 F3.0&B0.1 F2.1&B1.1 F3.1&B0.0 B1.0 "
                                  "B2.1 B3.1 B2.0 B3.0")
    assert names(combined[1]) == ("F0.0 F1.0 F0.1 F1.1&B0.1 F2.0&B1.1 F3.0&B0.0 F2.1&B1.0 "
                                  "F3.1&B2.1 B3.1 B2.0 B3.0")


def _program(a2a_bytes, overlap, tp_comm=None):
    # one MoE-like layer: forward 10 ns then its blocking all-to-all; input-gradient 10 ns then
    # its all-to-all; weight gradient 10 ns; one pipeline stage, 3 microbatches, EP 2
    a2a = Comm(CollKind.ALLTOALL, GroupKind.EP, a2a_bytes)
    layers = (Layer("moe", Phase(10, a2a), Phase(10, a2a), Phase(10)),)
    if tp_comm is not None:
        layers = (Layer("attn", Phase(0, tp_comm), Phase(0, tp_comm), Phase(0)), *layers)
    return PipelineProgram(tp=1 if tp_comm is None else 2, pp=1, dp=2, ep=2, vpp=1,
                           microbatches=3, pp_bytes=0, stages=[StageProgram(0, [layers])],
                           schedule="1f1b", ep_a2a_overlap=overlap)


def _log(res):
    """(start, pass) of every forward / input-gradient / weight-gradient span of rank 0, and
    (start, end) of its EP stream."""
    kinds = {"forward": "F", "input_grad": "B", "weight_grad": "W"}
    comp = sorted((s.start_ns, f"{kinds[s.kind]}{s.microbatch}") for s in res.spans
                  if s.rank == 0 and s.stream == "compute" and s.kind in kinds)
    ep = sorted((s.start_ns, s.end_ns) for s in res.spans if s.rank == 0 and s.stream == "EP")
    return comp, ep


NET = AlphaBetaNetwork(0, {GroupKind.EP: 1.0, GroupKind.TP: 1.0})  # 1 byte/ns


def test_hand_derived_timeline_comm_hidden():
    # all-to-all of 16 B over 2 ranks at 1 B/ns: (1/2)·16 = 8 ns. Alone: F 18, whole B 28
    # (10 + 8 + 10); no overlap: 3 × 46 = 138. Combined: F0 0-18 (its all-to-all blocking);
    # F1&B0 18-48: F1 18-28, its all-to-all 28-36 beside B0's input gradient 28-38, B0's
    # all-to-all 38-46 beside its weight gradient 38-48; F2&B1 48-78 the same; B2 alone
    # 78-106 (ig 78-88, all-to-all 88-96, W 96-106).
    assert simulate(_program(16, False), NET).iteration_ns == 138
    res = simulate(_program(16, True), NET, record_spans=True)
    assert res.iteration_ns == 106
    comp, ep = _log(res)
    assert comp == [(0, "F0"), (18, "F1"), (28, "B0"), (38, "W0"), (48, "F2"), (58, "B1"),
                    (68, "W1"), (78, "B2"), (96, "W2")]
    assert (28, 36) in ep and (38, 46) in ep and (58, 66) in ep and (68, 76) in ep
    # exposed: the lone F0's and B2's all-to-alls (8 + 8); the F&B ops' are hidden
    assert res.ranks[0].exposed_comm_ns[GroupKind.EP] == 16
    # the per-layer report counts the passes run inside F&B ops too: 3 forwards, 3 backwards
    moe = res.ranks[0].layers["moe"]
    assert (moe.count, moe.forward_ns, moe.input_grad_ns, moe.weight_grad_ns) == (3, 30, 30, 30)


def test_hand_derived_timeline_comm_bound():
    # all-to-all of 48 B: 24 ns, longer than the compute beside it. F&B op: F1's all-to-all
    # 28-52, B0's queued behind it on the EP stream 52-76 (issued at 38); the op ends with the
    # last all-to-all, 76 (compute ended at 48). F0 0-34; F1&B0 34-92 (F1 34-44, a2a 44-68,
    # B0 ig 44-54, a2a 68-92, W 54-64); F2&B1 92-150; B2 150-194 (ig 150-160, a2a 160-184,
    # W 184-194). Without the overlap: 3 × (34 + 44) = 234.
    assert simulate(_program(48, False), NET).iteration_ns == 234
    res = simulate(_program(48, True), NET, record_spans=True)
    assert res.iteration_ns == 194
    comp, ep = _log(res)
    assert comp[:4] == [(0, "F0"), (34, "F1"), (44, "B0"), (54, "W0")]
    assert (44, 68) in ep and (68, 92) in ep


def test_tp_collectives_stay_blocking_in_the_combined_op():
    # a TP all-reduce of 8 B (2·(1/2)·8 = 8 ns) before the MoE compute in forward and after it
    # in backward stays on the compute stream's path: each F and B pays it exposed, F&B ops
    # included (DualPipe's F&B op would hide it; Megatron's combined 1F1B moves only the
    # EP all-to-alls). 6 passes × 8 ns exposed.
    tp = Comm(CollKind.ALLREDUCE, GroupKind.TP, 8)
    res = simulate(_program(16, True, tp), NET)
    assert res.ranks[0].exposed_comm_ns[GroupKind.TP] == 6 * 8
    assert res.iteration_ns == 106 + 6 * 8


MOE = ModelSpec("m", layers=4, hidden=256, heads=4, vocab=1000, seq_len=128,
                moe=MoESpec(experts=4, top_k=2))


def _par(**kw):
    base = dict(tp=1, pp=2, dp=2, ep=2, vpp=2, global_batch=8, micro_batch=1,
                overlap_moe_expert_parallel_comm=True)
    return make_par(**{**base, **kw})


def test_generated_program_carries_the_flag_and_runs():
    # the generated MoE program runs Megatron's combined order to the end (no stall), and the
    # memory model counts the extra warm-up forward (one more microbatch's activations live)
    from sim.models.memory import check_memory  # noqa: PLC0415
    gpu = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)
    net = AlphaBetaNetwork(0, {g: 100.0 for g in GroupKind})
    on, off = (generate(MOE, _par(overlap_moe_expert_parallel_comm=x), gpu) for x in (1, 0))
    assert on.ep_a2a_overlap and not off.ep_a2a_overlap
    assert simulate(on, net).iteration_ns > 0
    act = [check_memory(MOE, _par(overlap_moe_expert_parallel_comm=x), gpu).stages[0]
           .activations_bytes for x in (True, False)]
    assert act[0] > act[1]


@pytest.mark.parametrize("model, kw, words", [
    (ModelSpec("d", layers=4, hidden=256, heads=4, vocab=1000, seq_len=128), {"ep": 1},
     "mixture"),
    (MOE, {"ep": 1}, "--ep > 1"),
    (MOE, {"recompute": "full"}, "full recomputation"),
    (MOE, {"vpp": 1}, "interleaved schedule"),
])
def test_refusals_are_megatron_cores_asserts(model, kw, words):
    from sim.models.parallel_checks import validate  # noqa: PLC0415
    with pytest.raises(UsageError, match=words) as e:
        validate(model, _par(**kw))
    assert e.value.field == "overlap_moe_expert_parallel_comm"

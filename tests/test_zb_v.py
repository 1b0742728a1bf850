"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv:2401.10241; the handcrafted V
schedule of sail-sg/zero-bubble-pipeline-parallelism): per-rank orders as data, a hand-derived
timeline, the paper's zero-bubble claim made exact, and the engine against an independent
dependency-driven timing of the same orders (docs/schedules.md)."""

import itertools

import pytest
from conftest import ROOT
from par_support import make_par
from schedule_support import reference_end_ns

from sim.engine import simulate
from sim.errors import UsageError
from sim.models.generator import embedding_grad_comm
from sim.models.memory import inflight_activation_bytes
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import ModelSpec, load_model
from sim.network.simple import FreeNetwork
from sim.pipeline.schedules import schedule_table, stage_chunk, virtual_stage, zb_v
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.report import build_report


def names(ops):
    return " ".join(o.label(True) for o in ops)


def test_v_placement():
    # chunk 0 of stage r is virtual stage r, chunk 1 is 2p-1-r: stage 0 holds the first and
    # the last layers, stage p-1 the two middle virtual stages
    assert [virtual_stage("zb-v", 4, r, c) for c in (0, 1) for r in range(4)] == [
        0, 1, 2, 3, 7, 6, 5, 4]
    assert [stage_chunk("zb-v", 4, vs) for vs in range(8)] == [
        (0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (2, 1), (1, 1), (0, 1)]
    assert [virtual_stage("interleaved", 4, r, 1) for r in range(4)] == [4, 5, 6, 7]


def test_zb_v_orders_p2_m3():
    # F<microbatch>.<chunk>; warm-up 2(p-r)-1 F of chunk 0, r pairs (F chunk 1, F chunk 0),
    # p-r triples F/B/W of chunk 1; steady F0 B0 W0 F1 B1 W1; cool-down r pairs (B0, B1),
    # p-r pairs (B0, W0), the deferred W of chunk 1, then of chunk 0
    assert names(zb_v(2, 0, 3)) == ("F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 "
                                    "B0.0 W0.0 F2.1 B2.1 W2.1 B1.0 W1.0 B2.0 W2.0")
    assert names(zb_v(2, 1, 3)) == ("F0.0 F0.1 F1.0 F1.1 B0.1 W0.1 F2.0 B0.0 W0.0 "
                                    "F2.1 B1.1 W1.1 B1.0 B2.1 B2.0 W1.0 W2.1 W2.0")


def test_zb_v_orders_p4_m8():
    assert names(zb_v(4, 0, 8)) == (
        "F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 F6.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 "
        "F3.1 B3.1 W3.1 F7.0 B0.0 W0.0 F4.1 B4.1 W4.1 B1.0 W1.0 F5.1 B5.1 W5.1 B2.0 W2.0 "
        "F6.1 B6.1 W6.1 B3.0 W3.0 F7.1 B7.1 W7.1 B4.0 W4.0 B5.0 W5.0 B6.0 W6.0 B7.0 W7.0")
    assert names(zb_v(4, 3, 8)) == (
        "F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 B0.1 W0.1 F4.0 B0.0 W0.0 F4.1 B1.1 W1.1 "
        "F5.0 B1.0 W1.0 F5.1 B2.1 W2.1 F6.0 B2.0 W2.0 F6.1 B3.1 W3.1 F7.0 B3.0 W3.0 F7.1 "
        "B4.1 W4.1 B4.0 B5.1 B5.0 B6.1 B6.0 B7.1 B7.0 W4.0 W5.1 W6.1 W7.1 W5.0 W6.0 W7.0")


@pytest.mark.parametrize("p,m", [(1, 1), (2, 3), (3, 5), (4, 8), (4, 11), (8, 16)])
def test_zb_v_runs_every_pass_once_in_dependency_order(p, m):
    for r in range(p):
        ops = zb_v(p, r, m)
        assert sorted((o.kind, o.chunk, o.microbatch) for o in ops) == sorted(
            itertools.product("BFW", (0, 1), range(m)))
        pos = {(o.kind, o.chunk, o.microbatch): i for i, o in enumerate(ops)}
        for c, i in itertools.product((0, 1), range(m)):
            assert pos["F", c, i] < pos["B", c, i] < pos["W", c, i]
            if i:  # each pass of a chunk in microbatch order
                assert all(pos[k, c, i - 1] < pos[k, c, i] for k in "FBW")


def _program(p, m, f, b, w, pp_bytes=0):
    """p stages of two chunks (V placement) of one layer: forward f, input-gradient b and
    weight-gradient w ns per chunk and microbatch."""
    lay = Layer("layer", Phase(f), Phase(b), Phase(w))
    stages = [StageProgram(s, [(lay,), (lay,)]) for s in range(p)]
    return PipelineProgram(tp=1, pp=p, dp=1, ep=1, vpp=2, microbatches=m, pp_bytes=pp_bytes,
                           stages=stages, schedule="zb-v")


def test_zb_v_hand_derived_timeline_p2_m3():
    # F = B = W = 10 ns per chunk. Stage 1 turns the V (virtual stages 1 -> 2) in memory.
    # Worked by hand from the orders above: stage 0 never waits; stage 1 waits only for its
    # first forward (0-10), then each input it needs has arrived when it gets to it.
    res = simulate(_program(2, 3, 10, 10, 10), FreeNetwork(), record_spans=True)
    log = {0: [], 1: []}
    for s in sorted(res.spans, key=lambda s: (s.rank, s.start_ns)):
        if s.kind in ("forward", "input_grad", "weight_grad"):
            log[s.rank].append((s.start_ns, "FBW"[("forward", "input_grad",
                                                     "weight_grad").index(s.kind)]
                                + f"{s.microbatch}.{s.chunk}"))
    assert log[0] == [
        (0, "F0.0"), (10, "F1.0"), (20, "F2.0"), (30, "F0.1"), (40, "B0.1"), (50, "W0.1"),
        (60, "F1.1"), (70, "B1.1"), (80, "W1.1"), (90, "B0.0"), (100, "W0.0"), (110, "F2.1"),
        (120, "B2.1"), (130, "W2.1"), (140, "B1.0"), (150, "W1.0"), (160, "B2.0"),
        (170, "W2.0")]
    assert log[1] == [
        (10, "F0.0"), (20, "F0.1"), (30, "F1.0"), (40, "F1.1"), (50, "B0.1"), (60, "W0.1"),
        (70, "F2.0"), (80, "B0.0"), (90, "W0.0"), (100, "F2.1"), (110, "B1.1"), (120, "W1.1"),
        (130, "B1.0"), (140, "B2.1"), (150, "B2.0"), (160, "W1.0"), (170, "W2.1"),
        (180, "W2.0")]
    assert res.iteration_ns == 190  # 2M(F+B+W) + (p-1)F = 180 + 10


@pytest.mark.parametrize("p,m", [(2, 4), (3, 5), (4, 8), (4, 9), (6, 12), (8, 16), (8, 24)])
def test_zb_v_zero_bubble_when_f_b_w_equal(p, m):
    # The paper's claim (bubble rate 0 when T_F = T_B = T_W), exactly: every stage computes
    # without a gap from its first forward (at r·F, the pipeline fill) for 2M(F+B+W); the
    # iteration is that plus the fill of the last stage, (p-1)F (the parallelogram the
    # paper's optimizer post-validation overlaps with the next iteration; simrun's optimizer
    # step is synchronous, so it stays)
    t = 10
    res = simulate(_program(p, m, t, t, t), FreeNetwork(), record_spans=True)
    work = 2 * m * 3 * t
    assert res.iteration_ns == work + (p - 1) * t
    for r in range(p):
        comp = sorted((s.start_ns, s.end_ns) for s in res.spans
                      if s.rank == r and s.kind in ("forward", "input_grad", "weight_grad"))
        assert comp[0][0] == r * t and comp[-1][1] == r * t + work
        assert all(a[1] == b[0] for a, b in zip(comp, comp[1:], strict=False))  # no gap
    rep = build_report(res)
    assert rep["bubble_fraction"] == pytest.approx((p - 1) / (6 * m), rel=1e-12)
    assert rep["ideal_bubble_fraction"] == pytest.approx((p - 1) / (6 * m), rel=1e-12)


@pytest.mark.parametrize("p,m", [(2, 3), (3, 6), (4, 7), (6, 13)])
@pytest.mark.parametrize("f,b,w", [(10, 10, 10), (20, 20, 10), (10, 20, 10), (20, 30, 20),
                                   (30, 10, 10), (10, 10, 30)])
def test_zb_v_engine_matches_independent_timing(p, m, f, b, w):
    res = simulate(_program(p, m, f, b, w), FreeNetwork())
    assert res.iteration_ns == reference_end_ns("zb-v", p, m, f, b, w, 2)


@pytest.mark.parametrize("p,m", [(2, 3), (3, 6), (5, 11), (8, 16)])
@pytest.mark.parametrize("f,b,w", [(10, 10, 10), (20, 20, 10), (10, 20, 10), (20, 30, 20),
                                   (10, 30, 10), (30, 30, 30)])
def test_zb_v_closed_form_when_forward_and_weight_pass_at_most_backward(p, m, f, b, w):
    # F <= B and W <= B (per chunk): 2M(F+B+W) + (p-1)·max(B, 2(B-W)), for every M >= 2p-1
    # (with F = B = W the (p-1)F of the test above)
    res = simulate(_program(p, m, f, b, w), FreeNetwork())
    assert res.iteration_ns == 2 * m * (f + b + w) + (p - 1) * max(b, 2 * (b - w))


@pytest.mark.parametrize("p,m", [(2, 3), (4, 8), (8, 16)])
def test_zb_v_activation_memory_peak_equals_1f1b_first_stage(p, m):
    # counted live from F to W: 2p chunk activation sets (half a stage each) on every stage,
    # i.e. p stage-microbatches, 1F1B's first-stage peak, as the paper states
    zbv = [inflight_activation_bytes([1, 1], ops)[1] for ops in schedule_table("zb-v", p, m, 2)]
    one = [inflight_activation_bytes([2], ops)[0] for ops in schedule_table("1f1b", p, m)]
    assert zbv == [2 * p] * p
    assert max(one) == 2 * p


def test_zb_v_constraints():
    with pytest.raises(UsageError, match="two model chunks per stage"):
        schedule_table("zb-v", 4, 8, 1)
    with pytest.raises(UsageError, match="two model chunks per stage"):
        schedule_table("zb-v", 4, 8, 3)
    with pytest.raises(UsageError, match=r"at least 2p−1 = 7 microbatches"):
        schedule_table("zb-v", 4, 6, 2)
    assert len(schedule_table("zb-v", 4, 7, 2)) == 4


def test_zb_v_pipeline_messages_skip_the_turn_of_the_v():
    # 2(p-1) transfers per microbatch and direction (twice 1F1B's p-1): between neighbouring
    # stages, none at the V's turn (virtual stages p-1 -> p are both on stage p-1)
    p, m = 4, 8
    res = simulate(_program(p, m, 10, 10, 10, pp_bytes=1_000_000), FreeNetwork(),
                   record_spans=True)
    sent = sorted((s.label[0], s.rank, int(s.label.rsplit(" ", 1)[1])) for s in res.spans
                  if s.stream == "PP")
    fwd = [(r, d) for k, r, d in sent if k == "F"]
    bwd = [(r, d) for k, r, d in sent if k == "B"]
    assert len(fwd) == len(bwd) == 2 * (p - 1) * m
    pairs = sorted(set(fwd) | set(bwd))
    assert pairs == sorted({(r, r + 1) for r in range(p - 1)} | {(r + 1, r) for r in range(p - 1)})


def test_zb_v_model_plan_places_chunks_in_a_v():
    # GPT-2 medium, 24 layers on 4 stages x 2 chunks: 3 layers per virtual stage; chunk 1 of
    # stage r holds virtual stage 2p-1-r, so stage 0 has layers 0-2 and 21-23
    model = load_model(str(ROOT / "workloads/models/gpt2-medium.yaml"))
    par = make_par(tp=1, pp=4, dp=1, vpp=2, global_batch=8, micro_batch=1,
                         schedule="zb-v")
    plan = build_model_plan(model, par)
    assert [st.layers for st in plan.stages] == [
        [[0, 1, 2], [21, 22, 23]], [[3, 4, 5], [18, 19, 20]],
        [[6, 7, 8], [15, 16, 17]], [[9, 10, 11], [12, 13, 14]]]
    with pytest.raises(UsageError, match="at least 2p−1 = 7"):
        build_model_plan(model, make_par(tp=1, pp=4, dp=1, vpp=2, global_batch=6,
                                               micro_batch=1, schedule="zb-v"))


def test_zb_v_tied_embeddings_need_no_embedding_group_allreduce():
    # V placement: the input embedding (virtual stage 0) and the output layer (virtual stage
    # 2p-1) are both on stage 0, so Megatron's first/last-stage embedding group has nothing to
    # reduce; stage 0 holds one copy of the tied weight (1F1B: stages 0 and p-1 hold one each)
    tiny = ModelSpec("tiny", layers=8, hidden=256, heads=4, vocab=1000, seq_len=128)
    for sched, v, emb_stages in (("1f1b", 1, [0, 3]), ("zb-v", 2, [])):
        par = make_par(tp=1, pp=4, dp=1, vpp=v, global_batch=8, schedule=sched)
        plan = build_model_plan(tiny, par)
        assert [s for s in range(4) if embedding_grad_comm(plan, s) is not None] == emb_stages
    par = make_par(tp=1, pp=4, dp=1, vpp=2, global_batch=8, schedule="zb-v")
    v1f1b = make_par(tp=1, pp=4, dp=1, global_batch=8)
    zbv_params = [st.params for st in build_model_plan(tiny, par).stages]
    one_params = [st.params for st in build_model_plan(tiny, v1f1b).stages]
    assert sum(one_params) - sum(zbv_params) == 1024 * 256  # one tied copy fewer (padded V)

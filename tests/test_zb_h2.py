"""ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 2.2; arXiv:2401.10241):
per-rank orders as data, a hand-derived timeline, the paper's zero-bubble claim made exact
under simrun's synchronous optimizer step, the engine against an independent
dependency-driven timing, and the (2p−1) in-flight microbatches (docs/schedules.md)."""

import itertools

import pytest
from schedule_support import reference_end_ns

from sim.engine import simulate
from sim.errors import UsageError
from sim.models.memory import inflight_activation_bytes
from sim.network.simple import FreeNetwork
from sim.pipeline.schedules import check_schedule, schedule_table, zb_h2
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.report import build_report


def names(ops):
    return " ".join(str(o) for o in ops)


def test_zb_h2_orders_p2_m3():
    # stage r: 2(p-r)-1 forwards; 2r pairs (B, F); M-2p+1 triples (B, W, F); 2(p-r-1) pairs
    # (B, W); the last B; the 2r+1 deferred W
    assert names(zb_h2(2, 0, 3)) == "F0 F1 F2 B0 W0 B1 W1 B2 W2"
    assert names(zb_h2(2, 1, 3)) == "F0 B0 F1 B1 F2 B2 W0 W1 W2"


def test_zb_h2_orders_p4_m8():
    # stage 0: 7 forwards, one triple (B0 W0 F7), 6 pairs (B, W), B7, W7; stage 3: F0, six
    # (B, F) pairs, one triple (B6 W0 F7), B7, then the 7 deferred W
    assert [names(zb_h2(4, r, 8)) for r in range(4)] == [
        "F0 F1 F2 F3 F4 F5 F6 B0 W0 F7 B1 W1 B2 W2 B3 W3 B4 W4 B5 W5 B6 W6 B7 W7",
        "F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 W0 F7 B3 W1 B4 W2 B5 W3 B6 W4 B7 W5 W6 W7",
        "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 W0 F7 B5 W1 B6 W2 B7 W3 W4 W5 W6 W7",
        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 W0 F7 B7 W1 W2 W3 W4 W5 W6 W7"]


@pytest.mark.parametrize("p,m", [(1, 1), (2, 3), (3, 5), (4, 8), (4, 11), (8, 15)])
def test_zb_h2_runs_every_pass_once_in_dependency_order(p, m):
    for r in range(p):
        ops = zb_h2(p, r, m)
        assert sorted((o.kind, o.microbatch) for o in ops) == sorted(
            itertools.product("BFW", range(m)))
        pos = {(o.kind, o.microbatch): i for i, o in enumerate(ops)}
        for i in range(m):
            assert pos["F", i] < pos["B", i] < pos["W", i]


def _program(p, m, f, b, w):
    lay = Layer("layer", Phase(f), Phase(b), Phase(w))
    stages = [StageProgram(s, [(lay,)]) for s in range(p)]
    return PipelineProgram(tp=1, pp=p, dp=1, ep=1, vpp=1, microbatches=m, pp_bytes=0,
                           stages=stages, schedule="zb-h2")


def _log(res):
    log: dict[int, list] = {}
    kinds = ("forward", "input_grad", "weight_grad")
    for s in sorted(res.spans, key=lambda s: (s.rank, s.start_ns)):
        if s.kind in kinds:
            log.setdefault(s.rank, []).append(
                (s.start_ns, "FBW"[kinds.index(s.kind)] + str(s.microbatch)))
    return log


def test_zb_h2_hand_derived_timeline_p2_m3():
    # F = B = W = 10 ns. Stage 1 gets F0 at 10 and runs F B F B F B back to back (each F(i)
    # left stage 0 at 10(i+1) ≤ its start), then its three deferred W. Stage 0 runs its three
    # forwards, then B(i) as soon as stage 1's B(i) ends (30, 50, 70), a W between.
    log = _log(simulate(_program(2, 3, 10, 10, 10), FreeNetwork(), record_spans=True))
    assert log[0] == [(0, "F0"), (10, "F1"), (20, "F2"), (30, "B0"), (40, "W0"), (50, "B1"),
                      (60, "W1"), (70, "B2"), (80, "W2")]
    assert log[1] == [(10, "F0"), (20, "B0"), (30, "F1"), (40, "B1"), (50, "F2"), (60, "B2"),
                      (70, "W0"), (80, "W1"), (90, "W2")]


@pytest.mark.parametrize("p,m", [(2, 3), (3, 5), (4, 7), (4, 8), (6, 16), (8, 15), (8, 24)])
def test_zb_h2_zero_bubble_when_f_b_w_equal(p, m):
    # The paper's claim (zero bubble when T_F = T_B = T_W, M ≥ 2p-1), exactly: every stage
    # computes without a gap from its first forward (at r·F) for M(F+B+W), a parallelogram.
    # simrun's optimizer step is synchronous (it waits for every stage, as Megatron's
    # gradient-norm / inf-nan all-reduce makes it), so the parallelogram's edge (p-1)F stays in
    # the iteration; the paper's optimizer post-validation would overlap it with the next one.
    t = 10
    res = simulate(_program(p, m, t, t, t), FreeNetwork(), record_spans=True)
    work = m * 3 * t
    assert res.iteration_ns == work + (p - 1) * t
    for r in range(p):
        comp = sorted((s.start_ns, s.end_ns) for s in res.spans
                      if s.rank == r and s.kind in ("forward", "input_grad", "weight_grad"))
        assert comp[0][0] == r * t and comp[-1][1] == r * t + work
        assert all(a[1] == b[0] for a, b in zip(comp, comp[1:], strict=False))  # no gap
    rep = build_report(res)
    assert rep["bubble_fraction"] == pytest.approx((p - 1) / (3 * m), rel=1e-12)
    assert rep["ideal_bubble_fraction"] == pytest.approx((p - 1) / (3 * m), rel=1e-12)


@pytest.mark.parametrize("p,m", [(2, 3), (3, 6), (4, 7), (6, 13)])
@pytest.mark.parametrize("f,b,w", [(10, 10, 10), (20, 30, 10), (10, 30, 10), (10, 30, 30),
                                   (30, 10, 10), (10, 10, 30)])
def test_zb_h2_engine_matches_independent_timing(p, m, f, b, w):
    res = simulate(_program(p, m, f, b, w), FreeNetwork())
    assert res.iteration_ns == reference_end_ns("zb-h2", p, m, f, b, w)


@pytest.mark.parametrize("p,m", [(2, 3), (3, 6), (5, 9), (8, 16)])
@pytest.mark.parametrize("f,b,w", [(10, 10, 10), (20, 10, 10), (10, 20, 10), (10, 10, 20),
                                   (20, 40, 20), (30, 20, 20)])
def test_zb_h2_closed_form_when_backward_at_most_twice_forward_and_weight(p, m, f, b, w):
    # B ≤ 2·min(F, W): M(F+B+W) + (p-1)F for every M ≥ 2p-1 (simrun's statement; found from
    # and checked against the independent timing above; docs/schedules.md)
    res = simulate(_program(p, m, f, b, w), FreeNetwork())
    assert res.iteration_ns == m * (f + b + w) + (p - 1) * f


@pytest.mark.parametrize("p,m", [(2, 3), (4, 8), (8, 16)])
def test_zb_h2_holds_2p_minus_1_microbatches_on_every_stage(p, m):
    # the paper's (2p-1)·M_B peak: counted live from F to W, every stage reaches 2p-1
    # (stage r: 2(p-r)-1 warm-up forwards, then 2r (B, F) pairs whose W are deferred)
    zb = [inflight_activation_bytes([1], ops)[1] for ops in schedule_table("zb-h2", p, m)]
    assert zb == [2 * p - 1] * p


def test_zb_h2_constraints():
    with pytest.raises(UsageError, match=r"at least 2p−1 = 7 microbatches"):
        check_schedule("zb-h2", 4, 6)
    with pytest.raises(UsageError, match="one model chunk per stage.*--vpp 1"):
        check_schedule("zb-h2", 4, 8, 2)
    check_schedule("zb-h2", 4, 7)


def test_zb_h2_in_a_sweep_with_its_feasibility_rule():
    # the sweep's schedule dimension takes zb-h2 and skips layouts with M < 2p-1, with the
    # single run's reason. Llama 3 8B on 16 GPUs, global batch 16, micro-batch 1, TP 1:
    # PP 1 → DP 16, M = 1 (fine); PP 2 → DP 8, M = 2 (< 3); PP 16 → DP 1, M = 16 (< 31)
    from conftest import ROOT

    from sim.cli.sweep import parse_schedules
    from sim.models.vocab.spec import load_model
    from sim.parallel.config import Training
    from sim.sweep.space import Space, enumerate_layouts

    model = load_model(ROOT / "workloads/models/llama3-8b.yaml")
    space = Space(gpus=16, tp=(1,), pp=(1, 2, 16), schedule=parse_schedules("zb-h2"))
    ok, skipped = enumerate_layouts(model, space, Training(global_batch=16), 8)
    assert [lay.key for lay in ok] == ["tp1-pp1-dp16-vpp1-mb1-zb-h2"]
    reasons = dict(skipped)
    assert "at least 2p−1 = 3 microbatches (got 2)" in reasons["tp1-pp2-dp8-vpp1-mb1-zb-h2"]
    assert "at least 2p−1 = 31 microbatches (got 16)" in reasons[
        "tp1-pp16-dp1-vpp1-mb1-zb-h2"]

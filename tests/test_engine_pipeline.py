"""The engine against closed forms and a hand-derived timeline."""

import pytest
from conftest import uniform_program

from sim.comm import GroupKind
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork, FreeNetwork
from sim.report import build_report


@pytest.mark.parametrize("p,m,f,b", [(1, 1, 7, 14), (2, 4, 10, 20), (4, 8, 100, 200),
                                     (8, 16, 30, 60), (4, 3, 50, 110), (16, 16, 40, 80)])
def test_1f1b_iteration_is_closed_form(p, m, f, b):
    res = simulate(uniform_program(p, m, f, b), FreeNetwork())
    assert res.iteration_ns == (m + p - 1) * (f + b)
    rep = build_report(res)
    assert rep["bubble_fraction"] == pytest.approx((p - 1) / m, rel=1e-12)
    assert rep["ideal_bubble_fraction"] == pytest.approx((p - 1) / m, rel=1e-12)
    for st in res.ranks:
        assert st.bubble_ns == (p - 1) * (f + b)
        assert st.compute_ns == m * (f + b)


@pytest.mark.parametrize("p,m,f,b", [(2, 4, 10, 20), (4, 8, 100, 200), (3, 5, 30, 90)])
def test_gpipe_iteration_is_closed_form(p, m, f, b):
    res = simulate(uniform_program(p, m, f, b, schedule="gpipe"), FreeNetwork())
    # all forwards pipeline through in (M + p - 1) f, all backwards in (M + p - 1) b
    assert res.iteration_ns == (m + p - 1) * (f + b)
    assert build_report(res)["bubble_fraction"] == pytest.approx((p - 1) / m, rel=1e-12)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 12, 3), (8, 16, 2),
                                   (2, 6, 3), (4, 16, 4)])
def test_interleaved_bubble_is_p_minus_1_over_vm(p, m, v):
    f, b = 120 * v, 240 * v
    res = simulate(uniform_program(p, m, f, b, v=v, schedule="interleaved"), FreeNetwork())
    ideal = m * (f + b)
    assert res.iteration_ns == ideal + (p - 1) * (f + b) // v
    assert build_report(res)["bubble_fraction"] == pytest.approx((p - 1) / (v * m), rel=1e-12)


def test_symmetric_and_per_rank_agree_on_uniform_pipeline():
    prog = uniform_program(4, 8, 100, 200, pp_bytes=1000)
    prog.dp = 2
    net = AlphaBetaNetwork(3, {GroupKind.PP: 1.0})
    a = simulate(prog, net)
    b = simulate(prog, AlphaBetaNetwork(3, {GroupKind.PP: 1.0}), per_rank=True)
    assert a.iteration_ns == b.iteration_ns
    assert len(b.ranks) == 8 and len(a.ranks) == 4


def test_hand_derived_timeline_p2_m2_with_transfer_time():
    # f = 10 ns, b = 20 ns (input-grad 10 + weight-grad 10), each activation/gradient transfer
    # 5 ns (5 bytes at 1 GB/s, no latency). Derivation in docs/engine.md ("worked example").
    prog = uniform_program(2, 2, 10, 20, pp_bytes=5)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.PP: 1.0}), record_spans=True)
    log = sorted((s.start_ns, s.rank, s.kind, s.microbatch) for s in res.spans
                 if s.stream == "compute")
    assert log == [
        (0, 0, "forward", 0),
        (0, 1, "bubble", -1),         # stage 1 waits for stage 0's F0 (not yet sent)
        (10, 0, "forward", 1),
        (10, 1, "recv_wait", -1),     # F0 in flight 10..15
        (15, 1, "forward", 0),
        (20, 0, "bubble", -1),        # stage 0 waits for B0, stage 1 still computing
        (25, 1, "input_grad", 0),
        (35, 1, "weight_grad", 0),
        (45, 0, "recv_wait", -1),     # B0 gradient in flight 45..50
        (45, 1, "forward", 1),        # F1 arrived at 25
        (50, 0, "input_grad", 0),
        (55, 1, "input_grad", 1),
        (60, 0, "weight_grad", 0),
        (65, 1, "weight_grad", 1),
        (70, 0, "bubble", -1),
        (75, 0, "recv_wait", -1),
        (75, 1, "bubble", -1),        # stage 1 is done; idle until the iteration ends
        (80, 0, "input_grad", 1),
        (90, 0, "weight_grad", 1),
    ]
    pp_log = sorted((s.start_ns, s.end_ns, s.rank, s.label) for s in res.spans if s.stream == "PP")
    assert pp_log == [(10, 15, 0, "F0 → rank 1"), (20, 25, 0, "F1 → rank 1"),
                      (45, 50, 1, "B0 → rank 0"), (75, 80, 1, "B1 → rank 0")]
    assert res.iteration_ns == 100
    s0, s1 = res.ranks
    assert (s0.compute_ns, s0.exposed_comm_ns[GroupKind.PP], s0.bubble_ns) == (60, 10, 30)
    assert (s1.compute_ns, s1.exposed_comm_ns[GroupKind.PP], s1.bubble_ns) == (60, 5, 35)


def test_breakdown_partitions_iteration_exactly():
    prog = uniform_program(4, 6, 90, 180, pp_bytes=777)
    res = simulate(prog, AlphaBetaNetwork(11, {GroupKind.PP: 3.0}))
    for st in res.ranks:
        assert st.busy_ns + st.bubble_ns == res.iteration_ns


def test_critical_path_of_the_hand_derived_timeline():
    # Same case: the iteration's 100 ns are stage 0's F0 (0-10), the F0 transfer (10-15),
    # stage 1's work 15-75 (F0, B0, F1, B1 back to back), the B1 gradient transfer (75-80),
    # and stage 0's B1 (80-100).
    from sim.engine.critical import PathSegment

    prog = uniform_program(2, 2, 10, 20, pp_bytes=5)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.PP: 1.0}))
    assert res.critical_path == [
        PathSegment(0, 0, 10, "work"), PathSegment(1, 10, 15, "PP", 0),
        PathSegment(1, 15, 75, "work"), PathSegment(0, 75, 80, "PP", 1),
        PathSegment(0, 80, 100, "work")]

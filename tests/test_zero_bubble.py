"""ZB-H1 (Qi et al., ICLR 2024): per-rank orders as data, and the iteration time of the engine
against the closed form derived in docs/schedules.md."""

import pytest
from conftest import uniform_program

from sim.engine import simulate
from sim.errors import UsageError
from sim.models.memory import inflight_activation_bytes
from sim.network.simple import FreeNetwork
from sim.pipeline.schedules import one_f_one_b, schedule_table, zb_h1
from sim.program.workload import Layer, Phase
from sim.report import build_report


def names(ops):
    return " ".join(str(o) for o in ops)


def test_zb_h1_orders_p3_m3():
    # stage r: 1F1B's F/B order, W(i) right after B(i + r), the rest of the W at the end
    assert names(zb_h1(3, 0, 3)) == "F0 F1 F2 B0 W0 B1 W1 B2 W2"
    assert names(zb_h1(3, 1, 3)) == "F0 F1 B0 F2 B1 W0 B2 W1 W2"
    assert names(zb_h1(3, 2, 3)) == "F0 B0 F1 B1 F2 B2 W0 W1 W2"


def test_zb_h1_orders_p4_m6():
    assert names(zb_h1(4, 0, 6)) == "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5"
    assert names(zb_h1(4, 1, 6)) == "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 B4 W3 B5 W4 W5"
    assert names(zb_h1(4, 3, 6)) == "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5"


@pytest.mark.parametrize("p,m", [(1, 1), (2, 2), (3, 5), (4, 8), (8, 8)])
def test_zb_h1_keeps_1f1b_order_of_forwards_and_input_grads(p, m):
    for r in range(p):
        zb = [o for o in zb_h1(p, r, m) if o.kind != "W"]
        assert zb == one_f_one_b(p, r, m)
        ws = [o for o in zb_h1(p, r, m) if o.kind == "W"]
        assert [o.microbatch for o in ws] == list(range(m))
        ops = zb_h1(p, r, m)
        for i in range(m):  # W(i) after B(i)
            assert ops.index(ws[i]) > ops.index(next(o for o in ops if str(o) == f"B{i}"))


def _program(p, m, f, b, w):
    prog = uniform_program(p, m, f, 2 * b, schedule="zb-h1")
    lay = Layer("layer", Phase(f), Phase(b), Phase(w))
    for st in prog.stages:
        st.chunks = [(lay,)]
    return prog


@pytest.mark.parametrize("p,m", [(2, 2), (3, 3), (4, 4), (4, 8), (5, 7), (8, 8), (8, 16)])
@pytest.mark.parametrize("f,b,w", [(10, 10, 10), (20, 10, 10), (10, 20, 10), (10, 10, 5)])
def test_zb_h1_iteration_is_closed_form(p, m, f, b, w):
    # M(F+B+W) + (p-1)(F+B-W) for M >= p and W <= min(F, B) (docs/schedules.md)
    res = simulate(_program(p, m, f, b, w), FreeNetwork())
    assert res.iteration_ns == m * (f + b + w) + (p - 1) * (f + b - w)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 16), (6, 6)])
def test_zb_h1_bubble_is_a_third_of_1f1b_when_f_b_w_equal(p, m):
    t = 30
    zb = simulate(_program(p, m, t, t, t), FreeNetwork())
    one = simulate(uniform_program(p, m, t, 2 * t), FreeNetwork())
    ideal = m * 3 * t
    assert one.iteration_ns - ideal == (p - 1) * 3 * t
    assert zb.iteration_ns - ideal == (p - 1) * t  # exactly one third
    rep = build_report(zb)
    assert rep["bubble_fraction"] == pytest.approx((p - 1) / (3 * m), rel=1e-12)
    assert rep["ideal_bubble_fraction"] == pytest.approx((p - 1) / (3 * m), rel=1e-12)


def test_zb_h1_activation_memory_peak_equals_1f1b_first_stage():
    p, m = 4, 8
    zb = [inflight_activation_bytes([1], ops)[1] for ops in schedule_table("zb-h1", p, m)]
    one = [inflight_activation_bytes([1], ops)[1] for ops in schedule_table("1f1b", p, m)]
    assert one == [4, 3, 2, 1]
    assert zb == [4, 4, 4, 4]  # activations held until W: p on every stage


def test_zb_h1_constraints():
    with pytest.raises(UsageError, match="at least as many microbatches"):
        schedule_table("zb-h1", 4, 3)
    with pytest.raises(UsageError, match="one model chunk"):
        schedule_table("zb-h1", 4, 8, 2)

"""Timeline of the split-backward schedules (zb-h1, zb-v): the weight-gradient passes are
their own boxes (colour, ``W`` label, legend), not merged into the input-gradient box."""

from __future__ import annotations

from test_zb_v import _program as zbv_program
from test_zero_bubble import _program as zbh1_program

from sim.engine import simulate
from sim.network.simple import FreeNetwork
from sim.viz.boxes import timeline_boxes
from sim.viz.timeline import label_plan, plot_timeline


def _lane(boxes, row):
    return [(b.start_ns, b.end_ns, b.kind, b.microbatch) for b in boxes
            if b.row == row and b.lane == "compute"]


def test_zb_h1_weight_passes_are_their_own_boxes():
    # p = 2, M = 2, F = B = W = 10 ns, worked by hand from the orders
    # stage 0: F0 F1 B0 W0 B1 W1; stage 1: F0 B0 F1 B1 W0 W1 (docs/schedules.md)
    res = simulate(zbh1_program(2, 2, 10, 10, 10), FreeNetwork(), record_spans=True)
    boxes = timeline_boxes(res, [0, 1])
    assert _lane(boxes, 0) == [
        (0, 10, "forward", 0), (10, 20, "forward", 1), (20, 30, "bubble", -1),
        (30, 40, "backward", 0), (40, 50, "weight_grad", 0), (50, 60, "backward", 1),
        (60, 70, "weight_grad", 1)]
    assert _lane(boxes, 1) == [
        (0, 10, "bubble", -1), (10, 20, "forward", 0), (20, 30, "backward", 0),
        (30, 40, "forward", 1), (40, 50, "backward", 1), (50, 60, "weight_grad", 0),
        (60, 70, "weight_grad", 1)]
    texts = [(lab.kind, lab.text) for lab in label_plan(boxes, 70, 1480, False) if lab.row == 0]
    assert texts == [("forward", "0"), ("forward", "1"), ("backward", "0"),
                     ("weight_grad", "W0"), ("backward", "1"), ("weight_grad", "W1")]


def test_zb_v_boxes_tile_each_stage_one_per_pass(tmp_path):
    p, m = 3, 5
    res = simulate(zbv_program(p, m, 10, 10, 10), FreeNetwork(), record_spans=True)
    boxes = timeline_boxes(res, list(range(p)))
    for r in range(p):
        lane = _lane(boxes, r)
        assert all(a[1] == b[0] for a, b in zip(lane, lane[1:], strict=False))  # tiles
        ops = [x for x in lane if x[2] != "bubble"]
        assert len(ops) == 3 * 2 * m and all(e - s == 10 for s, e, _k, _mb in ops)
        assert sum(k == "weight_grad" for _s, _e, k, _mb in ops) == 2 * m
    plot = plot_timeline(res, tmp_path / "zbv.png")
    assert any(lab.text == "W0.1" for lab in plot.labels)

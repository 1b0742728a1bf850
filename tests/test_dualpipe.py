"""DualPipe (DeepSeek-V3 report, arXiv:2412.19437, §3.2.1; deepseek-ai/DualPipe ``DualPipe.step``):
per-rank orders as data against tables worked by hand from the eight steps of ``step``, a
hand-worked timeline, the report's bubble (PP/2−1)(F&B+B−3W) made exact where it holds, the
engine against an independent dependency-driven timing, the overlapped F&B chunk hiding its
collectives, memory and constraints (docs/schedules.md)."""

import itertools

import pytest

from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.models.memory import inflight_activation_bytes
from sim.network.simple import AlphaBetaNetwork, FreeNetwork
from sim.pipeline.dualpipe import dualpipe, dualpipe_peers
from sim.pipeline.schedules import check_schedule, schedule_table, virtual_stage
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.report import build_report


def names(ops):
    # F<mb>.<direction>; B a whole backward, I an input-gradient pass whose W comes later;
    # F..&B.. one overlapped forward-and-backward chunk
    return " ".join(o.label(True) for o in ops)


def test_two_directions_on_every_rank():
    # chunk 0: microbatches entering at rank 0, rank r runs stage r; chunk 1: entering at
    # rank p-1, rank r runs stage p-1-r
    assert [virtual_stage("dualpipe", 4, r, c) for c in (0, 1) for r in range(4)] == [
        0, 1, 2, 3, 3, 2, 1, 0]
    assert [dualpipe_peers(4, r, 0) for r in range(4)] == [(None, 1), (0, 2), (1, 3), (2, None)]
    assert [dualpipe_peers(4, r, 1) for r in range(4)] == [(1, None), (2, 0), (3, 1), (None, 2)]


def test_dualpipe_orders_p2_m4():
    # p = 2: both ranks are middle ranks (half-rank k = 0). Step 2: F(phase 0), F(phase 1);
    # step 4 (M/2-p+k+1 = 1 round), the middle ranks' first round not overlapped: F, then a
    # whole B; then F&B; step 6: B(phase 1) whole, then zero bubble on: I(phase 0); step 8: W.
    # Rank 1 is in the second half: its phase 0 is chunk 1.
    assert names(dualpipe(2, 0, 4)) == "F0.0 F0.1 F1.0 B0.1 F1.1&B0.0 B1.1 I1.0 W1.0"
    assert names(dualpipe(2, 1, 4)) == "F0.1 F0.0 F1.1 B0.0 F1.0&B0.1 B1.0 I1.1 W1.1"


def test_dualpipe_orders_p4_m8():
    # rank 0 (k = 0): step 1 two F(0); step 2 F(0) F(1); step 3 one (I(1), W, F(1)); step 4 one
    # round F(0)&B(1), F(1)&B(0); step 5 one (B(1), F(1)&B(0)); step 6 B(1), I(0); step 7
    # (W, I(0)); step 8 W. Rank 1 (k = 1, a middle rank): step 2 two pairs; step 4 two rounds,
    # the first not overlapped; step 6 two pairs, input-gradient only from the second
    # (k odd: switched before its B(1)); step 8 two W.
    assert [names(dualpipe(4, r, 8)) for r in range(4)] == [
        "F0.0 F1.0 F2.0 F0.1 I0.1 W0.1 F1.1 F3.0&B1.1 F2.1&B0.0 B2.1 F3.1&B1.0 B3.1 I2.0 W2.0 "
        "I3.0 W3.0",
        "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 F2.1&B0.0 F3.0&B1.1 F3.1&B1.0 B2.1 B2.0 I3.1 I3.0 W3.1 "
        "W3.0",
        "F0.1 F0.0 F1.1 F1.0 F2.1 B0.0 F2.0&B0.1 F3.1&B1.0 F3.0&B1.1 B2.0 B2.1 I3.0 I3.1 W3.0 "
        "W3.1",
        "F0.1 F1.1 F2.1 F0.0 I0.0 W0.0 F1.0 F3.1&B1.0 F2.0&B0.1 B2.0 F3.0&B1.1 B3.0 I2.1 W2.1 "
        "I3.1 W3.1"]


@pytest.mark.parametrize("p,m", [(2, 4), (2, 10), (4, 8), (4, 14), (6, 12), (8, 16), (8, 20)])
def test_dualpipe_runs_every_pass_once_in_dependency_order(p, m):
    for r in range(p):
        flat = [o for op in dualpipe(p, r, m) for o in ((op, op.paired) if op.paired else (op,))]
        half = range(m // 2)
        fwd = [(o.chunk, o.microbatch) for o in flat if o.kind == "F"]
        bwd = [(o.chunk, o.microbatch) for o in flat if o.kind == "B"]
        assert sorted(fwd) == sorted(bwd) == sorted(itertools.product((0, 1), half))
        deferred = {(o.chunk, o.microbatch) for o in flat if o.kind == "B" and not o.weights}
        assert sorted((o.chunk, o.microbatch) for o in flat if o.kind == "W") == sorted(deferred)
        pos = {(o.kind, o.chunk, o.microbatch): i for i, o in enumerate(flat)}
        for c, i in itertools.product((0, 1), half):
            assert pos["F", c, i] < pos["B", c, i]
            if (c, i) in deferred:
                assert pos["B", c, i] < pos["W", c, i]
        # the mirror rank runs the same order with the directions swapped
        mirror = dualpipe(p, p - 1 - r, m)
        assert names(mirror) == names(dualpipe(p, r, m)).replace(".0", ".x").replace(
            ".1", ".0").replace(".x", ".1")


def _program(p, m, f, b, w, comm=None, tp=1):
    lay = Layer("layer", Phase(f, comm), Phase(b, comm), Phase(w))
    stages = [StageProgram(s, [(lay,), (lay,)]) for s in range(p)]
    return PipelineProgram(tp=tp, pp=p, dp=1, ep=1, vpp=2, microbatches=m, pp_bytes=0,
                           stages=stages, schedule="dualpipe")


def _ops_log(res):
    """(start, op) per rank: each op's first span; a whole B shows as B, a paired op's two
    halves as their own entries."""
    first: dict = {}
    for s in res.spans:
        if s.kind in ("forward", "input_grad", "weight_grad") and s.stream == "compute":
            k = (s.rank, "F" if s.kind == "forward" else "W" if s.kind == "weight_grad" else "B",
                 s.microbatch, s.chunk)
            first[k] = min(first.get(k, s.start_ns), s.start_ns)
    log: dict[int, list] = {}
    for (rank, kind, mb, c), t in sorted(first.items(), key=lambda kv: (kv[0][0], kv[1])):
        log.setdefault(rank, []).append((t, f"{kind}{mb}.{c}"))
    return log


def test_dualpipe_hand_derived_timeline_p2_m4():
    # F = B = W = 10 ns: F 10, whole B 20, I 10, W 10, F&B 30. Worked by hand from the
    # orders above (rank 0 is stage 0 of chunk 0 and stage 1 of chunk 1):
    # rank 0: F0.0 0; F0.1 10 (rank 1's F0.1 ends 10); F1.0 20; B0.1 30-50 (its own loss);
    #   F1.1&B0.0 50-80 (B0.0 from rank 1 at 50); B1.1 80-100; I1.0 100 (rank 1's B1.0 ends
    #   100); W1.0 110. Rank 1 mirrors it. Iteration 120 = M(F+B+W): no bubble at p = 2,
    #   (p/2-1)(...) = 0.
    res = simulate(_program(2, 4, 10, 10, 10), FreeNetwork(), record_spans=True)
    log = _ops_log(res)
    # a whole backward's weight-gradient phase follows its input-gradient phase (W row at +10)
    assert log[0] == [(0, "F0.0"), (10, "F0.1"), (20, "F1.0"), (30, "B0.1"), (40, "W0.1"),
                      (50, "F1.1"), (60, "B0.0"), (70, "W0.0"), (80, "B1.1"), (90, "W1.1"),
                      (100, "B1.0"), (110, "W1.0")]
    assert log[1] == [(0, "F0.1"), (10, "F0.0"), (20, "F1.1"), (30, "B0.0"), (40, "W0.0"),
                      (50, "F1.0"), (60, "B0.1"), (70, "W0.1"), (80, "B1.0"), (90, "W1.0"),
                      (100, "B1.1"), (110, "W1.1")]
    assert res.iteration_ns == 120


def _reference_end_ns(p, m, f, b, w):
    """Independent timing of the DualPipe orders (no SimPy): an op starts when its rank is free
    and its inputs exist (free communication); an F&B op lasts F + whole B and hands both
    outputs on when it ends."""
    table = schedule_table("dualpipe", p, m, 2)
    end: dict = {}
    free, nxt = [0] * p, [0] * p

    def cost(o):
        return {"F": f, "W": w}.get(o.kind, b + (w if o.weights else 0))

    def need(r, o):
        prv, nx = dualpipe_peers(p, r, o.chunk)
        if o.kind == "F":
            return [("F", prv, o.chunk, o.microbatch)] if prv is not None else []
        if o.kind == "W":
            return [("B", r, o.chunk, o.microbatch)]
        return [("B", nx, o.chunk, o.microbatch) if nx is not None
                else ("F", r, o.chunk, o.microbatch)]

    while any(nxt[r] < len(table[r]) for r in range(p)):
        moved = False
        for r in range(p):
            while nxt[r] < len(table[r]):
                op = table[r][nxt[r]]
                parts = (op, op.paired) if op.paired else (op,)
                deps = [d for o in parts for d in need(r, o)]
                if any(d not in end for d in deps):
                    break
                free[r] = max([free[r]] + [end[d] for d in deps]) + sum(map(cost, parts))
                for o in parts:
                    end[o.kind, r, o.chunk, o.microbatch] = free[r]
                nxt[r] += 1
                moved = True
        assert moved, "the orders deadlock"
    return max(free)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 10), (6, 14), (8, 16)])
@pytest.mark.parametrize("f,b,w", [(10, 10, 10), (10, 20, 10), (30, 20, 20), (10, 10, 20),
                                   (20, 30, 10)])
def test_dualpipe_engine_matches_independent_timing(p, m, f, b, w):
    res = simulate(_program(p, m, f, b, w), FreeNetwork())
    assert res.iteration_ns == _reference_end_ns(p, m, f, b, w)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 12), (6, 20), (8, 16), (8, 30)])
@pytest.mark.parametrize("f,b,w", [(10, 10, 10), (20, 20, 10), (30, 30, 10), (30, 30, 20)])
def test_dualpipe_bubble_is_deepseek_v3_closed_form(p, m, f, b, w):
    # DeepSeek-V3 report, Table 2 (and the DualPipe README): bubble (PP/2-1)(F&B + B - 3W), B
    # the whole backward (here b + w), F&B the overlapped chunk, F + b + w in simrun (compute
    # back to back). Against the per-rank work M(F + b + w) (M/2 microbatches per direction,
    # two stages per rank) it is exact in simrun whenever F = b (forward equals the
    # input-gradient pass) and W ≤ F; the paper's figure draws F = B_input. Otherwise the
    # engine is checked against the independent timing above (the formula is then off by a
    # few passes either way).
    res = simulate(_program(p, m, f, b, w), FreeNetwork())
    whole = b + w
    assert res.iteration_ns - m * (f + b + w) == (p // 2 - 1) * ((f + whole) + whole - 3 * w)
    if f == b == w:
        assert build_report(res)["bubble_fraction"] == pytest.approx((p - 2) / (3 * m))


def test_dualpipe_formula_is_not_exact_for_other_ratios():
    # the check the formula needs: with F ≠ B it is an approximation (both directions shown)
    p, m = 8, 16
    for f, b, w, extra in [(10, 20, 10, 110), (30, 20, 20, 180)]:
        res = simulate(_program(p, m, f, b, w), FreeNetwork())
        formula = (p // 2 - 1) * (f + 2 * (b + w) - 3 * w)
        assert res.iteration_ns - m * (f + b + w) == extra != formula


def test_overlapped_chunk_runs_its_collectives_beside_the_compute():
    # TP 2, a blocking TP all-reduce of 8 ns after every forward and input-gradient phase
    # (α 0, 1 GB/s: 2·(1/2)·8 B = 8 ns). Alone: F 18, whole B 28, I 18, W 10. In an F&B op the
    # compute runs back to back (10 + 10 + 10) while the forward's all-reduce (issued at +10,
    # ends +18) and the backward's (issued at +20, ends +28) run beside it: 30, not 46.
    # Rank 0: F0.0 0-18, F0.1 18-36, F1.0 36-54, B0.1 54-82, F1.1&B0.0 82-112 (B0.0 from
    # rank 1 at 82), B1.1 112-140, I1.0 140-158, W1.0 158-168; rank 1 mirrors it.
    comm = Comm(CollKind.ALLREDUCE, GroupKind.TP, 8)
    net = AlphaBetaNetwork(0, {GroupKind.TP: 1.0, GroupKind.PP: 1.0})
    res = simulate(_program(2, 4, 10, 10, 10, comm, tp=2), net, record_spans=True)
    assert res.iteration_ns == 168
    assert _ops_log(res)[0] == [
        (0, "F0.0"), (18, "F0.1"), (36, "F1.0"), (54, "B0.1"), (72, "W0.1"), (82, "F1.1"),
        (92, "B0.0"), (102, "W0.0"), (112, "B1.1"), (130, "W1.1"), (140, "B1.0"),
        (158, "W1.0")]
    # exposed TP: the six single ops' all-reduces (6 × 8 ns); the F&B op's are hidden
    for st in res.ranks:
        assert st.exposed_comm_ns[GroupKind.TP] == 48
    tp = sorted((s.start_ns, s.end_ns) for s in res.spans if s.rank == 0 and s.stream == "TP")
    assert (92, 100) in tp and (102, 110) in tp  # beside the F&B op's compute (82-112)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 20), (8, 16), (8, 40)])
def test_dualpipe_activation_memory(p, m):
    # counted live from F to the whole B or the W: the README's "PP + 1" activations per
    # device, in stage-microbatches of one direction's stage (both chunks are one stage each)
    live = [inflight_activation_bytes([1, 1], ops)[1] for ops in schedule_table(
        "dualpipe", p, m, 2)]
    assert live == [p + 1] * p  # on every rank


def test_dualpipe_constraints():
    with pytest.raises(UsageError, match="even pipeline size"):
        check_schedule("dualpipe", 3, 12, 2)
    with pytest.raises(UsageError, match=r"at least 2p = 8 \(got 6\)"):
        check_schedule("dualpipe", 4, 6, 2)
    with pytest.raises(UsageError, match="even number of microbatches"):
        check_schedule("dualpipe", 4, 9, 2)
    with pytest.raises(UsageError, match="two model stages per rank"):
        check_schedule("dualpipe", 4, 8, 1)
    check_schedule("dualpipe", 4, 8, 2)


def test_dualpipe_rank0_matches_the_readme_figure_p8_m20():
    # deepseek-ai/DualPipe README figure (8 PP ranks, 20 micro-batches; the reverse
    # direction's cells are unlabelled there), Device 0 read left to right: forwards 0-6; a
    # reverse forward; three (backward-for-input, backward-for-weights, reverse forward); then
    # overlapped cells labelled 7, 0, 8, 1, 9, 2, 3, 4, 5 (F7&B(rev), F(rev)&B0, F8&B(rev), …);
    # whole reverse backwards between the last overlapped cells; and the tail 6 6 7 7 8 8 9 9
    # (input-gradient then weight-gradient passes of this direction)
    assert names(dualpipe(8, 0, 20)) == (
        "F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 F6.0 F0.1 I0.1 W0.1 F1.1 I1.1 W1.1 F2.1 I2.1 W2.1 F3.1 "
        "F7.0&B3.1 F4.1&B0.0 F8.0&B4.1 F5.1&B1.0 F9.0&B5.1 F6.1&B2.0 B6.1 F7.1&B3.0 B7.1 "
        "F8.1&B4.0 B8.1 F9.1&B5.0 B9.1 I6.0 W6.0 I7.0 W7.0 I8.0 W8.0 I9.0 W9.0")

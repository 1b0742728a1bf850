"""Idle time of the interleaved schedule above its ideal bubble (p−1)/(v·M): the two mechanisms
docs/schedules.md ("Idle above the ideal bubble") measures on the NeMo 25.02 cases, pinned on
hand-worked timelines, closed forms and the independent list scheduler of schedule_support.

- Pipeline transfers of c ns on the fill and drain chains: with N = p and c ≤ F the iteration
  is (v·M + p − 1)(F + B) + 2(p·v − 1)·c (F, B: one chunk's forward and backward).
- A heavier last virtual stage (output layer and loss): every other stage waits out all of
  its extra work; the iteration is (v·M + p − 1)(F + B) + M·(x_F + x_B).
"""

import pytest
from conftest import uniform_program
from schedule_support import reference_interleaved

from sim.comm import GroupKind
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork, FreeNetwork
from sim.program.workload import Layer, Phase


def _pp_net() -> AlphaBetaNetwork:
    """Every pipeline message of ``pp_bytes`` bytes takes ``pp_bytes`` ns (1 GB/s, α = 0)."""
    return AlphaBetaNetwork(0, {GroupKind.PP: 1.0})


def _program(p, v, m, f, b, transfer=0):
    """``p`` equal stages, ``v`` chunks of one layer: forward ``f``, backward ``b`` ns per chunk."""
    return uniform_program(p, m, f * v, b * v, v=v, schedule="interleaved", pp_bytes=transfer)


def test_hand_worked_interleaved_p2_v2_m2_with_transfers():
    # p = 2, v = 2, M = 2 (N = 2): virtual stages 0 (stage 0 chunk 0), 1 (stage 1 chunk 0),
    # 2 (stage 0 chunk 1), 3 (stage 1 chunk 1). Per chunk F = 10, B = 20 (input grad 10, weight
    # grad 10); each activation/gradient transfer 5 ns. Orders (sim.pipeline.schedules.interleaved):
    #   stage 0 (warm-up 2·1 + 1·2 = 4): F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0
    #   stage 1 (warm-up 0 + 1·2 = 2):   F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0
    # Worked by hand (a send starts when its pass ends, the sender goes on; a wait before the
    # sender's pass has ended is bubble, the rest exposed PP):
    #   stage 0: F0.0 0-10, F1.0 10-20; F0.1 needs stage 1's F0.0 (ends 25, arrives 30):
    #            bubble 20-25, recv 25-30; F0.1 30-40, F1.1 40-50; B0.1 needs stage 1's B0.1
    #            (ends 75, arrives 80): bubble 50-75, recv 75-80; B0.1 80-100; B1.1 needs
    #            stage 1's B1.1 (ends 105): bubble 100-105, recv 105-110; B1.1 110-130;
    #            B0.0 (stage 1's B0.0 arrived at 130) 130-150; B1.0 needs stage 1's B1.0
    #            (ends 155): bubble 150-155, recv 155-160; B1.0 160-180.
    #   stage 1: F0.0 arrives 15: bubble 0-10, recv 10-15; F0.0 15-25; F1.0 (arrived 25)
    #            25-35; F0.1 (stage 0 ends it at 40): bubble 35-40, recv 40-45; F0.1 45-55;
    #            B0.1 55-75 (last virtual stage: no input); F1.1 (arrived 55) 75-85; B1.1
    #            85-105; B0.0 (stage 0's B0.1 arrived 105) 105-125; B1.0 needs stage 0's B1.1
    #            (ends 130): bubble 125-130, recv 130-135; B1.0 135-155; idle 155-180.
    # Iteration 180 = (v·M + p − 1)(F + B) + 2(p·v − 1)·c = 5·30 + 2·3·5.
    res = simulate(_program(2, 2, 2, 10, 20, transfer=5), _pp_net(), record_spans=True)
    log = sorted((s.start_ns, s.rank, s.kind, s.microbatch, s.chunk) for s in res.spans
                 if s.stream == "compute")
    assert log == [
        (0, 0, "forward", 0, 0), (0, 1, "bubble", -1, -1),
        (10, 0, "forward", 1, 0), (10, 1, "recv_wait", -1, -1),
        (15, 1, "forward", 0, 0),
        (20, 0, "bubble", -1, -1),
        (25, 0, "recv_wait", -1, -1), (25, 1, "forward", 1, 0),
        (30, 0, "forward", 0, 1),
        (35, 1, "bubble", -1, -1),
        (40, 0, "forward", 1, 1), (40, 1, "recv_wait", -1, -1),
        (45, 1, "forward", 0, 1),
        (50, 0, "bubble", -1, -1),
        (55, 1, "input_grad", 0, 1),
        (65, 1, "weight_grad", 0, 1),
        (75, 0, "recv_wait", -1, -1), (75, 1, "forward", 1, 1),
        (80, 0, "input_grad", 0, 1),
        (85, 1, "input_grad", 1, 1),
        (90, 0, "weight_grad", 0, 1),
        (95, 1, "weight_grad", 1, 1),
        (100, 0, "bubble", -1, -1),
        (105, 0, "recv_wait", -1, -1), (105, 1, "input_grad", 0, 0),
        (110, 0, "input_grad", 1, 1),
        (115, 1, "weight_grad", 0, 0),
        (120, 0, "weight_grad", 1, 1),
        (125, 1, "bubble", -1, -1),
        (130, 0, "input_grad", 0, 0), (130, 1, "recv_wait", -1, -1),
        (135, 1, "input_grad", 1, 0),
        (140, 0, "weight_grad", 0, 0),
        (145, 1, "weight_grad", 1, 0),
        (150, 0, "bubble", -1, -1),
        (155, 0, "recv_wait", -1, -1), (155, 1, "bubble", -1, -1),
        (160, 0, "input_grad", 1, 0),
        (170, 0, "weight_grad", 1, 0),
    ]
    pp = sorted((s.start_ns, s.end_ns, s.rank, s.label) for s in res.spans if s.stream == "PP")
    assert pp == [(10, 15, 0, "F0 → rank 1"), (20, 25, 0, "F1 → rank 1"),
                  (25, 30, 1, "F0 → rank 0"), (35, 40, 1, "F1 → rank 0"),
                  (40, 45, 0, "F0 → rank 1"), (50, 55, 0, "F1 → rank 1"),
                  (75, 80, 1, "B0 → rank 0"), (100, 105, 0, "B0 → rank 1"),
                  (105, 110, 1, "B1 → rank 0"), (125, 130, 1, "B0 → rank 0"),
                  (130, 135, 0, "B1 → rank 1"), (155, 160, 1, "B1 → rank 0")]
    assert res.iteration_ns == 180
    s0, s1 = res.ranks
    # stage 0 waits 5+25+5+5 = 40 before senders finished and 4 transfers (20); stage 1 waits
    # 10+5+5 = 20 plus the 25 after its last pass, and 3 transfers (15). Free network: 30 each.
    assert (s0.compute_ns, s0.exposed_comm_ns[GroupKind.PP], s0.bubble_ns) == (120, 20, 40)
    assert (s1.compute_ns, s1.exposed_comm_ns[GroupKind.PP], s1.bubble_ns) == (120, 15, 45)
    free = simulate(_program(2, 2, 2, 10, 20), FreeNetwork())
    assert free.iteration_ns == 150 and [r.bubble_ns for r in free.ranks] == [30, 30]


@pytest.mark.parametrize("p,v,m,f,b,c", [
    (2, 2, 4, 10, 20, 10), (4, 2, 8, 10, 20, 3), (4, 3, 8, 12, 24, 12), (3, 2, 6, 8, 16, 5),
    (4, 4, 12, 6, 12, 6), (8, 12, 16, 42, 80, 4), (8, 5, 24, 30, 60, 25), (3, 3, 9, 10, 30, 7)])
def test_transfers_on_the_fill_and_drain_chains_closed_form(p, v, m, f, b, c):
    # With transfers no longer than a forward (c ≤ F), each of the p·v − 1 virtual-stage
    # boundaries costs one transfer on the fill chain (microbatch 0's forwards) and one on the
    # drain chain (the last backwards); the steady state hides the rest.
    res = simulate(_program(p, v, m, f, b, transfer=c), _pp_net())
    closed = (v * m + p - 1) * (f + b) + 2 * (p * v - 1) * c
    ref_end, ref_wait = reference_interleaved(p, v, m, f, b, transfer=c)
    assert res.iteration_ns == closed == ref_end
    for st in res.ranks:
        assert st.compute_ns == v * m * (f + b)
        waited = st.bubble_ns + st.exposed_comm_ns[GroupKind.PP]
        assert waited == ref_wait[st.stage] == (p - 1) * (f + b) + 2 * (p * v - 1) * c


@pytest.mark.parametrize("p,v,m,f,b,c", [(4, 2, 8, 10, 20, 15), (4, 2, 8, 10, 20, 30),
                                         (8, 12, 16, 42, 80, 60)])
def test_transfers_longer_than_a_forward_also_stall_the_steady_state(p, v, m, f, b, c):
    # Past c = F the 2(p·v−1)·c form no longer holds: the steady state waits too. The engine
    # still agrees with the list scheduler.
    res = simulate(_program(p, v, m, f, b, transfer=c), _pp_net())
    ref_end, ref_wait = reference_interleaved(p, v, m, f, b, transfer=c)
    assert res.iteration_ns == ref_end > (v * m + p - 1) * (f + b) + 2 * (p * v - 1) * c
    assert [st.bubble_ns + st.exposed_comm_ns[GroupKind.PP] for st in res.ranks] == ref_wait


def _heavier_last_chunk(p, v, m, f, b, xf, xb):
    prog = _program(p, v, m, f, b)
    last = prog.stages[p - 1]
    extra = Layer("output_and_loss", Phase(xf), Phase(xb // 2), Phase(xb // 2))
    last.chunks[v - 1] = last.chunks[v - 1] + (extra,)
    return prog


@pytest.mark.parametrize("p,v,m,f,b,xf,xb", [
    (2, 2, 4, 10, 20, 2, 4), (4, 2, 8, 10, 20, 10, 20), (4, 3, 8, 12, 24, 30, 60),
    (8, 5, 16, 40, 80, 14, 26), (8, 5, 64, 40, 80, 4, 6)])
def test_heavier_last_virtual_stage_is_waited_out_by_every_other_stage(p, v, m, f, b, xf, xb):
    # The last virtual stage runs x_F + x_B more per microbatch (Megatron's output layer and
    # loss). Free network: it is the bottleneck and keeps the ideal fill/drain wait (p−1)(F+B);
    # every other stage waits that plus all M·(x_F + x_B) of its extra work.
    res = simulate(_heavier_last_chunk(p, v, m, f, b, xf, xb), FreeNetwork())
    extra = m * (xf + xb)
    ref_end, ref_wait = reference_interleaved(
        p, v, m, f, b, extra=lambda k, vs, _mb: (xf if k == "F" else xb) * (vs == p * v - 1))
    assert res.iteration_ns == ref_end == (v * m + p - 1) * (f + b) + extra
    waits = [st.bubble_ns for st in res.ranks]
    assert waits == ref_wait == [(p - 1) * (f + b) + extra] * (p - 1) + [(p - 1) * (f + b)]


@pytest.mark.parametrize("p,v,m,e,c", [(4, 2, 8, 3, 0), (8, 12, 16, 7, 4), (4, 3, 8, 5, 6)])
def test_first_microbatch_work_per_chunk_lies_on_the_fill_chain(p, v, m, e, c):
    # Work done once per chunk in its first microbatch's forward (Transformer Engine's FP8
    # weight casts, Layer.first_forward_ns) sits on the fill chain, microbatch 0's forwards:
    # the engine agrees with the list scheduler that charges it to those passes.
    f, b = 40, 80
    prog = _program(p, v, m, f, b, transfer=c)
    for st in prog.stages:
        st.chunks = [tuple(Layer(x.name, x.forward, x.input_grad, x.weight_grad,
                                 first_forward_ns=e) for x in ch) for ch in st.chunks]
    res = simulate(prog, _pp_net())
    ref_end, ref_wait = reference_interleaved(
        p, v, m, f, b, transfer=c, extra=lambda k, _vs, mb: e * (k == "F" and mb == 0))
    assert res.iteration_ns == ref_end > (v * m + p - 1) * (f + b) + 2 * (p * v - 1) * c
    assert [st.bubble_ns + st.exposed_comm_ns[GroupKind.PP] for st in res.ranks] == ref_wait

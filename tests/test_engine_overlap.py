"""Asynchronous data-parallel gradient reductions: hidden when they fit, exposed when not."""

from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase


def program(ar_bytes_l2: int, ar_bytes_l1: int = 0, m: int = 1, optimizer_ns: int = 0):
    """One stage, DP = 2. Forward 5 + 5 ns; backward per layer: input-grad 10, weight-grad 10.
    Weight-grad of each layer issues an async DP all-reduce (ring over 2 ranks moves S bytes
    per rank: S/B, with B = 1 GB/s → S ns)."""
    def wg(size):
        return Phase(10, Comm(CollKind.ALLREDUCE, GroupKind.DP, size, blocking=False)
                     if size else None)
    l1 = Layer("L1", Phase(5), Phase(10), wg(ar_bytes_l1))
    l2 = Layer("L2", Phase(5), Phase(10), wg(ar_bytes_l2))
    epi = (Task("optimizer", TaskKind.OPTIMIZER, optimizer_ns, wait_async=True),) \
        if optimizer_ns else ()
    st = StageProgram(0, [(l1, l2)], epilogue=epi)
    return PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=m, pp_bytes=0,
                           stages=[st], schedule="1f1b")


def net():
    return AlphaBetaNetwork(0, {GroupKind.DP: 1.0})


def timeline(res):
    return sorted((s.start_ns, s.end_ns, s.stream, s.label) for s in res.spans)


def test_allreduce_hidden_behind_remaining_backward():
    # Backward: L2 ig 10..20, L2 wg 20..30 -> AR(L2) issued at 30, takes 15 ns: 30..45,
    # hidden behind L1's backward 30..50. Iteration = 50 ns, nothing exposed.
    res = simulate(program(15), net(), record_spans=True)
    assert res.iteration_ns == 50
    assert res.ranks[0].exposed_comm_ns[GroupKind.DP] == 0
    assert (30, 45, "DP", "L2.weight_grad") in timeline(res)


def test_allreduce_exposed_when_it_does_not_fit():
    # AR(L2) takes 30 ns: 30..60, compute ends at 50 -> 10 ns exposed, iteration 60.
    res = simulate(program(30), net(), record_spans=True)
    assert res.iteration_ns == 60
    assert res.ranks[0].exposed_comm_ns[GroupKind.DP] == 10
    assert res.ranks[0].compute_ns == 50


def test_dp_stream_is_fifo_and_last_reduction_is_exposed():
    # AR(L2) 30..45; AR(L1) issued at 50, takes 15: 50..65 -> 15 ns exposed.
    res = simulate(program(15, 15), net(), record_spans=True)
    assert [t for t in timeline(res) if t[2] == "DP"] == [(30, 45, "DP", "L2.weight_grad"),
                                                          (50, 65, "DP", "L1.weight_grad")]
    assert res.iteration_ns == 65
    # AR(L2) 30 ns: 30..60, AR(L1) waits for it on the FIFO stream: 60..75.
    res = simulate(program(30, 15), net(), record_spans=True)
    assert [t for t in timeline(res) if t[2] == "DP"] == [(30, 60, "DP", "L2.weight_grad"),
                                                          (60, 75, "DP", "L1.weight_grad")]
    assert res.ranks[0].exposed_comm_ns[GroupKind.DP] == 25


def test_gradient_sync_only_in_last_microbatch():
    # M = 2: microbatch 0 (0..50) issues nothing; microbatch 1: forward 50..60, AR(L2) at 80.
    res = simulate(program(30, m=2), net(), record_spans=True)
    assert [t for t in timeline(res) if t[2] == "DP"] == [(80, 110, "DP", "L2.weight_grad")]
    assert res.iteration_ns == 110


def test_optimizer_waits_for_gradient_reduction():
    res = simulate(program(30, optimizer_ns=7), net(), record_spans=True)
    # AR(L2) ends at 60 -> optimizer 60..67.
    assert (60, 67, "compute", "optimizer") in timeline(res)
    st = res.ranks[0]
    assert (res.iteration_ns, st.optimizer_ns, st.exposed_comm_ns[GroupKind.DP]) == (67, 7, 10)

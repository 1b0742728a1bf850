"""SM interference: an asynchronous collective's kernel slows the compute beside it (and,
with a slowdown factor, is slowed by it) — hand-derived timelines, and overlap stays never
slower than no overlap."""

import json

import pytest
from conftest import ROOT

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.engine.interference import Interference
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase

TOPO = str(ROOT / "topologies" / "dgx-a100-1024.yaml")
GPT22 = str(ROOT / "workloads" / "models" / "gpt-22b.yaml")


def program() -> PipelineProgram:
    """One stage, DP 2, one microbatch. L1, L2: every phase 10 ns; L2's weight-grad issues a
    non-blocking DP all-reduce of 20 bytes (2(n−1)/n · S at 1 GB/s = 20 ns) that runs beside
    L1's backward."""
    ar = Comm(CollKind.ALLREDUCE, GroupKind.DP, 20, blocking=False)
    l1 = Layer("L1", Phase(10), Phase(10), Phase(10))
    l2 = Layer("L2", Phase(10), Phase(10), Phase(10, ar))
    return PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [(l1, l2)])], schedule="1f1b")


def run(intf, fuse=True):
    return simulate(program(), AlphaBetaNetwork(0, {GroupKind.DP: 1.0}), record_spans=True,
                    interference=intf, fuse=fuse)


def log(res):
    return sorted((s.start_ns, s.end_ns, s.stream, s.kind, s.label) for s in res.spans
                  if s.kind != "bubble")


def test_free_overlap_without_interference():
    res = run(None)
    assert res.iteration_ns == 60 and res.ranks[0].exposed_comm_ns[GroupKind.DP] == 0


@pytest.mark.parametrize("fuse", [True, False])
def test_compute_slowed_while_the_collective_runs(fuse):
    """1 of 4 SMs held by the all-reduce (40..60): compute at 3/4 speed. L1 input-grad (10 ns
    of work = 40 SM-ns at 3 per ns) takes ⌈40/3⌉ = 14: 40..54. L1 weight-grad from 54: 6 ns at
    3 (18 SM-ns) until the all-reduce ends at 60, the other 22 at 4 per ns: ⌈22/4⌉ = 6, ends at
    66. Lost: 4 + 2 = 6 ns, exposed DP."""
    res = run(Interference(sms=4, comm_sms=1), fuse)
    assert res.iteration_ns == 66
    st = res.ranks[0]
    assert st.compute_ns == 60 and st.exposed_comm_ns[GroupKind.DP] == 6
    assert log(res) == [
        (0, 10, "compute", "forward", "L1"),
        (10, 20, "compute", "forward", "L2"),
        (20, 30, "compute", "input_grad", "L2"),
        (30, 40, "compute", "weight_grad", "L2"),
        (40, 50, "compute", "input_grad", "L1"),
        (40, 60, "DP", "comm", "L2.weight_grad"),
        (50, 54, "compute", "comm_wait", "slowed by communication"),
        (54, 64, "compute", "weight_grad", "L1"),
        (64, 66, "compute", "comm_wait", "slowed by communication"),
    ]


def test_the_collective_slowed_by_the_compute_beside_it():
    """comm_slowdown 1.5: compute ran beside the all-reduce for all its 20 ns, so it ends
    ⌈20 · 0.5⌉ = 10 ns later (40..70), holding its SM meanwhile. L1 backward at 3/4 speed
    throughout: 40..54, 54..68; the rank then waits 68..70 for it. Exposed DP 4 + 4 + 2."""
    res = run(Interference(sms=4, comm_sms=1, comm_slowdown=1.5))
    assert res.iteration_ns == 70
    assert res.ranks[0].exposed_comm_ns[GroupKind.DP] == 10


def test_bad_interference_values():
    with pytest.raises(ValueError):
        Interference(sms=4, comm_sms=4)
    with pytest.raises(ValueError):
        Interference(sms=4, comm_sms=1, comm_slowdown=0.5)


LAYOUTS = [
    ["--tp", 8, "--pp", 2, "--dp", 2, "--global-batch", 8, "--nodes", 4],
    ["--tp", 4, "--pp", 2, "--dp", 4, "--global-batch", 16, "--nodes", 4,
     "--distributed-optimizer"],
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=range(len(LAYOUTS)))
def test_overlapping_with_interference_is_never_slower(tmp_path, layout):
    """--overlap-grad-reduce (and --overlap-param-gather) on against off, with the default
    interference (and with a comm slowdown of 1.5): never slower, and the interference makes
    the overlapped run slower than free overlap."""
    def it(*extra, lay=None):
        out = tmp_path / "r.json"
        assert main(["--model", GPT22, "--topo", TOPO, "--quiet", "--json", str(out),
                     *map(str, layout if lay is None else lay), *extra]) == 0
        return json.loads(out.read_text())["iteration_time_s"]

    off = it("--no-overlap-grad-reduce")  # nothing runs beside compute: no interference
    for slow in ("1", "1.5"):
        assert it("--comm-overlap-slowdown", slow) <= off
    if "--distributed-optimizer" in layout:
        assert it("--overlap-param-gather") <= it()
    # at PP 1 every bucket reduces beside the last backward (with PP > 1, Megatron-Core gives
    # the later stages one bucket, launched after it, and stage 0's last backward need not be
    # on the critical path): interference costs time
    pp1 = [str(a) for a in layout]
    pp1[pp1.index("--pp") + 1] = "1"
    pp1[pp1.index("--dp") + 1] = str(2 * int(pp1[pp1.index("--dp") + 1]))
    assert it(lay=pp1) > it("--nccl-channels", "0", lay=pp1)


def _nccl_loop(nbytes: int, nc: int, nthreads: int, threshold: int) -> int:
    """NCCL v2.30.7 enqueue.cc topoGetAlgoInfo, as written there: drop a channel while the
    message is below nc · nThreads · threadThreshold (never below one)."""
    while nbytes < nc * nthreads * threshold and nc >= 2:
        nc -= 1
    return nc


SIZES = [8, 1024, 32 * 1024, 64 * 1024, 100_000, 1 << 20, 3 << 20, 1 << 30]


@pytest.mark.parametrize("size", SIZES)
def test_kernel_channels_follow_nccls_size_rule(size):
    """Threads and thresholds per protocol (device.h, comm.h; the ring LL threshold × nRanks,
    tuning.cc): ring/tree Simple 512 × 64, LL 512 × 8 (× 8 ranks for the ring), LL128
    640 × 8; NVLS 16 channels at any size; all-to-all as ring Simple; cap 0: no kernel SMs."""
    from sim.network.nccl import kernel_channels
    for algo, proto, nt, thr in (("ring", "Simple", 512, 64), ("tree", "Simple", 512, 64),
                                 ("ring", "LL", 512, 8 * 8), ("tree", "LL", 512, 8),
                                 ("ring", "LL128", 640, 8), ("tree", "LL128", 640, 8),
                                 ("pairwise", "LL", 512, 64)):
        assert kernel_channels(size, 24, algo, proto, 8) == _nccl_loop(size, 24, nt, thr)
    assert kernel_channels(size, 24, "nvls", "Simple", 8) == 16
    assert kernel_channels(size, 8, "nvls", "Simple", 8) == 8
    assert kernel_channels(size, 0, "ring", "Simple", 8) == 0


def test_kernel_channels_worked_examples():
    from sim.network.nccl import kernel_channels
    assert [kernel_channels(s, 24, "ring", "Simple", 8)
            for s in (32 * 1024 - 1, 32 * 1024, 64 * 1024, 1 << 20)] == [1, 1, 2, 24]


def test_flow_network_takes_the_tuners_algorithm_and_protocol():
    """On a DGX A100 node: an 8-byte all-reduce (LL, one channel) and a 1 GiB one (every
    channel of the cap); the count is the rule's for the tuner's own choice."""
    from sim.network.base import CommRequest
    from sim.network.factory import build_network
    from sim.network.nccl import kernel_channels
    from sim.topology.load import load_topology
    net = build_network(load_topology(TOPO))
    ranks = tuple(range(8))
    for size, want in ((8, 1), (1 << 30, 24)):
        req = CommRequest(CollKind.ALLREDUCE, GroupKind.DP, ranks, size)
        plan, proto, _ = net.choose(CollKind.ALLREDUCE, ranks, size)
        assert net.kernel_channels(req, 24) == want == kernel_channels(
            size, 24, plan.algorithm, proto, 8)


def _sized_program(size: int) -> PipelineProgram:
    ar = Comm(CollKind.ALLREDUCE, GroupKind.DP, size, blocking=False)
    l1 = Layer("L1", Phase(10), Phase(10), Phase(10))
    l2 = Layer("L2", Phase(10), Phase(10), Phase(10, ar))
    return PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [(l1, l2)])], schedule="1f1b")


@pytest.mark.parametrize("size, ctas, iteration, lost", [
    # 128 KiB: ring Simple → 4 channels (the cap): 32 ns (40..72) at 4/8 speed. L1 input-grad
    # (80 SM-ns) 40..60; weight-grad 60..72 at 4 (48 SM-ns), the other 32 at 8: ends 76.
    (128 * 1024, 4, 76, 10 + 6),
    # 32 KiB: one channel: 8 ns (40..48) at 7/8: input-grad 56 SM-ns by 48, 24 more at 8:
    # ends 51; weight-grad 51..61.
    (32 * 1024, 1, 61, 1),
])
def test_sm_share_follows_the_message_size(size, ctas, iteration, lost):
    """8 SMs, at most 4 channels, α = 0, 4096 GB/s (an all-reduce of S bytes over DP 2 takes
    S/4096 ns): the big all-reduce holds 4 SMs, the small one 1."""
    res = simulate(_sized_program(size), AlphaBetaNetwork(0, {GroupKind.DP: 4096.0}),
                   interference=Interference(sms=8, comm_sms=4))
    assert res.iteration_ns == iteration
    assert res.ranks[0].exposed_comm_ns[GroupKind.DP] == lost
    assert res.nccl_ctas == {GroupKind.DP: (ctas,)}


def test_concurrent_kernels_add_their_ctas():
    """DP × CP = 2 × 2, 16 SMs, at most 4 channels, α = 0, 4096 GB/s. At t = 40 L2's
    weight-grad issues a 128 KiB DP all-reduce over the 4 DP×CP ranks (2·3/4 · 32 = 48 ns,
    40..88) and L1's input-grad a 128 KiB CP exchange (1/2 · 32 = 16 ns, 40..56); each holds
    4 CTAs (ring Simple: 128 KiB / 32 KiB). 40..56 both run: 8 of 16 SMs free; then 12.
    L1 input-grad (160 SM-ns): 128 by 56, 32 more at 12: ⌈32/12⌉ = 3 → 59 (9 lost, to CP,
    the group it ran beside first); weight-grad 160 at 12: ⌈160/12⌉ = 14 → 73 (4 lost, DP);
    the rank then waits for the all-reduce to 88. Exposed DP 4 + 15, CP 9."""
    kb128 = 128 * 1024
    ar = Comm(CollKind.ALLREDUCE, GroupKind.DP, kb128, blocking=False)
    ex = Comm(CollKind.ALLGATHER, GroupKind.CP, kb128, blocking=False, overlap=True)
    l1 = Layer("L1", Phase(10), Phase(10, ex), Phase(10))
    l2 = Layer("L2", Phase(10), Phase(10), Phase(10, ar))
    prog = PipelineProgram(tp=1, pp=1, dp=4, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [(l1, l2)])], schedule="1f1b", cp=2)
    net = AlphaBetaNetwork(0, {GroupKind.DP: 4096.0, GroupKind.CP: 4096.0})
    res = simulate(prog, net, record_spans=True, interference=Interference(sms=16, comm_sms=4))
    assert res.iteration_ns == 88
    st = res.ranks[0]
    assert (st.exposed_comm_ns[GroupKind.DP], st.exposed_comm_ns[GroupKind.CP]) == (19, 9)
    assert res.nccl_ctas == {GroupKind.DP: (4,), GroupKind.CP: (4,)}
    assert log(res)[4:] == [
        (40, 50, "compute", "input_grad", "L1"),
        (40, 56, "CP", "comm", "L1.input_grad"),
        (40, 88, "DP", "comm", "L2.weight_grad"),
        (50, 59, "compute", "comm_wait", "slowed by communication"),
        (59, 69, "compute", "weight_grad", "L1"),
        (69, 73, "compute", "comm_wait", "slowed by communication"),
        (73, 88, "compute", "comm_wait", "wait DP"),
    ]

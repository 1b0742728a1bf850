"""The host-dispatch model (sim.engine.host) against hand-derived timelines (µs below, ns in code).

Rule: kernel i starts at max(GPU free, its host issue time); the host issues one kernel every
t_host from where it stands; after a sync it stands where the awaited kernel ended."""

import pytest
from par_support import make_par

from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.engine.host import issue, segment_after_sync_ns
from sim.network.simple import AlphaBetaNetwork, FreeNetwork
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase

US = 1000


def _program(layers: tuple[Layer, ...], m: int = 1, ep: int = 1, dp: int = 1) -> PipelineProgram:
    return PipelineProgram(tp=1, pp=1, dp=dp, ep=ep, vpp=1, microbatches=m, pp_bytes=0,
                           stages=[StageProgram(0, [layers])], schedule="1f1b")


def _fwd(name: str, kernels_us: tuple[int, ...], sync: int = 0, comm: Comm | None = None):
    ks = tuple(k * US for k in kernels_us)
    return Layer(name, Phase(sum(ks), comm, kernels_ns=ks, sync_kernels=sync))


def test_segment_after_sync_by_hand():
    # kernels 5, 1, 1 µs issued at 2, 4, 6 µs after the sync (t_host 2 µs):
    # k0 2→7; k1 issued 4, waits for k0: 7→8; k2 issued 6: 8→9. End 9 = max(2+7, 4+2, 6+1).
    end, ready, times = issue([(5, 1, 0), (1, 1, 0), (1, 1, 0)], 2, 0, 0)
    assert times == [(2, 7), (7, 8), (8, 9)]
    assert (end, ready) == (9, 6)
    assert segment_after_sync_ns((5, 1, 1), 2) == 9
    # host-bound: 1, 1, 1 µs: issued 2, 4, 6 → 2→3, 4→5, 6→7; max(2+3, 4+2, 6+1) = 7
    assert issue([(1, 1, 0)] * 3, 2, 0, 0)[2] == [(2, 3), (4, 5), (6, 7)]
    assert segment_after_sync_ns((1, 1, 1), 2) == 7


@pytest.mark.parametrize("ds", [(5, 1, 1), (1, 1, 1), (3, 9, 2, 2, 7), (1,), (4, 0, 4)])
@pytest.mark.parametrize("t", [1, 2, 3])
def test_closed_form_matches_kernel_by_kernel(ds, t):
    assert issue([(d, 1, 0) for d in ds], t, 0, 0)[0] == segment_after_sync_ns(ds, t)


def test_sync_waits_for_the_awaited_kernel_not_the_last_issued():
    # router-like part 1, 1, 1 µs, host waits for the first two (the permute, third, was
    # issued before the wait): issued 2, 4, 6 → 2→3, 4→5, 6→7; the wait ends at 5, but the
    # host has already spent until 6 issuing: ready = max(6, 5) = 6
    end, ready, times = issue([(1, 1, 0), (1, 1, 0), (1, 1, 0), (0, 0, 2)], 2, 0, 0)
    assert times == [(2, 3), (4, 5), (6, 7)] and (end, ready) == (7, 6)
    # a long awaited kernel: 9 µs issued at 2 ends at 11: the host stands at 11 after the wait
    assert issue([(9, 1, 0), (1, 1, 0), (0, 0, 2)], 2, 0, 0)[1] == 11


def test_engine_timeline_after_a_dispatcher_sync():
    # layer A: kernels 1, 1, 1 µs, host waits for the first two, then an EP all-to-all of 3 µs
    # (6000 bytes at 1 byte/ns among 2 ranks: (2-1)/2 · 6000 ns); layer B: 5, 1, 1 µs.
    # Issue (t_host 2 µs): A at 2, 4, 6 (2→3, 4→5, 6→7); wait for A1 (5): host at 6;
    # all-to-all issued 8: 8→11; B issued 10, 12, 14: 11→16, 16→17, 17→18. End 18 µs against
    # 13 µs without the host: 5 µs of GPU idle, drawn before the fused run.
    a2a = Comm(CollKind.ALLTOALL, GroupKind.EP, 6000, blocking=True)
    prog = _program((_fwd("A", (1, 1, 1), 2, a2a), _fwd("B", (5, 1, 1))), ep=2, dp=2)
    net = AlphaBetaNetwork(0, {GroupKind.EP: 1.0})
    base = simulate(prog, AlphaBetaNetwork(0, {GroupKind.EP: 1.0}))
    assert base.iteration_ns == 13 * US
    res = simulate(prog, net, record_spans=True, host_dispatch_ns=2 * US)
    assert res.iteration_ns == 18 * US
    log = [(s.start_ns // US, s.label) for s in sorted(res.spans, key=lambda s: s.start_ns)
           if s.rank == 0 and s.end_ns > s.start_ns and s.label != "idle"]
    assert log == [(0, "host dispatch"), (5, "A"), (8, "A.forward"), (11, "B")]
    st = res.ranks[0]
    assert (st.host_wait_ns, st.bubble_ns, st.compute_ns) == (5 * US, 5 * US, 10 * US)
    assert st.exposed_comm_ns[GroupKind.EP] == 3 * US


def test_no_sync_gpu_bound_pays_only_the_first_launch():
    # 10, 10, 10 µs per forward, 2 microbatches, t_host 2 µs: the first kernel waits for its
    # issue (2 µs); afterwards the host is ahead (issued by 12 µs, GPU busy until 62 µs)
    prog = _program((_fwd("L", (10, 10, 10)),), m=2)
    assert simulate(prog, FreeNetwork()).iteration_ns == 60 * US
    res = simulate(prog, FreeNetwork(), host_dispatch_ns=2 * US)
    assert res.iteration_ns == 62 * US and res.ranks[0].host_wait_ns == 2 * US


def test_no_sync_launch_bound_iteration():
    # 1, 1, 1 µs per forward, 2 microbatches: 6 kernels issued every 2 µs → the last issued at
    # 12 µs ends at 13 µs = n·t_host + d_last
    prog = _program((_fwd("L", (1, 1, 1)),), m=2)
    res = simulate(prog, FreeNetwork(), host_dispatch_ns=2 * US)
    assert res.iteration_ns == 13 * US
    st = res.ranks[0]
    assert st.compute_ns + st.bubble_ns == res.iteration_ns and st.host_wait_ns == 7 * US


def test_rows_without_kernel_lists_take_no_host_time():
    # a workload file's row has no kernel list: its compute runs without host time
    lay = Layer("L", Phase(30 * US))
    prog = _program((lay,), m=2)
    assert simulate(prog, FreeNetwork(), host_dispatch_ns=2 * US).iteration_ns == 60 * US


def _moe_program(dispatcher: str = "alltoall"):
    from conftest import WORKLOADS  # noqa: PLC0415

    from sim.models import generate, load_model
    from sim.topology.gpu import GpuSpec  # noqa: PLC0415

    gpu = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
    m = load_model(WORKLOADS / "models" / "mixtral-8x7b.yaml")
    par = make_par(tp=1, pp=2, dp=4, ep=4, global_batch=16, micro_batch=1,
                         distributed_optimizer=True, moe_token_dispatcher=dispatcher)
    return generate(m, par, gpu)


def test_generated_router_phase_waits_for_its_routing_counts():
    prog = _moe_program()
    layers = prog.stages[0].chunks[0]
    router = [lay for lay in layers if lay.name.endswith("moe_router")]
    assert router, [lay.name for lay in layers]
    for lay in router:
        f = lay.forward
        # router GEMM, top-k (awaited through its device-to-host copy), permute
        assert len(f.kernels_ns) == 3 and f.sync_kernels == 2
        assert abs(sum(f.kernels_ns) - f.compute_ns) <= len(f.kernels_ns)
        assert lay.input_grad.sync_kernels == 0 == lay.weight_grad.sync_kernels
    # the expert GEMMs: one launch per local expert (8 experts over EP 4)
    fc1 = next(lay for lay in layers if lay.name.endswith("moe_fc1"))
    assert len(fc1.forward.kernels_ns) == 2 + 1  # two expert GEMMs, the activation
    assert sum(lay.forward.sync_kernels > 0 for lay in layers) == len(router)


def test_flex_dispatcher_is_not_modelled_as_syncing():
    layers = _moe_program("flex").stages[0].chunks[0]
    assert all(lay.forward.sync_kernels == 0 for lay in layers)


def test_zero_host_time_is_todays_engine():
    prog = _moe_program()
    net = AlphaBetaNetwork(5000, {g: 100.0 for g in GroupKind})
    a = simulate(prog, net)
    b = simulate(prog, AlphaBetaNetwork(5000, {g: 100.0 for g in GroupKind}),
                 host_dispatch_ns=0)
    assert a.iteration_ns == b.iteration_ns
    assert [(s.compute_ns, s.bubble_ns, s.host_wait_ns) for s in a.ranks] == \
        [(s.compute_ns, s.bubble_ns, s.host_wait_ns) for s in b.ranks]
    c = simulate(prog, AlphaBetaNetwork(5000, {g: 100.0 for g in GroupKind}),
                 host_dispatch_ns=20 * US)
    assert c.iteration_ns > a.iteration_ns and any(s.host_wait_ns > 0 for s in c.ranks)
    for s in c.ranks:  # the partition of the iteration still holds
        assert s.compute_ns + s.optimizer_ns + sum(s.exposed_comm_ns.values()) + \
            s.bubble_ns == c.iteration_ns

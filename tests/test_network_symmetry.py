"""Symmetric mode (one representative per stage, copies as link multiplicities) agrees exactly
with per-rank simulation on uniform clusters; fusable() is right and conservative."""

from __future__ import annotations

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.network import build_network
from sim.network.symmetry import copies
from sim.parallel.placement import Placement
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.topology import load_topology

MB = 1 << 20


def program(tp: int, dp: int, pp: int, m: int = 4, tp_bytes: int = 8 * MB,
            dp_bytes: int = 256 * MB, pp_bytes: int = 16 * MB) -> PipelineProgram:
    """Uniform stages of two layers: TP all-reduce after forward and input-grad compute (blocking),
    DP all-reduce of the weight gradients (non-blocking)."""
    tp_ar = Comm(CollKind.ALLREDUCE, GroupKind.TP, tp_bytes)
    dp_ar = Comm(CollKind.ALLREDUCE, GroupKind.DP, dp_bytes, blocking=False)
    lay = Layer("block", Phase(400_000, tp_ar), Phase(400_000, tp_ar), Phase(400_000, dp_ar))
    stages = [StageProgram(s, [(lay, lay)]) for s in range(pp)]
    return PipelineProgram(tp=tp, pp=pp, dp=dp, ep=1, vpp=1, microbatches=m, pp_bytes=pp_bytes,
                           stages=stages, schedule="1f1b")


def both_modes(topo, prog, placement, **net_kw):
    out = []
    for per_rank in (False, True):
        net = build_network(topo, **net_kw)
        res = simulate(prog, net, placement=placement, per_rank=per_rank)
        # mean achieved time per communication of each group kind (per-rank mode runs more)
        out.append((res.iteration_ns, {k: v.actual_ns / v.count
                                       for k, v in net.contention_stats().items()}))
    return out


@pytest.mark.parametrize("routing", ["dmodk", "ecmp", "adaptive"])
def test_dgx_cluster_under_one_leaf_per_rail(routing):
    # 16 DGX A100 nodes (one 20-node leaf per rail): TP 8 in a node, DP 4, PP 4
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-512.yaml"), nodes=16)
    prog = program(tp=8, dp=4, pp=4)
    sym, per = both_modes(topo, prog, Placement(8, 4, 4), routing=routing)
    assert sym == per
    assert sym[0] > 0


def test_pcie_servers_where_copies_share_nics_and_pcie_links():
    # 2 PCIe servers: TP 2 (GPU pairs on one PCIe switch), DP 4 spread over both servers
    # (placement tp-pp-dp), PP 2. The two TP ranks' DP rings share their pair's NIC and PCIe
    # switch; symmetric mode must count them on the representative's links.
    topo = load_topology(str(TOPOLOGIES / "pcie-a100-8gpu-16.yaml"), nodes=2)
    prog = program(tp=2, dp=4, pp=2, dp_bytes=64 * MB)
    pl = Placement(2, 4, 2, order="tp-pp-dp")
    sym, per = both_modes(topo, prog, pl)
    assert sym == per


def test_copies_of_a_request():
    pl = Placement(2, 4, 2, order="tp-pp-dp")
    dp0 = pl.group(GroupKind.DP, 0)
    assert copies(pl, CollKind.ALLREDUCE, GroupKind.DP, dp0) == [dp0, pl.group(GroupKind.DP, 1)]
    pp = copies(pl, CollKind.SENDRECV, GroupKind.PP, (0, 2))
    assert len(pp) == 8 and pp[0] == (0, 2) and len(set(pp)) == 8
    # not a group of the placement: no copies
    assert copies(pl, CollKind.ALLREDUCE, GroupKind.DP, (0, 5)) == [(0, 5)]


def test_fusable_tp8_in_nvswitch_nodes():
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-512.yaml"), nodes=16)
    net = build_network(topo)
    simulate(program(tp=8, dp=4, pp=4, m=1), net, placement=Placement(8, 4, 4))
    assert net.fusable(GroupKind.TP)  # NVLink only; DP and PP leave through each GPU's NIC
    assert not net.fusable(GroupKind.DP)  # DP rings share NICs with pipeline sends
    assert not net.fusable(GroupKind.PP)
    assert any("TP collectives never share links" in s for s in net.describe())


@pytest.mark.parametrize("tp, order", [(4, "tp-dp-pp"), (8, "dp-tp-pp")])
def test_not_fusable_when_other_groups_use_nvlink(tp, order):
    # TP 4: each node also holds two ranks of every DP group, whose ring uses NVLink.
    # dp-tp-pp: TP groups span nodes and share NICs with everything.
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-512.yaml"), nodes=16)
    dp = 128 // (tp * 4)
    net = build_network(topo)
    simulate(program(tp=tp, dp=dp, pp=4, m=1), net, placement=Placement(tp, dp, 4, order=order))
    assert not net.fusable(GroupKind.TP)


def test_not_fusable_in_pcie_servers():
    topo = load_topology(str(TOPOLOGIES / "pcie-a100-8gpu-16.yaml"), nodes=4)
    net = build_network(topo)
    simulate(program(tp=8, dp=2, pp=2, m=1), net, placement=Placement(8, 2, 2))
    assert not net.fusable(GroupKind.TP)  # TP ring and DP/PP traffic share the GPUs' PCIe links


def test_fusable_is_conservative_about_groups_that_could_overlap():
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-512.yaml"), nodes=4)
    net = build_network(topo)
    simulate(program(tp=8, dp=4, pp=1, m=1), net, placement=Placement(8, 4, 1))
    assert net.fusable(GroupKind.TP)
    # only the traffic the program issues counts: no DP_EP traffic here, and every DP group
    # uses its own rail
    assert net.fusable(GroupKind.DP)
    assert net.fusable(GroupKind.EP)  # EP groups of one rank carry nothing
    # with ep = 1 the DP_EP groups are the DP groups: expert-gradient traffic overlaps DP's
    prog = program(tp=8, dp=4, pp=1, m=1)
    lay = prog.stages[0].chunks[0][0]
    ep_ar = Comm(CollKind.ALLREDUCE, GroupKind.DP_EP, MB, blocking=False)
    prog.stages[0].chunks[0] = (lay, Layer("expert", weight_grad=Phase(1000, ep_ar)))
    net = build_network(topo)
    simulate(prog, net, placement=Placement(8, 4, 1))
    assert not net.fusable(GroupKind.DP)


def test_fused_and_unfused_engine_agree_when_fusable():
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-512.yaml"), nodes=16)
    prog = program(tp=8, dp=4, pp=4)
    pl = Placement(8, 4, 4)
    times = {fuse: simulate(prog, build_network(topo), placement=pl, fuse=fuse).iteration_ns
             for fuse in (True, False)}
    assert times[True] == times[False]


@pytest.mark.parametrize("routing", ["dmodk", "ecmp", "adaptive"])
def test_bulk_fabric_counts_equal_route_by_route(routing):
    import numpy as np

    from sim.topology.cluster import Cluster

    topo = load_topology(str(TOPOLOGIES / "dgx-h100-scalable.yaml"), nodes=2048)
    cl = Cluster(topo, routing)
    rng = np.random.default_rng(7)
    src = rng.integers(0, topo.num_gpus, 1500)
    dst = rng.integers(0, topo.num_gpus, 1500)
    routes = [cl.fabric_names(int(s), int(d), -1, 0) for s, d in zip(src, dst, strict=True)]
    every = sorted({name for r in routes for name in r})
    wanted = {name: i for i, name in enumerate(every)}
    expected = {i: sum(r.count(name) for r in routes) for name, i in wanted.items()}
    assert cl.count_fabric_links(src, dst, 0, wanted) == expected
    assert sum(expected.values()) > 1500  # most routes cross the fabric

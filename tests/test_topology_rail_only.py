"""A rail-only fabric (Wang et al., arXiv 2307.12169: the spine of a rail-optimised Clos
removed): topologies/dgx-h100-rail-only.yaml, 32 DGX H100 nodes, NIC k of every node on rail
switch k, no switch above the rails. Traffic between rails goes through the node's NVLink
first (NCCL's PXN), then along the destination GPU's rail. Hand-derived with the physical
latencies and the launch overhead set to 0 (``--set``); 1 GB/s = 1 byte/ns.
"""

from __future__ import annotations

import math

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.errors import InputError
from sim.network import build_network
from sim.network.base import CommRequest
from sim.topology import parse_topology
from sim.topology.cluster import Cluster

PATH = TOPOLOGIES / "dgx-h100-rail-only.yaml"
ZERO = ("node.nvlink.latency_ns=0", "node.pcie.latency_ns=0", "node.nics.latency_ns=0",
        "fabric.link_latency_ns=0", "fabric.levels[0].latency_ns=0",
        "collectives={launch_overhead_ns: 0}")
S = 100_000_000


def topo(*extra: str):
    return parse_topology(PATH.read_text(), str(PATH), overrides=ZERO + extra)


def test_cross_rail_route_goes_through_nvlink_then_the_destination_rail():
    # GPU 0 of node 0 → GPU 7 of node 1 (global 15): GPU 7's NIC is NIC 7 (rail 7), on PCIe
    # switch 3, not GPU 0's switch 0: over NVLink to GPU 7 of node 0 (next to NIC 7), PCIe to
    # NIC 7, rail switch 7, NIC 7 of node 1, PCIe to GPU 7. One switch on the way: no spine.
    t = topo()
    assert t.warnings == ()
    names = Cluster(t).path_names(0, 15)
    assert [(u, v) for u, v in names] == [
        (("gpu", 0, 0), ("nvswitch", 0)), (("nvswitch", 0), ("gpu", 0, 7)),
        (("gpu", 0, 7), ("pcie", 0, 3)), (("pcie", 0, 3), ("nic", 0, 7)),
        (("nic", 0, 7), ("sw", 1, 7, 0)), (("sw", 1, 7, 0), ("nic", 1, 7)),
        (("nic", 1, 7), ("pcie", 1, 3)), (("pcie", 1, 3), ("gpu", 1, 7))]
    cl = Cluster(t)
    assert not cl.tree.joined(cl.leaf_of(0, 0), cl.leaf_of(1, 7))  # rails never meet above


def test_cross_rail_sendrecv_time():
    # the slowest link on the route: PCIe Gen5 64 × 0.75 = NDR 400/8 × 0.96 = 48 GB/s
    # (NVLink 370.8); NCCL latency of one network step, Simple: 8.4 + 14 µs
    net = build_network(topo())
    res = net.isolated(CommRequest(CollKind.SENDRECV, GroupKind.PP, (0, 15), S))
    assert (res.duration_ns, res.algorithm) == (math.ceil(S / 48) + 22_400, "direct/Simple")


def test_cross_rail_flows_share_the_destination_rail():
    # GPUs 0..7 of node 0 all send to GPU 7 of node 1: every route enters rail 7 through NIC 7
    # of node 0 (the other GPUs reach it over NVLink first); the rail-only fabric has no other
    # way to node 1's GPU 7
    t = topo()
    cl = Cluster(t)
    nic_links = {cl.path_names(g, 15)[-4] for g in range(8)}
    assert nic_links == {(("nic", 0, 7), ("sw", 1, 7, 0))}


def test_a_rail_only_fabric_holds_at_most_one_switch_radix_of_nodes():
    with pytest.raises(InputError) as e:
        parse_topology(PATH.read_text(), str(PATH), nodes=65)
    msg = str(e.value)
    assert "fabric.levels" in msg and "65 nodes" in msg and "\n" not in msg

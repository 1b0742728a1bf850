"""Fabric routing as built (docs/network.md, "Fabric routing"): D-mod-K (OpenSM's fat-tree
tables) by default on InfiniBand, adaptive routing as an option, per-flow ECMP hashing and
packet spraying on RoCE; NCCL's channels and queue pairs spreading a ring's traffic under ECMP.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import Counter

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind
from sim.errors import InputError, UsageError
from sim.network import build_network
from sim.network.ncclgraph import dtree_edges, flows_per_rail
from sim.network.plans import ring_plan
from sim.network.predict import predict_rows
from sim.topology import load_topology, parse_topology
from sim.topology.cluster import Cluster

GiB = 1 << 30


def topo(name: str, **fabric):
    t = load_topology(str(TOPOLOGIES / name))
    if fabric:
        t = dataclasses.replace(t, fabric=dataclasses.replace(t.fabric, **fabric))
    return t


def test_dmodk_routes_of_a_shift_on_a_two_level_tree_by_hand():
    # tiny-fattree-8: 8 one-NIC nodes, 4 leaves of 2 nodes (2 up-links each), 2 spines.
    # Node i sits on leaf i // 2, port i % 2; its port index D = 2·leaf + port = i. D-mod-K
    # sends a flow up to spine D mod 2 of its destination, then down to the destination leaf.
    # Shift by 2 (every flow leaves its leaf): i → i+2 goes up leaf i//2 → spine i % 2, down
    # spine i % 2 → leaf (i+2)//2 mod 4.
    cl = Cluster(topo("tiny-fattree-8.yaml"))
    assert cl.routing == "dmodk"  # the default of an InfiniBand fabric
    for i in range(8):
        j = (i + 2) % 8
        up = (("sw", 1, i // 2, 0), ("sw", 2, 0, i % 2))
        down = (("sw", 2, 0, i % 2), ("sw", 1, j // 2, 0))
        assert cl.fabric_names(i, j) == [up, down]


@pytest.mark.parametrize("shift", range(1, 8))
def test_no_two_flows_of_a_shift_share_a_fabric_link_under_dmodk(shift):
    # OpenSM's fat-tree routing is built to be congestion-free for shift patterns: on the fully
    # populated two-level tree every switch-to-switch link carries at most one flow
    cl = Cluster(topo("tiny-fattree-8.yaml"))
    uses = Counter(link for i in range(8) for link in cl.fabric_names(i, (i + shift) % 8))
    assert uses and max(uses.values()) == 1


def test_rail_aligned_shift_on_the_h100_superpod_is_collision_free_under_dmodk():
    # 128 DGX H100, rail-optimised: 4 leaves of 32 nodes per rail, 32 spines. Shift by 32 nodes
    # on rail k: every flow crosses leaves; D-mod-K gives each its own up- and down-link,
    # while CRC-32 hashing (computed here with zlib) puts some on the same up-link.
    t = topo("dgx-h100-1024.yaml")
    g, n = t.gpus_per_node, t.num_nodes
    flows = [(a * g + 3, ((a + 32) % n) * g + 3) for a in range(n)]
    dmodk = Counter(link for s, d in flows for link in Cluster(t).fabric_names(s, d))
    assert len(dmodk) == 2 * n and max(dmodk.values()) == 1
    # ECMP by hand: up-link from the source leaf to spine crc32("s>d#0") mod 32
    per_uplink = Counter((s // g // 32, zlib.crc32(f"{s}>{d}#0".encode()) % 32)
                         for s, d in flows)
    ecmp = Counter(link for s, d in flows for link in Cluster(t, "ecmp").fabric_names(s, d)
                   if link[0][1] == 1)
    assert max(ecmp.values()) == max(per_uplink.values()) > 1


def test_allreduce_over_1024_h100s_reaches_the_per_nic_ceiling():
    # 128 nodes × 8 NDR NICs at 48 GB/s (NCCL's ~46-48 GB/s per NIC, nccl-tests#290): the bus
    # bandwidth of an all-reduce across more than 2 nodes is at most 8 × 48 = 384 GB/s (NVLSTree,
    # chosen here: in its tree over nodes every node's NICs carry 2S each way, so algbw ≤ 8 ×
    # 48 / 2 and busbw ≤ 2 · 1023/1024 · 192); NCCL's tree and ring LL128 carry 0.92 of it as
    # payload (tuning.cc), at most 353 GB/s. With routing that gives every flow its own link,
    # 1 GiB reaches ≥ 300 GB/s.
    t = topo("dgx-h100-1024.yaml")
    for routing in (None, "adaptive"):
        row = predict_rows("allreduce", 1024, [GiB], build_network(t, routing=routing))[0]
        assert row["algorithm"] == "nvlstree/Simple", row
        assert 300 <= row["busbw_GBps"] <= 2 * 1023 / 1024 * 8 * 48 / 2, (routing, row)
    for routing in (None, "adaptive"):  # without NVLS (NCCL_NVLS_ENABLE=0): NCCL's tree
        row = predict_rows("allreduce", 1024, [GiB],
                           build_network(t, routing=routing, nvls_enable=False))[0]
        assert 300 <= row["busbw_GBps"] <= 0.92 * 8 * 48, (routing, row)


def test_ncclgraph_double_binary_tree_is_nccls():
    # NCCL trees.cc illustrations: 14 ranks (tree 0), 12 ranks mirrored, 13 ranks shifted
    parents0 = dict(dtree_edges(14, 0))
    assert parents0 == {1: 2, 3: 2, 2: 4, 5: 6, 7: 6, 6: 4, 4: 8, 9: 10, 11: 10, 10: 12,
                        13: 12, 12: 8, 8: 0}
    mirrored = dict(dtree_edges(12, 1))
    assert mirrored[3] == 11 and mirrored[7] == 3 and 11 not in mirrored
    shifted = dict(dtree_edges(13, 1))
    assert shifted[9] == 1 and shifted[0] == 9 and shifted[11] == 0 and 1 not in shifted


def test_ecmp_vs_spray_on_the_ethernet_fabric():
    # Spectrum-X style RoCE fabric: packet spraying by default; a shift crossing leaves
    # spreads evenly over the 32 up-links of a leaf (one trunk link of 32 links' capacity)
    t = topo("dgx-h100-spectrumx-1024.yaml")
    assert (t.fabric.transport, t.fabric.routing) == ("roce", "spray")
    cl = Cluster(t)
    g = t.gpus_per_node
    trunk = Counter(link for a in range(128)
                    for link in cl.fabric_names(a * g, ((a + 32) % 128) * g))
    assert len(trunk) == 8 and set(trunk.values()) == {32}  # 4 leaves × (up, down)
    assert cl.cap[cl.link(*next(iter(trunk)))] == pytest.approx(32 * 48)
    # A data-parallel ring over GPU 0 of all 128 nodes whose every hop crosses leaves (node
    # order 0, 32, 64, 96, 1, 33, ...): one rail, 2 NCCL channels on it (NDR: rings
    # duplicated), each half the traffic. Spraying: every NIC carries 2·127/128·S at 48 GB/s.
    # ECMP: the busiest up- or down-link carries L flows' worth, L counted here by hand
    # from zlib's CRC-32 of each sub-flow's key, so the bandwidth term grows L-fold.
    ranks = tuple((q * 32 + a) * g for a in range(32) for q in range(4))
    edges = [(ranks[i], ranks[(i + 1) % 128]) for i in range(128)]
    load: Counter = Counter()
    for s, d in edges:
        for ch in (0, 1):
            j = zlib.crc32(f"{s}>{d}#{ch}".encode()) % 32
            load[("up", s // g // 32, j)] += 0.5
            load[("down", d // g // 32, j)] += 0.5
    worst = max(load.values())
    assert worst == 3.0
    size = GiB
    times = {}
    for r in ("spray", "ecmp"):
        net = build_network(t, routing=r, algorithm="ring", protocol="Simple")
        times[r] = net.tuner.choose(CollKind.ALLREDUCE, ranks, size)[2]
    bw_ns = 2 * 127 / 128 * size / 48
    fixed = times["spray"] - bw_ns  # latencies and pipeline ramp, the same under both
    assert 0 < fixed < 0.2 * bw_ns
    assert times["ecmp"] == pytest.approx(fixed + worst * bw_ns, rel=0.01)
    # the InfiniBand twin under D-mod-K: destination n+32 of leaf-mates are distinct ports,
    # so no collision either: the same time as spraying
    ib = build_network(topo("dgx-h100-1024.yaml"), algorithm="ring", protocol="Simple")
    assert ib.tuner.choose(CollKind.ALLREDUCE, ranks, size)[2] == times["spray"]


def test_channels_and_queue_pairs_spread_a_ring_under_ecmp():
    # NCCL duplicates its rings when a ring carries ≥ 25 GB/s (search.cc
    # ncclTopoDupChannels): 2 channels per 48 GB/s NDR NIC, 1 per 24 GB/s HDR NIC; each
    # connection's data goes over NCCL_IB_QPS_PER_CONNECTION queue pairs, each hashed alone
    h100 = topo("dgx-h100-spectrumx-1024.yaml")
    assert flows_per_rail(Cluster(h100, "ecmp")) == 2
    assert flows_per_rail(Cluster(dataclasses.replace(
        h100, fabric=dataclasses.replace(h100.fabric, qps_per_connection=4)), "ecmp")) == 8
    assert flows_per_rail(Cluster(h100, "spray")) == 1  # spreading: the split changes nothing
    assert flows_per_rail(Cluster(topo("dgx-a100-1024.yaml"), "ecmp")) == 1
    assert flows_per_rail(Cluster(topo("dgx-a100-1024.yaml"))) == 1  # D-mod-K
    # the ring over 4 nodes: 8 rails × 2 flows, each 1/16 of the traffic, hashed separately
    cl = Cluster(h100, "ecmp")
    ranks = tuple(range(32))
    plan = ring_plan(cl, CollKind.ALLGATHER, ranks, "nvlink")
    cfs = plan.phases[0].coflows
    assert len(cfs) == 16 and {cf.channel for cf in cfs} == set(range(16))
    assert sum(cf.coef for cf in cfs) == pytest.approx(31 / 32)
    # with 8 queue pairs per connection the worst up-link of a leaf-crossing ring carries a
    # smaller share of the ring than with 1 (hashing averages over more flows)
    def worst_share(qps: int) -> float:
        t = dataclasses.replace(h100, fabric=dataclasses.replace(h100.fabric,
                                                                  qps_per_connection=qps))
        c = Cluster(t, "ecmp")
        group = tuple(a * 8 + k for a in range(0, 128, 32) for k in range(8))  # 4 leaves apart
        load: Counter = Counter()
        for cf in ring_plan(c, CollKind.ALLGATHER, group, "nvlink").phases[0].coflows:
            for s, d, rail in cf.edges:
                for link in c.fabric_names(s, d, rail, cf.channel):
                    load[link] += cf.coef
        return max(load.values())
    assert worst_share(8) < worst_share(1)


def test_routing_field_and_flag_refusals():
    text = (TOPOLOGIES / "tiny-fattree-8.yaml").read_text()
    bad = text.replace("fabric:\n", "fabric:\n  routing: spray\n")
    with pytest.raises(InputError, match="fabric.routing"):
        parse_topology(bad, "t.yaml")
    bad = text.replace("fabric:\n", "fabric:\n  transport: myrinet\n")
    with pytest.raises(InputError, match="fabric.transport"):
        parse_topology(bad, "t.yaml")
    bad = text.replace("fabric:\n", "fabric:\n  qps_per_connection: 0\n")
    with pytest.raises(InputError, match="qps_per_connection"):
        parse_topology(bad, "t.yaml")
    with pytest.raises(UsageError, match="infiniband"):
        build_network(topo("tiny-fattree-8.yaml"), routing="spray")
    with pytest.raises(UsageError, match="roce"):
        build_network(topo("dgx-h100-spectrumx-1024.yaml"), routing="dmodk")

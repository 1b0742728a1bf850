"""The cluster graph: the fast structural router agrees with networkx on the same graph; ECMP
hashing is deterministic across interpreter runs; adaptive routing uses trunk links."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import zlib

import networkx as nx
import pytest
from conftest import ROOT, TOPOLOGIES

from sim.topology import load_topology
from sim.topology.cluster import Cluster
from sim.topology.graph import build_graph


def _fabric_paths(cl: Cluster, na: int, nb: int, k: int) -> set[tuple]:
    la, lb = cl.leaf_of(na, k), cl.leaf_of(nb, k)
    if la == lb:
        return {(("nic", na, k), ("sw", 1, la, 0), ("nic", nb, k))}
    return {tuple([("nic", na, k)] + cl.tree.switches(la, lb, c) + [("nic", nb, k)])
            for c in range(cl.equal_cost_paths(la, lb))}


@pytest.mark.parametrize("name", ["dgx-a100-1024.yaml", "dgx-a100-1024-oversub4.yaml",
                                  "dgx-h100-1024.yaml", "pcie-a100-8gpu-16.yaml",
                                  "tiny-fattree-8.yaml"])
def test_ecmp_paths_are_exactly_networkx_shortest_paths(name):
    topo = load_topology(str(TOPOLOGIES / name))
    g = build_graph(topo)
    fabric = g.subgraph([v for v in g if v[0] in ("sw", "nic")])
    cl = Cluster(topo)
    rnd = random.Random(7)
    checked = 0
    while checked < 25:
        na, nb = rnd.randrange(topo.num_nodes), rnd.randrange(topo.num_nodes)
        if na == nb:
            continue
        k = rnd.randrange(topo.node.nics.count)
        want = {tuple(p) for p in nx.all_shortest_paths(fabric, ("nic", na, k), ("nic", nb, k))}
        assert _fabric_paths(cl, na, nb, k) == want
        checked += 1


@pytest.mark.parametrize("name", ["dgx-a100-1024.yaml", "pcie-a100-8gpu-16.yaml",
                                  "tiny-pcie-4.yaml", "tiny-2x2.yaml"])
def test_every_routed_link_is_a_graph_edge_with_its_bandwidth(name):
    topo = load_topology(str(TOPOLOGIES / name))
    g = build_graph(topo)
    cl = Cluster(topo)
    rnd = random.Random(3)
    for _ in range(40):
        a, b = rnd.randrange(topo.num_gpus), rnd.randrange(topo.num_gpus)
        if a == b:
            continue
        links = cl.path(a, b)
        names = [cl.names[i] for i in links]
        assert names[0][0] == ("gpu", a // topo.gpus_per_node, a % topo.gpus_per_node)
        assert names[-1][1] == ("gpu", b // topo.gpus_per_node, b % topo.gpus_per_node)
        for (u, v), i in zip(names, links, strict=True):
            assert g.has_edge(u, v)
            assert g.edges[u, v]["bandwidth_GBps"] == cl.cap[i]
        for (_, v1), (u2, _) in zip(names, names[1:], strict=False):
            assert v1 == u2  # contiguous


def test_intra_node_routes_follow_the_hardware():
    dgx = Cluster(load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml")))
    kinds = [dgx.kind[i] for i in dgx.path(0, 5)]
    assert kinds == ["nvlink", "nvlink"]
    # GPU 7 → node 1's GPU 2 uses rail 2: NVLink to GPU 2 (PXN), PCIe to NIC 2, leaf, NIC, GPU
    names = [dgx.names[i][1] for i in dgx.path(7, 8 + 2)]
    assert names[:3] == [("nvswitch", 0), ("gpu", 0, 2), ("pcie", 0, 1)]
    assert ("nic", 0, 2) in names and names[-1] == ("gpu", 1, 2)
    pcie = Cluster(load_topology(str(TOPOLOGIES / "tiny-pcie-4.yaml")))
    hops = [pcie.names[i][1] for i in pcie.path(1, 2)]
    assert hops == [("pcie", 0, 0), ("cpu", 0, 0), ("cpu", 0, 1), ("pcie", 0, 1), ("gpu", 0, 2)]
    assert [pcie.cap[i] for i in pcie.path(1, 2)] == [20.0, 20.0, 10.0, 20.0, 20.0]


def test_rail_optimised_leaves():
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml"))
    cl = Cluster(topo)
    # NIC k of the 20 nodes of a scalable unit share leaf k; other rails and units differ
    assert len({cl.leaf_of(n, 3) for n in range(20)}) == 1
    assert len({cl.leaf_of(0, k) for k in range(8)}) == 8
    assert cl.leaf_of(19, 0) != cl.leaf_of(20, 0)
    # a rail's leaves sit under one set of spines: same-rail traffic never needs the core level
    assert max(cl.fabric_level(cl.leaf_of(0, k), cl.leaf_of(127, k)) for k in range(8)) == 2
    assert cl.equal_cost_paths(cl.leaf_of(0, 0), cl.leaf_of(127, 0)) == 20


def test_ecmp_choice_is_crc32_of_the_flow_key():
    topo = load_topology(str(TOPOLOGIES / "tiny-fattree-8.yaml"))
    cl = Cluster(topo)
    for src, dst, ch in [(0, 2, 0), (0, 2, 1), (5, 1, 0), (7, 0, 3)]:
        spine = [cl.names[i][1] for i in cl.path(src, dst, -1, ch) if cl.names[i][1][0] == "sw"
                 and cl.names[i][1][1] == 2]
        assert spine == [("sw", 2, 0, zlib.crc32(f"{src}>{dst}#{ch}".encode()) % 2)]


def test_ecmp_hash_does_not_depend_on_pythonhashseed():
    code = ("from sim.topology import load_topology; from sim.topology.cluster import Cluster;"
            "c = Cluster(load_topology('topologies/dgx-a100-1024.yaml'));"
            "print([c.names[i] for s in range(0, 1024, 37) for i in c.path(s, 1023 - s)])")
    outs = set()
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                                capture_output=True, text=True).stdout)
    assert len(outs) == 1


def test_adaptive_routing_uses_trunks_with_the_summed_capacity():
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-1024-oversub4.yaml"))
    cl = Cluster(topo, "adaptive")
    links = cl.path(0, 8 * 40)  # node 0 → node 40 on rail 0: different leaves (32 per leaf)
    trunks = [(cl.names[i], cl.cap[i]) for i in links if cl.kind[i] == "fabric"]
    assert [name[0][0] for name, _ in trunks] == ["up", "down"]
    assert all(cap == pytest.approx(8 * 24.0) for _, cap in trunks)  # 8 up-links × 24 GB/s

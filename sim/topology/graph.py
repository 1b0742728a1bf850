"""The whole cluster as a networkx directed graph (for inspection, export and route checks).

Nodes and link attributes use the names of :mod:`sim.topology.cluster`: GPUs, the NVSwitch (one
node standing for the node's NVSwitch chips) or PCIe switches, CPU sockets, NICs, and fabric
switches ``("sw", level, block, j)``. Every physical link appears as two directed edges with
``bandwidth_GBps`` (effective: line rate × efficiency), ``line_GBps``, ``latency_ns`` and
``kind`` (nvlink, pcie, cpu, nic, fabric). The simulator itself routes with the arithmetic of
:class:`~sim.topology.cluster.Cluster` (fast, lazy); tests check that its ECMP paths are exactly
networkx's shortest paths of this graph. networkx is imported only here.
"""

from __future__ import annotations

import networkx as nx

from sim.topology.cluster import Cluster
from sim.topology.spec import Topology


def build_graph(topo: Topology) -> nx.DiGraph:
    """All nodes and directed links of ``topo`` (ECMP view: every switch is a node)."""
    cl = Cluster(topo, "ecmp")
    g = nx.DiGraph(name=topo.name)

    def both(u: tuple, v: tuple, line_GBps: float) -> None:
        for a, b in ((u, v), (v, u)):
            i = cl.link(a, b)
            g.add_edge(a, b, bandwidth_GBps=cl.cap[i], line_GBps=line_GBps,
                       latency_ns=cl.lat[i], kind=cl.kind[i])

    for n in range(topo.num_nodes):
        _node_links(g, both, topo, n)
    if cl.tree is not None:
        _fabric_links(both, topo, cl)
    return g


def _node_links(g: nx.DiGraph, both, topo: Topology, n: int) -> None:
    """GPUs, NVSwitch, PCIe switches, CPU sockets and NICs of node ``n``."""
    node = topo.node
    p = node.pcie
    for i in range(node.gpus):
        g.add_node(("gpu", n, i), kind="gpu")
    if node.nvlink is not None:
        nv = node.nvlink
        for i in range(node.gpus):
            both(("gpu", n, i), ("nvswitch", n), nv.links_per_gpu * nv.link_bandwidth_GBps)
    if node.xgmi is not None:  # full mesh: one link per GPU pair
        for i in range(node.gpus):
            for j in range(i + 1, node.gpus):
                both(("gpu", n, i), ("gpu", n, j), node.xgmi.link_bandwidth_GBps)
    for i in range(node.gpus):
        both(("gpu", n, i), ("pcie", n, p.gpu_switch[i]), p.bandwidth_GBps)
    for k in range(node.nics.count):
        both(("nic", n, k), ("pcie", n, node.nics.switch[k]), p.bandwidth_GBps)
    for sw in range(p.switches):
        both(("pcie", n, sw), ("cpu", n, p.switch_socket[sw]), p.bandwidth_GBps)
    for a in range(p.sockets):
        for b in range(a + 1, p.sockets):
            both(("cpu", n, a), ("cpu", n, b), p.cpu_link_bandwidth_GBps)


def _fabric_links(both, topo: Topology, cl: Cluster) -> None:
    """NIC-to-leaf links and the switch levels above the leaves."""
    node, f, tree = topo.node, topo.fabric, cl.tree
    assert f is not None and tree is not None
    line = f.link_bandwidth_gbps / 8
    leaves = set()
    for n in range(topo.num_nodes):
        for k in range(node.nics.count):
            leaf = cl.leaf_of(n, k)
            leaves.add(leaf)
            both(("nic", n, k), ("sw", 1, leaf, 0), min(node.nics.bandwidth_gbps / 8, line))
    # up-links level by level: switch j of block b at level l → switches j·up + u of the parent
    current = {("sw", 1, leaf, 0) for leaf in leaves}
    spans = tree.spans
    for level in range(2, len(f.levels) + 1):
        up = f.levels[level - 2].up
        nxt = set()
        for (_, lv, b, j) in sorted(current):
            # block b at level lv−1 is counted in units of leaves via spans
            first_leaf = b * spans[lv]
            parent_block = first_leaf // spans[level]
            for u in range(up):
                parent = ("sw", level, parent_block, j * up + u)
                both(("sw", lv, b, j), parent, line)
                nxt.add(parent)
        current = nxt

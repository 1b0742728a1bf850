"""Rings on a node's xGMI full mesh (sim/topology/mesh.py), for :mod:`sim.network.plans`.

Inside one mesh node a ring all-reduce runs one channel per link-disjoint ring, so together
they use every GPU-to-GPU link once per step (n − 1 rings of n GPUs where they exist); a ring
through several mesh nodes walks each node from the GPU next to its NIC to the GPU next to the
NIC it sends on, the channels' walks sharing no link. Edges are ``(src, dst, rail)`` as in
:mod:`sim.network.plans` (rail −1: the destination's NIC).
"""

from __future__ import annotations

from sim.topology.cluster import Cluster


def mesh_rotate(cl: Cluster, gpus: list[int], rail: int, c: int, entry: int) -> list[int]:
    """A node's ranks in channel ``c`` on an xGMI full mesh (no switch to reach a NIC over):
    from the GPU next to NIC ``rail`` to the other GPU on that NIC's PCIe switch, the channels'
    paths sharing no link (:func:`sim.topology.mesh.disjoint_paths`); where no such paths exist
    (or a NIC's switch has one GPU), along link-disjoint ring c (mod their number)."""
    from sim.topology.mesh import disjoint_paths, disjoint_rings  # only a mesh loads it

    node = cl.topo.node
    rails = sorted({cl.nic_of(g) for g in gpus})
    ends = []
    for k in rails:
        e = next((i for i, g in enumerate(gpus) if cl.nic_of(g) == k), None)
        x = next((i for i, g in enumerate(gpus) if i != e and
                  node.pcie.gpu_switch[g % cl.gpn] == node.nics.switch[k]), None)
        ends.append((e, x))
    paths = None
    if rail in rails and all(e is not None and x is not None for e, x in ends):
        paths = disjoint_paths(len(gpus), tuple(ends))
    if paths is not None:
        return [gpus[i] for i in paths[rails.index(rail)]]
    rings = disjoint_rings(len(gpus))
    ring = rings[c % len(rings)]
    at = ring.index(entry)
    return [gpus[i] for i in ring[at:] + ring[:at]]


def mesh_ring_edges(ranks: tuple[int, ...], chain_root: int | None
                     ) -> tuple[list[tuple[tuple[int, int, int], ...]], int, int]:
    """Rings inside one xGMI full mesh: one channel per link-disjoint ring
    (:func:`sim.topology.mesh.disjoint_rings`), so that together they use every link of the
    mesh once per step where such rings exist (n − 1 rings of n GPUs, n ≠ 4, 6)."""
    from sim.topology.mesh import disjoint_rings  # only a mesh loads it

    out = []
    for ring in disjoint_rings(len(ranks)):
        seq = [ranks[i] for i in ring]
        edges = [(seq[j], seq[(j + 1) % len(seq)], -1) for j in range(len(seq))]
        if chain_root is not None:
            cut = next(i for i, e in enumerate(edges) if e[1] == chain_root)
            edges = edges[cut + 1:] + edges[:cut]
        out.append(tuple(edges))
    return out, len(out[0]), 0

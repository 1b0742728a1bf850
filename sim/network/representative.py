"""Symmetric simulation: ring plans reduced to the edges that can differ (docs/scale.md §3).

A ring over DP = 512 nodes has 512 edges, almost all equivalent; the representative plan keeps
one of each kind, so the cost of a ring no longer grows with its length.
"""

from __future__ import annotations

from sim.network.plans import Coflow, Edge, Plan
from sim.topology.cluster import Cluster


def representative_plan(cl: Cluster, plan: Plan, pinned: frozenset[int],
                        memo: dict | None = None) -> Plan:
    """Symmetric simulation: a ring plan reduced to the edges that can differ.

    A ring's coflow moves at the rate of its slowest edge. Nodes whose outgoing edges stay
    inside one leaf switch and touch no node in ``pinned`` (the nodes of the simulated ranks,
    where other traffic of the model meets the ring) are equivalent when their edges have the
    same local GPUs and rails: each edge uses its own links, and the symmetric model loads
    every such node alike. One node of each kind is kept; edges that cross leaves or touch
    pinned nodes are all kept. The rate and the latency (a maximum over edges) are unchanged
    and the cost no longer grows with the ring's length. Other algorithms are returned as is.
    ``memo`` caches the kept edges per (coflow edges, ``pinned``): ring edges are shared by
    the plans of one group.
    """
    if plan.algorithm != "ring" or cl.topo.fabric is None:
        return plan
    phases = []
    changed = False
    if memo is None:
        memo = {}
    for ph in plan.phases:
        cfs = []
        for cf in ph.coflows:
            key = (cf.edges, pinned)
            kept = memo.get(key)
            if kept is None:
                kept = memo[key] = _distinct_edges(cl, cf.edges, pinned)
            changed |= len(kept) < len(cf.edges)
            cfs.append(Coflow(kept, cf.coef, cf.channel))
        phases.append(ph.with_coflows(tuple(cfs)))
    return Plan(plan.kind, plan.algorithm, plan.ranks, tuple(phases)) if changed else plan


def _distinct_edges(cl: Cluster, edges_in: tuple[Edge, ...], pinned: frozenset[int]
                    ) -> tuple[Edge, ...]:
    """The edges of one ring coflow that :func:`representative_plan` keeps."""
    gpn = cl.gpn
    by_node: dict[int, list[Edge]] = {}
    for e in edges_in:
        by_node.setdefault(e[0] // gpn, []).append(e)
    kept: list[Edge] = []
    seen: set[tuple] = set()
    for node, edges in by_node.items():
        sig = []
        for s, d, rail in edges:
            nd = d // gpn
            if nd in pinned or node in pinned:
                sig = None
                break
            if nd == node:
                sig.append((s % gpn, d % gpn, -1))
                continue
            k = cl.nic_of(d) if rail < 0 else rail
            ka, kb = cl.nic_pair(node, nd, k)
            if cl.leaf_of(node, ka) != cl.leaf_of(nd, kb):
                sig = None
                break
            sig.append((s % gpn, d % gpn, ka, kb))
        if sig is not None:
            key = tuple(sig)
            if key in seen:
                continue
            seen.add(key)
        kept.extend(edges)
    return tuple(kept)

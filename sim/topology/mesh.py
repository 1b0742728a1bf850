"""A switchless, fully connected GPU mesh inside a node (AMD Infinity Fabric / xGMI): every pair
of GPUs has its own link, so a GPU reaches each peer at one link's rate and all its peers at
once at ``gpus − 1`` links' rate (docs/topology.md, "xGMI mesh").

RCCL sees the same: each xGMI link is an NVLink-class link (``LINK_NVL``) of 48 GB/s on MI300X
(``GFX94X_XGMI_WIDTH``, ROCm/rccl src/graph/topo.h and ncclTopoAddXGMI in src/graph/topo.cc,
commit 0cbce2a7, NCCL 2.21.5 base), against the 64 GB/s per link and direction AMD rates
(AMD ROCm blog "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X",
2025-03-02: ~48 GB/s usable after CRC and protocol overhead).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class XgmiSpec:
    """The node's GPU mesh: one link per GPU pair (``links_per_gpu`` = GPUs − 1), each of
    ``link_bandwidth_GBps`` per direction × ``efficiency``, ``latency_ns`` per hop."""

    links_per_gpu: int
    link_bandwidth_GBps: float
    efficiency: float
    latency_ns: int

    @property
    def link_GBps(self) -> float:
        """Effective bandwidth of one GPU-to-GPU link per direction (GB/s)."""
        return self.link_bandwidth_GBps * self.efficiency


@lru_cache(maxsize=32)
def disjoint_rings(n: int, limit: int = 50_000) -> tuple[tuple[int, ...], ...]:
    """Directed rings over ``0..n−1`` that share no link, as many as a deterministic depth-first
    search finds (at most n − 1: each GPU has n − 1 outgoing links), each starting at 0.

    RCCL's ring search (NCCL's src/graph/search.cc, which RCCL keeps) subtracts each channel's
    bandwidth from the links its ring uses, so further channels take other links: on a full
    mesh the channels' rings end up on disjoint links, here found directly. ``limit`` bounds the
    search steps; the rings found by then are used (K*_n has a decomposition into n − 1 directed
    Hamiltonian cycles for n ≠ 4, 6, Tillson 1980; for 4 and 6 fewer exist)."""
    if n < 2:
        return ()
    if n == 2:
        return ((0, 1),)
    used: set[tuple[int, int]] = set()
    best: list[tuple[int, ...]] = []
    rings: list[tuple[int, ...]] = []
    steps = 0

    def ring(path: list[int]) -> bool:
        nonlocal steps
        steps += 1
        if steps > limit:
            return False
        if len(path) == n:
            if (path[-1], 0) in used:
                return False
            edges = [(path[i], path[(i + 1) % n]) for i in range(n)]
            used.update(edges)
            rings.append(tuple(path))
            if len(rings) > len(best):
                best[:] = list(rings)
            if len(rings) == n - 1 or more():
                return True
            rings.pop()
            used.difference_update(edges)
            return False
        last = path[-1]
        for nxt in range(1, n):
            if nxt not in path and (last, nxt) not in used:
                path.append(nxt)
                if ring(path):
                    return True
                path.pop()
        return False

    def more() -> bool:
        return ring([0])

    more()
    return tuple(best)


@lru_cache(maxsize=64)
def disjoint_paths(n: int, ends: tuple[tuple[int, int], ...], limit: int = 200_000
                   ) -> tuple[tuple[int, ...], ...] | None:
    """Hamiltonian paths over ``0..n−1``, path k from ``ends[k][0]`` to ``ends[k][1]``, that
    share no link (a ring through several nodes enters each at the GPU next to its NIC and
    leaves from the GPU next to the NIC it sends on); ``None`` where the depth-first search
    finds none within ``limit`` steps."""
    used: set[tuple[int, int]] = set()
    paths: list[tuple[int, ...]] = []
    steps = 0

    def extend(k: int, path: list[int]) -> bool:
        nonlocal steps
        steps += 1
        if steps > limit:
            return False
        start, end = ends[k]
        if len(path) == n:
            if path[-1] != end:
                return False
            edges = [(path[i], path[i + 1]) for i in range(n - 1)]
            used.update(edges)
            paths.append(tuple(path))
            if k + 1 == len(ends) or extend(k + 1, [ends[k + 1][0]]):
                return True
            paths.pop()
            used.difference_update(edges)
            return False
        last = path[-1]
        for nxt in range(n):
            if nxt in path or (last, nxt) in used or (nxt == end and len(path) < n - 1):
                continue
            path.append(nxt)
            if extend(k, path):
                return True
            path.pop()
        return False

    if not ends or any(a == b for a, b in ends):
        return None
    return tuple(paths) if extend(0, [ends[0][0]]) else None

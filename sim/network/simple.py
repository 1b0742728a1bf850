"""Closed-form α–β network models with no contention (tests, quick estimates).

:class:`AlphaBetaNetwork` uses the textbook ring formulas of docs/collectives.md with
one latency ``alpha_ns`` per step and one bandwidth per group kind (GB/s = 1e9 bytes/s):

- AllReduce: ``2(n−1)·α + 2(n−1)/n · S/B``
- AllGather / ReduceScatter: ``(n−1)·α + (n−1)/n · S/B``
- AllToAll: ``(n−1)·α + (n−1)/n · S/B``
- Broadcast: ``(n−1)·α + S/B``
- Send/recv: ``α + S/B``

Durations are rounded up to whole nanoseconds. A group of one rank costs nothing.
"""

from __future__ import annotations

import math

from sim.comm import CollKind, GroupKind
from sim.network.base import CommRequest, CommResult, Network


def ring_time_s(kind: CollKind, n: int, size_bytes: int, alpha_s: float, bw_Bps: float) -> float:
    """Textbook ring/pipelined cost in seconds (``bw_Bps`` in bytes per second)."""
    if size_bytes <= 0:
        return 0.0
    if kind is CollKind.SENDRECV:
        return alpha_s + size_bytes / bw_Bps
    if n <= 1:
        return 0.0
    if kind is CollKind.ALLREDUCE:
        return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * size_bytes / bw_Bps
    if kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL):
        return (n - 1) * alpha_s + (n - 1) / n * size_bytes / bw_Bps
    if kind is CollKind.BROADCAST:
        return (n - 1) * alpha_s + size_bytes / bw_Bps
    raise ValueError(kind)


class FreeNetwork(Network):
    """Every communication takes zero time (for checking schedules against closed forms)."""

    def isolated(self, req: CommRequest) -> CommResult:  # noqa: ARG002 (free whatever it is)
        return CommResult(0, "free", math.inf)

    def describe(self) -> list[str]:
        return ["network: free (every communication takes 0 s)"]


class AlphaBetaNetwork(Network):
    """Ring α–β costs with a fixed bandwidth per group kind; no contention."""

    def __init__(self, alpha_ns: float, bandwidth_GBps: dict[GroupKind, float]):
        self.alpha_ns = alpha_ns
        self.bandwidth_GBps = dict(bandwidth_GBps)

    def isolated(self, req: CommRequest) -> CommResult:
        bw_GBps = self.bandwidth_GBps[req.group]
        n = len(req.ranks)
        t_s = ring_time_s(req.kind, n, req.size_bytes, self.alpha_ns * 1e-9, bw_GBps * 1e9)
        t_ns = math.ceil(t_s * 1e9 - 1e-6) if t_s > 0 else 0
        algbw = req.size_bytes / t_s / 1e9 if t_s > 0 else math.inf
        return CommResult(t_ns, "ring", algbw)

    def describe(self) -> list[str]:
        bws = ", ".join(f"{g.value} {b:g} GB/s" for g, b in self.bandwidth_GBps.items())
        return [f"network: α–β ring model, α = {self.alpha_ns:g} ns per step, {bws}; no contention"]

"""The interface between the engine and a network model.

The engine hands the network a :class:`CommRequest` when every simulated member of a group has
reached a communication; the network returns a SimPy event that succeeds (with a
:class:`CommResult`) when the transfer is complete. Times are integer nanoseconds.

Symmetric mode: the engine simulates one representative rank per pipeline stage; the network is
told so in :meth:`Network.bind` and must account for the identical copies of each request that
run at the same time on the other (unsimulated) ranks, e.g. the other TP ranks' DP rings that
share a node's NICs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import simpy

from sim.comm import CollKind, GroupKind
from sim.network import nccl
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses


@dataclass(frozen=True, slots=True)
class CommRequest:
    """One communication of one group instance.

    ``ranks``: all members of the group in group order (for ``SENDRECV``: ``(src, dst)``).
    ``size_bytes``: nccl-tests convention — the full buffer for AllReduce/Broadcast/AllToAll,
    the full *output* of AllGather and the full *input* of ReduceScatter; the message for a send.
    """

    kind: CollKind
    group: GroupKind
    ranks: tuple[int, ...]
    size_bytes: int


@dataclass(frozen=True, slots=True)
class CommResult:
    """How a communication went: its algorithm and the bandwidth it achieved."""

    duration_ns: int
    algorithm: str = ""
    algbw_GBps: float = 0.0


class Network(ABC):
    """Abstract network model."""

    env: simpy.Environment | None = None

    traffic: dict[GroupKind, frozenset[CollKind]] | None = None
    classes: RankClasses | None = None
    symmetric: bool = False
    perturbed: bool = False  # degraded or failed hardware: the cluster is not uniform

    def bind(self, env: simpy.Environment, placement: Placement, classes: RankClasses | bool,
             traffic: dict[GroupKind, frozenset[CollKind]] | None = None) -> None:
        """Attach to a simulation. Called once by the engine before it runs.

        ``classes``: which ranks the engine simulates, each standing for its class; the network
        accounts for the unsimulated members' identical traffic. ``traffic``: the communication
        kinds the program issues in each group kind (``PP``: ``SENDRECV`` when stages exchange
        activations); ``None`` = unknown (assume any). A bool stands for the symmetric (True)
        or per-rank (False) classes.
        """
        if isinstance(classes, bool):
            classes = (RankClasses.symmetric if classes else RankClasses.per_rank)(placement)
        self.env = env
        self.placement = placement
        self.classes = classes
        self.symmetric = classes.reduced
        self.traffic = traffic

    @abstractmethod
    def isolated(self, req: CommRequest) -> CommResult:
        """Cost of ``req`` when nothing else uses the network (ns, algorithm, bandwidth)."""

    def fusable(self, group: GroupKind) -> bool:  # noqa: ARG002 (no contention: every group)
        """True if blocking comms of ``group`` never share links with other traffic.

        The engine may then pre-compute their cost with :meth:`isolated` and merge them with the
        surrounding compute into a single timeout (event economy).
        """
        return True

    def start(self, req: CommRequest) -> simpy.Event:
        """Start ``req`` now; the returned event succeeds with a :class:`CommResult` when done.

        The default: no contention, the isolated cost.
        """
        assert self.env is not None, "bind() first"
        res = self.isolated(req)
        return self.env.timeout(res.duration_ns, value=res)

    def kernel_channels(self, req: CommRequest, max_channels: int) -> int:
        """CTAs of the NCCL kernel running ``req`` with at most ``max_channels`` channels
        (:func:`sim.network.nccl.kernel_channels`). The default: a ring with the Simple
        protocol (a model that does not choose NCCL's algorithm and protocol)."""
        return nccl.kernel_channels(req.size_bytes, max_channels, "ring", "Simple",
                                    len(req.ranks))

    def describe(self) -> list[str]:
        """Assumptions of this model, for the report."""
        return []

    def counters(self) -> dict[tuple, int]:
        """Every count of this run that :meth:`describe`'s lines are made of, by a key
        (:mod:`sim.engine.periodic` extrapolates them); none by default."""
        return {}

    def set_counters(self, values: dict[tuple, int]) -> None:
        """Replace the counts of :meth:`counters` (same keys) before :meth:`describe`."""
        if values:
            raise ValueError(f"{type(self).__name__} keeps no counters")


def nccl_busbw_factor(kind: CollKind, n: int) -> float:
    """nccl-tests' busbw/algbw factor for ``kind`` over ``n`` ranks."""
    if n <= 1:
        return 1.0
    if kind is CollKind.ALLREDUCE:
        return 2.0 * (n - 1) / n
    if kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL):
        return (n - 1) / n
    return 1.0

"""What the engine's parts share: the records of a run and the group lookup.

:class:`Ledger` holds, per simulated rank, the time accounting (:class:`RankStats`), the waits
that another rank or the network ended (:class:`~sim.engine.critical.Wait`, for the critical
path), what the rank is waiting on right now (for stall messages) and, when asked for, every
interval (:class:`Span`). :class:`Groups` answers which ranks form a rank's group and how many
of them are simulated. Times are integer nanoseconds.
"""

from __future__ import annotations

from sim.comm import GroupKind
from sim.engine.critical import Wait
from sim.engine.result import RankStats, Span
from sim.parallel.placement import Placement


class Ledger:
    """Per-rank records of one run (see module docstring)."""

    def __init__(self, stats: dict[int, RankStats], record_spans: bool):
        self.stats = stats
        self.deps: dict[int, list[Wait]] = {r: [] for r in stats}
        self.waiting: dict[int, str] = {}
        self.spans: list[Span] | None = [] if record_spans else None
        self.shared: dict = {}  # span labels and argument tuples, each stored once

    def span(self, rank: int, stream: str, t0: int, t1: int, kind: str, label: str,
             mb: int = -1, chunk: int = -1, args: tuple = ()) -> None:
        """Record a :class:`Span` (its fields in order) if spans are recorded. Equal labels and
        argument tuples are stored once: a trace of every rank of a 1024-GPU run holds millions
        of spans (docs/visualisation.md)."""
        if self.spans is not None:
            label = self.shared.setdefault(label, label)
            args = self.shared.setdefault(args, args)
            self.spans.append(Span(rank, stream, t0, t1, kind, label, mb, chunk, args))

    def wait(self, rank: int, start_ns: int, end_ns: int, group: str, cause_rank: int,
             cause_ns: int) -> None:
        """``rank`` waited from ``start_ns`` to ``end_ns`` until ``cause_rank`` let it go on
        (it arrived or sent at ``cause_ns``)."""
        self.deps[rank].append(Wait(start_ns, end_ns, group, cause_rank, cause_ns))


class Groups:
    """Members of each rank's groups (cached) and how many of them are simulated."""

    def __init__(self, placement: Placement, simulated: frozenset[int]):
        self.placement = placement
        self.simulated = simulated
        self._groups: dict[int, dict[GroupKind, tuple[int, ...]]] = {}  # rank -> kind ->
        self._sim_count: dict[tuple[int, ...], int] = {}

    def of(self, kind: GroupKind, rank: int) -> tuple[int, ...]:
        """Members of ``rank``'s group of ``kind``, in group order."""
        mine = self._groups.get(rank)
        if mine is None:
            mine = self._groups[rank] = {}
        g = mine.get(kind)
        if g is None:
            g = mine[kind] = self.placement.group(kind, rank)
        return g

    def sim_count(self, members: tuple[int, ...]) -> int:
        """How many members of a group are simulated (they all must reach its collectives)."""
        need = self._sim_count.get(members)
        if need is None:
            need = self._sim_count[members] = sum(1 for r in members if r in self.simulated)
        return need

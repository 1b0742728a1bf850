"""Classes of ranks that behave identically, and the one rank simulated for each.

Symmetric simulation rests on this: in a uniform cluster every DP replica and every TP rank of a
pipeline stage runs the same task stream from an equivalent network position, so one
representative per stage is enough (the network counts the copies' traffic). When some ranks
differ (a slow GPU, a failed NIC), their tensor-parallel and data-parallel indices are split off
into classes of their own, and only those classes get extra representatives: per-rank
simulation exactly where the cluster is not uniform.

A class is ``(stage, T(tp), D(dp))`` for a partition ``T`` of the tensor-parallel indices and a
partition ``D`` of the data-parallel indices, the same for every stage (so a pipeline transfer
between two representatives' stages links two representatives). Its representative is the rank
with the smallest tp and dp index in it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property

from sim.parallel.placement import Placement


def _parts(n: int, isolate: Iterable[int] | None, singletons: bool) -> list[tuple[int, ...]]:
    if singletons:
        return [(i,) for i in range(n)]
    iso = sorted({i for i in (isolate or ()) if 0 <= i < n})
    rest = tuple(i for i in range(n) if i not in iso)
    return ([rest] if rest else []) + [(i,) for i in iso]


class RankClasses:
    """A partition of the ranks of ``placement`` into classes (see the module docstring)."""

    def __init__(self, placement: Placement, tp_parts: list[tuple[int, ...]],
                 dp_parts: list[tuple[int, ...]], label: str = "hybrid"):
        self.placement = placement
        self.label = label  # how it was asked for: symmetric, per-rank or hybrid
        self.tp_parts = sorted(tp_parts, key=min)
        self.dp_parts = sorted(dp_parts, key=min)
        self._t_of = [0] * placement.tp
        for i, part in enumerate(self.tp_parts):
            for t in part:
                self._t_of[t] = i
        self._d_of = [0] * placement.dp
        for j, part in enumerate(self.dp_parts):
            for d in part:
                self._d_of[d] = j

    @classmethod
    def symmetric(cls, placement: Placement) -> RankClasses:
        """One class per pipeline stage."""
        return cls(placement, _parts(placement.tp, None, False), _parts(placement.dp, None, False),
                   "symmetric")

    @classmethod
    def per_rank(cls, placement: Placement) -> RankClasses:
        """Every rank its own class."""
        return cls(placement, _parts(placement.tp, None, True), _parts(placement.dp, None, True),
                   "per-rank")

    @classmethod
    def isolating(cls, placement: Placement, tp: Iterable[int], dp: Iterable[int]
                  ) -> RankClasses:
        """Symmetric, except that the given tp and dp indices get classes of their own."""
        return cls(placement, _parts(placement.tp, tp, False), _parts(placement.dp, dp, False))

    @property
    def is_per_rank(self) -> bool:
        return len(self.tp_parts) == self.placement.tp and len(self.dp_parts) == self.placement.dp

    @property
    def reduced(self) -> bool:
        """True if some simulated rank stands for other ranks too."""
        return not self.is_per_rank

    @cached_property
    def reps(self) -> tuple[int, ...]:
        """The simulated ranks, sorted."""
        pl = self.placement
        return tuple(sorted(pl.rank(tp[0], dp[0], s) for s in range(pl.pp)
                            for tp in self.tp_parts for dp in self.dp_parts))

    def size_of(self, rank: int) -> int:
        """How many ranks ``rank``'s class holds."""
        c = self.placement.coord(rank)
        return len(self.tp_parts[self._t_of[c.tp]]) * len(self.dp_parts[self._d_of[c.dp]])

    def class_of(self, rank: int) -> int:
        """Class id of ``rank`` (:attr:`class_array`'s entry, without numpy)."""
        c = self.placement.coord(rank)
        return (c.pp * len(self.tp_parts) + self._t_of[c.tp]) * len(self.dp_parts) + \
            self._d_of[c.dp]

    @cached_property
    def class_array(self):
        """Class id of every rank (numpy int64 array indexed by rank)."""
        import numpy as np

        pl = self.placement
        r = np.arange(pl.world_size)
        t = (r // pl.stride("tp")) % pl.tp
        d = (r // pl.stride("dp")) % pl.dp
        p = (r // pl.stride("pp")) % pl.pp
        t_of = np.asarray(self._t_of)[t]
        d_of = np.asarray(self._d_of)[d]
        return (p * len(self.tp_parts) + t_of) * len(self.dp_parts) + d_of

    def describe(self) -> str:
        pl = self.placement
        n = len(self.reps)
        if self.label == "per-rank":
            return f"per-rank: all {pl.world_size} ranks simulated"
        if self.label == "symmetric" or (len(self.tp_parts) == len(self.dp_parts) == 1):
            return f"symmetric: one representative rank per stage ({n} of {pl.world_size} ranks)"
        if self.label == "straddle":
            return (f"straddle: {n} of {pl.world_size} ranks simulated — one representative per "
                    f"stage and per run of data-parallel indices {[p[0] for p in self.dp_parts]}"
                    "… lying in one node")
        iso_t = [p[0] for p in self.tp_parts if len(p) == 1 and pl.tp > 1]
        iso_d = [p[0] for p in self.dp_parts if len(p) == 1 and pl.dp > 1]
        return (f"hybrid: {n} of {pl.world_size} ranks simulated — per-rank for tensor-parallel "
                f"indices {iso_t or 'none'} and data-parallel indices {iso_d or 'none'} (the "
                "non-uniform part of the cluster), one representative for the rest of each stage")

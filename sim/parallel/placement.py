"""Placement of parallel ranks on GPUs and the process groups that follow from it.

A rank's coordinates are ``(tp, dp, pp)``. The placement order string lists the dimensions from
fastest- to slowest-varying (Megatron's default is ``tp-dp-pp``: tensor-parallel peers are
adjacent GPUs, then data-parallel replicas, then pipeline stages). The global rank is the linear
index in that order, and rank ``r`` runs on GPU ``r`` (node ``r // gpus_per_node``; with
``--nproc-per-node K``, on node ``r // K``, its GPU ``r mod K``: sim/topology/nproc.py).

Expert groups follow Megatron-Core's expert rank generator (megatron/core/parallel_state.py,
``initialize_model_parallel``: ``RankGenerator(tp=expert_tensor_parallel_size,
ep=expert_model_parallel_size, dp=expert_data_parallel_size, pp, order)`` with the dense order
``tp-cp-ep-dp-pp``). The ``tp × dp`` ranks of one pipeline stage (``dp`` here is DP×CP),
numbered ``i = tp + TP·dp`` as Megatron numbers them (tensor-parallel rank fastest), are
re-divided as ``i = etp + ETP·ep + ETP·EP·edp``: the expert tensor-parallel group (ETP: one
expert's weight shards) varies ``etp``, the EP group (dispatch/combine all-to-alls) varies
``ep``, and the expert data-parallel group (``DP_EP``: expert gradient reduction, ``EDP =
TP·DP·CP / (ETP·EP)`` ranks) varies ``edp``. With ``etp = tp`` (Megatron's default) this is
the EP group of ``ep`` consecutive DP indices and the DP_EP group of the DP indices congruent
modulo ``ep``; with ``etp < tp`` the EP group spans tensor-parallel ranks.

Context parallelism (``cp``) also lives in the data-parallel dimension, as in Megatron-Core's
``tp-cp-ep-dp-pp`` order: ``dp`` here counts the DP×CP ranks that reduce gradients together,
and the CP group of a rank is the block of ``cp`` consecutive DP indices holding it. In an
order string ``cp`` may be named, directly before ``dp`` (``tp-cp-dp-pp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from sim.comm import GroupKind
from sim.errors import UsageError

DIMS = ("tp", "dp", "pp")
#: the groups of Megatron-Core's expert rank generator (ETP × EP × EDP within a stage)
EXPERT_KINDS = (GroupKind.ETP, GroupKind.EP, GroupKind.DP_EP)
DEFAULT_ORDER = "tp-dp-pp"


@dataclass(frozen=True, slots=True)
class Coord:
    tp: int
    dp: int
    pp: int


def parse_order(order: str) -> tuple[str, str, str]:
    """Parse ``"tp-dp-pp"``-style order strings (fastest dimension first); ``cp`` may appear
    directly before ``dp`` (the CP ranks are the fastest part of the DP×CP dimension)."""
    parts = tuple(p.strip().lower() for p in order.replace(",", "-").split("-") if p.strip())
    if "cp" in parts:
        i = parts.index("cp")
        if parts.count("cp") != 1 or i + 1 >= len(parts) or parts[i + 1] != "dp":
            raise UsageError(f"placement order {order!r}: cp must come directly before dp "
                             "(Megatron-Core's tp-cp-dp-pp)", field="placement")
        parts = parts[:i] + parts[i + 1:]
    if sorted(parts) != sorted(DIMS):
        raise UsageError(
            f"placement order {order!r} must list each of tp, dp, pp once (e.g. 'tp-dp-pp')",
            field="placement",
        )
    return parts  # type: ignore[return-value]


class Placement:
    """Ranks ↔ coordinates and process groups for a ``tp × dp × pp`` layout."""

    def __init__(self, tp: int, dp: int, pp: int, ep: int = 1, order: str = DEFAULT_ORDER,
                 cp: int = 1, etp: int | None = None):
        etp = tp if etp is None else etp
        for name, value in (("tp", tp), ("dp", dp), ("pp", pp), ("ep", ep), ("cp", cp),
                            ("etp", etp)):
            if value < 1:
                raise UsageError(f"{name} must be ≥ 1, got {value}", field=name)
        if etp == tp and dp % ep:
            raise UsageError(
                f"expert-parallel size {ep} must divide the data-parallel size {dp}", field="ep"
            )
        if (tp * dp) % (etp * ep):
            raise UsageError(f"expert TP × EP = {etp}·{ep} must divide the {tp * dp} ranks of "
                             f"a pipeline stage (TP·DP·CP)",
                             field="expert_tensor_parallel_size")
        self.etp = etp
        if dp % cp:
            raise UsageError(f"context-parallel size {cp} must divide the DP×CP size {dp}",
                             field="cp")
        self.tp, self.dp, self.pp, self.ep, self.cp = tp, dp, pp, ep, cp
        self.order = parse_order(order)
        if etp != tp and pp > 1 and self.order[-1] != "pp" and etp * ep != tp * cp:
            # Megatron-Core's initialize_model_parallel asserts the same
            raise UsageError(f"with the placement order {self.order_string} (pipeline not "
                             f"slowest) Megatron-Core needs the expert data-parallel size to "
                             f"equal DP, i.e. ETP·EP = TP·CP ({etp}·{ep} ≠ {tp}·{cp})",
                             field="expert_tensor_parallel_size")
        self.world_size = tp * dp * pp
        sizes = {"tp": tp, "dp": dp, "pp": pp}
        stride = 1
        self._stride: dict[str, int] = {}
        for dim in self.order:
            self._stride[dim] = stride
            stride *= sizes[dim]

    def stride(self, dim: str) -> int:
        """Distance in global rank between neighbours along ``dim`` (``tp``, ``dp`` or ``pp``)."""
        return self._stride[dim]

    @property
    def order_string(self) -> str:
        return "-".join(self.order)

    def rank(self, tp: int, dp: int, pp: int) -> int:
        s = self._stride
        return tp * s["tp"] + dp * s["dp"] + pp * s["pp"]

    def coord(self, rank: int) -> Coord:
        s = self._stride
        return Coord(
            tp=(rank // s["tp"]) % self.tp,
            dp=(rank // s["dp"]) % self.dp,
            pp=(rank // s["pp"]) % self.pp,
        )

    def group(self, kind: GroupKind, rank: int) -> tuple[int, ...]:
        """Members (global ranks) of ``rank``'s group of ``kind``, in group-rank order.

        For ``PP`` this is the pipeline of ``rank`` (stage 0 first); for ``EMB`` the first and
        the last stage of that pipeline (only ranks of those stages are in one).
        """
        c = self.coord(rank)
        s = self._stride
        # ranks are linear in the coordinates: each group is an arithmetic progression
        if kind is GroupKind.TP:
            return _progression(self.rank(0, c.dp, c.pp), s["tp"], self.tp)
        if kind is GroupKind.DP:
            return _progression(self.rank(c.tp, 0, c.pp), s["dp"], self.dp)
        if kind is GroupKind.PP:
            return _progression(self.rank(c.tp, c.dp, 0), s["pp"], self.pp)
        if kind in EXPERT_KINDS and self.etp != self.tp:
            return self._expert_group(kind, c)
        if kind is GroupKind.EP:
            base = (c.dp // self.ep) * self.ep
            return _progression(self.rank(c.tp, base, c.pp), s["dp"], self.ep)
        if kind is GroupKind.ETP:  # ETP = TP: the tensor-parallel group
            return self.group(GroupKind.TP, rank)
        if kind is GroupKind.CP:
            base = (c.dp // self.cp) * self.cp
            return _progression(self.rank(c.tp, base, c.pp), s["dp"], self.cp)
        if kind is GroupKind.EMB:
            if self.pp == 1:
                return (rank,)
            if c.pp not in (0, self.pp - 1):
                raise ValueError(f"rank {rank} (stage {c.pp}) is not in the embedding group")
            return (self.rank(c.tp, c.dp, 0), self.rank(c.tp, c.dp, self.pp - 1))
        if kind is GroupKind.DP_EP:
            return _progression(self.rank(c.tp, c.dp % self.ep, c.pp), s["dp"] * self.ep,
                                self.dp // self.ep)
        raise ValueError(kind)

    @property
    def edp(self) -> int:
        """Expert data-parallel size: ``TP·DP·CP / (ETP·EP)`` ranks reduce expert gradients."""
        return self.tp * self.dp // (self.etp * self.ep)

    def expert_coord(self, rank: int) -> tuple[int, int, int]:
        """``(etp, ep, edp)``: the rank's place in Megatron-Core's expert grid of its stage."""
        c = self.coord(rank)
        i = c.tp + self.tp * c.dp
        return i % self.etp, (i // self.etp) % self.ep, i // (self.etp * self.ep)

    def expert_rank(self, etp: int, ep: int, edp: int, pp: int) -> int:
        """The global rank at expert coordinates ``(etp, ep, edp)`` of stage ``pp``."""
        i = etp + self.etp * (ep + self.ep * edp)
        return self.rank(i % self.tp, i // self.tp, pp)

    def _expert_group(self, kind: GroupKind, c: Coord) -> tuple[int, ...]:
        """ETP, EP or DP_EP group of the rank at ``c`` in the expert grid (ETP ≠ TP)."""
        et, e, d = self.expert_coord(self.rank(c.tp, c.dp, c.pp))
        if kind is GroupKind.ETP:
            return tuple(self.expert_rank(j, e, d, c.pp) for j in range(self.etp))
        if kind is GroupKind.EP:
            return tuple(self.expert_rank(et, j, d, c.pp) for j in range(self.ep))
        return tuple(self.expert_rank(et, e, j, c.pp) for j in range(self.edp))

    def groups(self, kind: GroupKind) -> list[tuple[int, ...]]:
        """Every group of ``kind``, each once, ordered by its first member."""
        seen: dict[int, tuple[int, ...]] = {}
        for r in range(self.world_size):
            if kind is GroupKind.EMB and 0 < self.coord(r).pp < self.pp - 1:
                continue  # middle stages are in no embedding group
            g = self.group(kind, r)
            seen.setdefault(g[0], g)
        return [seen[k] for k in sorted(seen)]

    @cached_property
    def stage_representatives(self) -> tuple[int, ...]:
        """Rank ``(tp=0, dp=0, pp=s)`` of each stage ``s`` (simulated in symmetric mode)."""
        return tuple(self.rank(0, 0, s) for s in range(self.pp))


def _progression(start: int, step: int, count: int) -> tuple[int, ...]:
    return tuple(range(start, start + step * count, step))

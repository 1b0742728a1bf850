"""The loads of symmetric copies: how many edges of a request and of its unsimulated identical
copies cross each link the representative's coflows use.

In symmetric simulation (:mod:`sim.network.symmetry`) each request stands for its copies on the
other ranks of its class. :class:`CopyLoads` routes the copies once per (plan, group) and adds
their edges to the representative's coflows as integer multiplicities on the representative's
own links (8 copies through one NIC load it 8×); copies elsewhere load equivalent links that are
not tracked. In per-rank simulation a request loads only its own links.

Send/recv copies with no endpoint near the representative are counted in bulk with vectorised
routing (:meth:`~sim.topology.cluster.Cluster.count_fabric_links`).
"""

from __future__ import annotations

from sim.comm import CollKind, GroupKind
from sim.network.plans import Plan
from sim.network.symmetry import copies, link_scopes, local_copies
from sim.network.tuner import PhaseLoads, Tuner
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses

# (src, dst, rail) edges and channel of each coflow of each phase of one copy
CopyEdges = tuple[tuple[tuple[tuple[tuple[int, int, int], ...], int], ...], ...]


class CopyLoads:
    """Per (plan, group kind): the phases' coflow loads including every symmetric copy, and the
    phases' latencies (ns per protocol). Bound to one placement and rank classes at a time."""

    def __init__(self, tuner: Tuner):
        self.tuner = tuner
        self.cluster = tuner.cluster
        self.placement: Placement | None = None
        self.classes: RankClasses | None = None
        self._cache: dict[tuple, tuple[PhaseLoads, tuple]] = {}

    def bind(self, placement: Placement, classes: RankClasses, cache: dict) -> None:
        """Use ``placement`` and ``classes``; ``cache`` holds results for this layout (kept by
        the caller across runs with the same layout)."""
        self.placement, self.classes, self._cache = placement, classes, cache

    @property
    def symmetric(self) -> bool:
        return self.classes is not None and self.classes.reduced

    def flows(self, plan: Plan, kind: CollKind, group: GroupKind, ranks: tuple[int, ...]
              ) -> tuple[PhaseLoads, tuple]:
        """(loads, latencies) per phase: like :meth:`Tuner.single_flows`, with the loads of
        every symmetric copy on the representative's links (symmetric mode). Latencies are the
        representative's own (its copies are assumed to be its images; where a copy's path is
        longer, e.g. it crosses a leaf boundary the representative does not, only per-rank
        simulation sees the difference). All-to-alls costed by classes: the classes of the
        request's transfers and, in symmetric mode, those of all its copies."""
        if plan.by_class:  # an alltoall.ClassPlan
            others = copies(self.placement, kind, group, ranks)[1:] if self.symmetric else []
            return plan.flows(tuple(others), self.tuner.pinned)
        akey = (id(plan), group)
        got = self._cache.get(akey)
        if got is not None:
            return got
        single = self.tuner.single_flows(plan)
        lats = tuple(ph.latency_ns for ph in plan.phases)
        groups = [ranks]
        scope_nodes: dict = {}
        if self.symmetric:
            tracked_all = {link for ph in single for path, _, _, _ in ph for link in path}
            scopes = link_scopes(self.cluster, tracked_all)
            scope_nodes = scopes[0]
            groups = local_copies(self.placement, kind, group, ranks, self.cluster, scopes,
                                  self.classes)
        if len(groups) == 1:
            got = self._cache[akey] = (single, lats)
            return got
        extra: dict[int, int] = {}  # loads of copies counted in bulk (send/recv away from scope)
        if kind is CollKind.SENDRECV:  # a copy is one edge: no plan to build
            copy_edges, extra = self._pair_copies(groups[1:], scope_nodes, single[0][0][0])
        else:
            copy_edges = []
            for g in groups[1:]:
                cp = self.tuner.plan(kind, plan.algorithm, g)
                assert cp is not None
                copy_edges.append(tuple(tuple((cf.edges, cf.channel) for cf in cph.coflows)
                                        for cph in cp.phases))
        phases = tuple(self._phase_loads(ph, [cp[p_idx] for cp in copy_edges], extra,
                                         scope_nodes)
                       for p_idx, ph in enumerate(single))
        got = self._cache[akey] = (phases, lats)
        return got

    def _pair_copies(self, pairs: list[tuple[int, ...]], scope_nodes: dict,
                     path: tuple[int, ...]) -> tuple[list[CopyEdges], dict[int, int]]:
        """Send/recv copies: (edges of those near the scope nodes, bulk link counts of those
        away from it)."""
        gpn = self.cluster.gpn
        near, away = [], []
        for g in pairs:
            (near if g[0] // gpn in scope_nodes or g[1] // gpn in scope_nodes
             else away).append(g)
        counted = self._count_away(away, path) if away else {}
        if counted is None:
            near, counted = pairs, {}
        return [(((((g[0], g[1], -1),), 0),),) for g in near], counted

    def _phase_loads(self, ph: tuple, copies: list[tuple], extra: dict[int, int],
                     scope_nodes: dict) -> tuple:
        """One phase's coflows with the edges of ``copies`` (that phase of each copy) and the
        bulk counts ``extra`` (on the first coflow) added to the tracked links' loads."""
        cl = self.cluster
        ids, gpn = cl.ids, cl.gpn
        tracked = {link for path, _, _, _ in ph for link in path}
        loads = [dict(lds) for _, lds, _, _ in ph]
        for link, n in extra.items():
            if n:
                loads[0][link] = loads[0].get(link, 0) + n
        for cph in copies:
            assert len(cph) == len(ph), "copies must have the same plan shape"
            for i, (edges, channel) in enumerate(cph):
                li = loads[i]
                for s, d, rail in edges:
                    # away from the scope nodes only fabric links can be tracked ones
                    away = s // gpn not in scope_nodes and d // gpn not in scope_nodes
                    route = cl.fabric_names(s, d, rail, channel) if away else \
                        cl.path_names(s, d, rail, channel)
                    for name in route:
                        link = ids.get(name)
                        if link in tracked:
                            li[link] = li.get(link, 0) + 1
        return tuple((path, tuple(ld.items()), coef, cap)
                     for (path, _, coef, cap), ld in zip(ph, loads, strict=True))

    def _count_away(self, pairs: list[tuple[int, ...]], path: tuple[int, ...]
                    ) -> dict[int, int] | None:
        """Send/recv copies with no endpoint near the representative: how many cross each
        fabric link of its ``path`` (bulk routing; None if not available)."""
        cl = self.cluster
        wanted = {cl.names[i]: i for i in path if cl.names[i][0][0] in ("sw", "up", "down")}
        if not wanted:
            return {}
        return cl.count_fabric_links([g[0] for g in pairs], [g[1] for g in pairs], 0, wanted)

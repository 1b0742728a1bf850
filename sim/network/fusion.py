"""Which process groups' blocking collectives can be costed in isolation (event economy).

A group kind is *fusable* when, under the placement, no link used by one of its groups is ever
used by any other traffic: not by another group of the same kind (e.g. the other DP replicas'
TP groups) and not by any group of another kind (DP, EP, DP_EP rings, trees, hierarchical
phases, all-to-all) or by pipeline sends between neighbouring stages (both directions, and last
→ first for interleaved schedules). Every algorithm the model could choose is included, so the
answer holds whatever sizes and choices occur. Typical case: TP = 8 inside an NVSwitch node
while DP and PP leave through each GPU's own NIC. Assumes a group has at most one blocking
collective in flight (its rank waits for it).

Cost: one pass over the edges of every group's candidate algorithms. When every group of the
kind lies inside one node only intra-node links can be shared, so the other kinds' routes are
reduced to their intra-node segments (no fabric routing).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sim.comm import CollKind, GroupKind
from sim.network.plans import ALGORITHMS_FOR, AUTO_ALGORITHMS, Plan
from sim.network.tuner import Tuner
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses
from sim.topology.cluster import Cluster


@dataclass(frozen=True)
class FusionQuery:
    """What the fusability checks read: the plans and configured algorithms (``tuner``), the
    placement, which ranks are simulated (``classes``) and the traffic the program issues
    (group kind → collective kinds; ``None``: unknown, assume any)."""

    tuner: Tuner
    placement: Placement
    classes: RankClasses
    traffic: dict[GroupKind, frozenset[CollKind]] | None

    @property
    def cluster(self) -> Cluster:
        return self.tuner.cluster

    @property
    def algorithm(self) -> dict[CollKind, str]:
        return self.tuner.algorithm

    @property
    def symmetric(self) -> bool:
        return self.classes.reduced

    def plan(self, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
        return self.tuner.plan(kind, algorithm, ranks)


_COLLECTIVE_KINDS = (GroupKind.TP, GroupKind.DP, GroupKind.EP, GroupKind.DP_EP, GroupKind.CP,
                     GroupKind.ETP)


def _collective_kinds(pl) -> tuple[GroupKind, ...]:
    """The group kinds with collectives; ETP only when it differs from TP (else its groups
    are the TP groups)."""
    if pl.etp != pl.tp:
        return _COLLECTIVE_KINDS
    return _COLLECTIVE_KINDS[:-1]
_RING_FAMILY = ("ring", "tree", "hierarchical", "nvls", "nvlstree")
_A2A = (CollKind.ALLTOALL, "direct")


def _edges(net: FusionQuery, ranks: tuple[int, ...], a2a: bool,
           rings: frozenset[str] | bool = True) -> Iterator[tuple[int, int, int, int]]:
    """(src, dst, rail, channel) of every edge a candidate algorithm could use (``rings``: the
    ring / tree / hierarchical plans that may run — all-reduce plans, whose edges include those
    of the all-gather / reduce-scatter / broadcast plans of the same algorithm; ``a2a``:
    all-to-all)."""
    algos = _RING_FAMILY if rings is True else (rings or ())
    ops = [(CollKind.ALLREDUCE, a) for a in _RING_FAMILY if a in algos]
    for coll, algo in ops + ([_A2A] if a2a else []):
        plan = net.plan(coll, algo, ranks)
        if plan is None:
            continue
        for phase in plan.phases:
            for cf in phase.coflows:
                for s, d, rail in cf.edges:
                    yield s, d, rail, cf.channel


def _groups(pl, kind: GroupKind) -> list[tuple[int, ...]]:
    """Every group of ``kind`` with more than one member (one ``group()`` call per group)."""
    covered: set[int] = set()
    out = []
    for r in range(pl.world_size):
        if r not in covered:
            g = tuple(pl.group(kind, r))
            covered.update(g)
            if len(g) > 1:
                out.append(g)
    return out


def _uses(net: FusionQuery, kind: GroupKind) -> tuple[frozenset[str], bool]:
    """(ring-family algorithms that may run, all-to-all traffic?) of ``kind`` in this program:
    ``auto`` picks among NCCL's algorithms (tree only for all-reduce); a configured algorithm
    is used where it applies."""
    traffic = net.traffic
    if traffic is None:
        ks = frozenset(CollKind) if kind in (GroupKind.EP, GroupKind.DP_EP) else frozenset(
            CollKind) - {CollKind.ALLTOALL}
    else:
        ks = traffic.get(kind, frozenset())
    algos: set[str] = set()
    for coll in ks - {CollKind.ALLTOALL, CollKind.SENDRECV}:
        fixed = net.algorithm[coll]
        if fixed in ALGORITHMS_FOR[coll]:
            algos.add(fixed)
        else:
            algos.update(a for a in ALGORITHMS_FOR[coll] if a in AUTO_ALGORITHMS)
    return frozenset(algos & set(_RING_FAMILY)), CollKind.ALLTOALL in ks


def is_fusable(net: FusionQuery, group: GroupKind) -> bool:
    """True if blocking collectives of ``group`` never share a link with other traffic."""
    if group in (GroupKind.PP, GroupKind.EMB):
        return False
    if net.symmetric:
        got = _local_symmetric_check(net, group)
        if got is not None:
            return got
    return _global_check(net, group)


def _global_check(net: FusionQuery, group: GroupKind) -> bool:
    """Every group of every kind in the program and every pipeline pair: O(GPUs)."""
    pl = net.placement
    cl = net.cluster
    kinds = [k for k in _collective_kinds(pl) if k is group or any(_uses(net, k))]
    groups = {k: _groups(pl, k) for k in kinds}
    mine = groups[group]
    if not mine:
        return True
    local = all(len({r // cl.gpn for r in g}) == 1 for g in mine)

    def keys(s: int, d: int, rail: int, ch: int):
        return cl.local_keys(s, d, rail) if local else cl.path(s, d, rail, ch)

    rings, a2a = _uses(net, group)
    others = _other_keys(net, group, kinds, groups, keys)
    # all-to-alls across nodes have n(n-1) routes per group: collect the (fewer) other routes
    # first, so that the first shared link ends the scan
    taken = set(others) if a2a and not local else None
    owner: dict = {}
    for gi, g in enumerate(mine):
        for e in _edges(net, g, a2a, rings):
            for k in keys(*e):
                if owner.setdefault(k, gi) != gi or (taken is not None and k in taken):
                    return False
    return taken is not None or not any(k in owner for k in others)


def _other_keys(net: FusionQuery, group: GroupKind, kinds, groups, keys) -> Iterator:
    """Links (``keys``) of the traffic of every group of the other kinds and of the pipeline
    transfers; a group with the same members as an earlier one is visited once with the union
    of both kinds' algorithms."""
    pl = net.placement
    traffic = net.traffic
    seen: dict[tuple[int, ...], tuple[frozenset[str], bool]] = {}
    for other in kinds:
        if other is group:
            continue
        want_rings, want_a2a = _uses(net, other)
        for g in groups[other]:
            had_rings, had_a2a = seen.get(g, (frozenset(), False))
            new_rings, new_a2a = want_rings - had_rings, want_a2a and not had_a2a
            if not (new_rings or new_a2a):
                continue
            seen[g] = (had_rings | want_rings, had_a2a or want_a2a)
            for e in _edges(net, g, new_a2a, new_rings):
                yield from keys(*e)
    if pl.pp > 1 and (traffic is None or GroupKind.PP in traffic):
        for d in range(pl.dp):
            for t in range(pl.tp):
                for s in range(pl.pp):
                    a, b = pl.rank(t, d, s), pl.rank(t, d, (s + 1) % pl.pp)
                    for src, dst in ((a, b), (b, a)):
                        yield from keys(src, dst, -1, 0)


def _local_symmetric_check(net: FusionQuery, group: GroupKind) -> bool | None:
    """Symmetric mode, when the representatives' groups of ``group`` lie inside one node each:
    only intra-node links can be shared, so only the nodes of those groups are examined — all
    traffic with an endpoint there (every group of every kind touching the node, and pipeline
    transfers). In a uniform cluster every other node is an image of one of these, which is
    what symmetric mode assumes anyway. Cost independent of the cluster size. ``None``: not
    applicable (fall back to the global check)."""
    pl = net.placement
    cl = net.cluster
    gpn = cl.gpn
    traffic = net.traffic
    reps = [tuple(pl.group(group, r)) for r in net.classes.reps]
    if any(len({r // gpn for r in g}) != 1 for g in reps):
        return None
    rings, a2a = _uses(net, group)
    others = [(k, *_uses(net, k)) for k in _collective_kinds(pl) if k is not group]
    pp_traffic = pl.pp > 1 and (traffic is None or GroupKind.PP in traffic)
    shapes: dict = {}
    for g0 in dict.fromkeys(reps):
        node = g0[0] // gpn
        owner = set()
        for e in _edges(net, g0, a2a, rings):
            owner.update(cl.local_keys(e[0], e[1], e[2]))
        if not owner:
            continue
        seen: set = {(g0, rings, a2a)}
        for x in range(node * gpn, min((node + 1) * gpn, pl.world_size)):
            todo = [(tuple(pl.group(group, x)), rings, a2a)]
            todo += [(tuple(pl.group(k, x)), r, a) for k, r, a in others if r or a]
            for g, r, a in todo:
                if len(g) < 2 or (g, r, a) in seen:
                    continue
                seen.add((g, r, a))
                for s, d, rail, _ch in _incident_edges(net, g, a, r, node, shapes):
                    if owner.intersection(cl.local_keys(s, d, rail)):
                        return False
            if pp_traffic:
                c = pl.coord(x)
                for s2 in {(c.pp + 1) % pl.pp, (c.pp - 1) % pl.pp} - {c.pp}:
                    y = pl.rank(c.tp, c.dp, s2)
                    if owner.intersection(cl.local_keys(x, y, -1)) or owner.intersection(
                            cl.local_keys(y, x, -1)):
                        return False
    return True


def _incident_edges(net: FusionQuery, g: tuple[int, ...], a2a: bool, rings: bool, node: int,
                    shapes: dict) -> list[tuple[int, int, int, int]]:
    """The edges of ``g``'s candidate plans with an endpoint on ``node``. Plans depend only on
    the group's shape (members' node offsets and local GPU indices), so they are built once
    per shape and translated."""
    gpn = net.cluster.gpn
    n0 = g[0] // gpn
    key = (tuple((r // gpn - n0, r % gpn) for r in g), a2a, rings)
    by_node = shapes.get(key)
    if by_node is None:
        by_node = shapes[key] = {}
        for s, d, rail, ch in _edges(net, g, a2a, rings):
            rel = (s - n0 * gpn, d - n0 * gpn, rail, ch)
            for nd in {s // gpn - n0, d // gpn - n0}:
                by_node.setdefault(nd, []).append(rel)
    base = n0 * gpn
    return [(s + base, d + base, rail, ch) for s, d, rail, ch in by_node.get(node - n0, ())]

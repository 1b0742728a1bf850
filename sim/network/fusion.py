"""Which process groups' blocking collectives can be costed in isolation (event economy).

A group kind is *fusable* when, under the placement, no link used by one of its groups is ever
used by any other traffic: not by another group of the same kind (e.g. the other DP replicas'
TP groups) and not by any group of another kind (DP, EP, DP_EP rings, trees, hierarchical
phases, all-to-all) or by pipeline sends between neighbouring stages (both directions, and last
→ first for interleaved schedules). Every algorithm the model could choose is included, so the
answer holds whatever sizes and choices occur. Typical case: TP = 8 inside an NVSwitch node
while DP and PP leave through each GPU's own NIC. Assumes a group has at most one blocking
collective in flight (its rank waits for it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.workload.model import CollKind, GroupKind

if TYPE_CHECKING:
    from sim.network.flow import FlowNetwork

_COLLECTIVE_KINDS = (GroupKind.TP, GroupKind.DP, GroupKind.EP, GroupKind.DP_EP)


def _links(net: FlowNetwork, kind: GroupKind, ranks: tuple[int, ...]) -> set[int]:
    out: set[int] = set()
    ops = [(CollKind.ALLREDUCE, a) for a in ("ring", "tree", "hierarchical")]
    if kind in (GroupKind.EP, GroupKind.DP_EP):
        ops.append((CollKind.ALLTOALL, "direct"))
    for coll, algo in ops:
        plan = net.plan(coll, algo, ranks)
        if plan is None:
            continue
        for phase in net._single_flows(plan):
            for path, _, _, _ in phase:
                out.update(path)
    return out


def _groups(net: FlowNetwork, kind: GroupKind) -> list[tuple[int, ...]]:
    pl = net.placement
    assert pl is not None
    return [tuple(g) for g in pl.groups(kind) if len(g) > 1]


def is_fusable(net: FlowNetwork, group: GroupKind) -> bool:
    """True if blocking collectives of ``group`` never share a link with other traffic."""
    pl = net.placement
    if pl is None or group is GroupKind.PP:
        return False
    mine = _groups(net, group)
    if not mine:
        return True
    owner: dict[int, int] = {}
    for gi, g in enumerate(mine):
        for link in _links(net, group, g):
            if owner.setdefault(link, gi) != gi:
                return False
    for other in _COLLECTIVE_KINDS:
        if other is group:
            continue
        for g in _groups(net, other):
            if not owner.keys().isdisjoint(_links(net, other, g)):
                return False
    if pl.pp > 1:
        cl = net.cluster
        for d in range(pl.dp):
            for t in range(pl.tp):
                for s in range(pl.pp):
                    a, b = pl.rank(t, d, s), pl.rank(t, d, (s + 1) % pl.pp)
                    for src, dst in ((a, b), (b, a)):
                        if not owner.keys().isdisjoint(cl.path(src, dst)):
                            return False
    return True

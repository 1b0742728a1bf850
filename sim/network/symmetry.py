"""Symmetric mode: the identical copies of a representative's communication.

In symmetric mode the engine simulates rank ``(tp=0, dp=0, pp=s)`` of every stage ``s``. When
it starts a collective of one of that rank's groups, the same collective runs at the same time
in every other group of that kind in stage ``s`` (TP: the other DP replicas' TP groups; DP: the
other TP ranks' DP groups; EP / DP_EP likewise); a pipeline send ``s → s'`` runs for every
``(tp, dp)`` pair. :func:`copies` lists those groups, the representative's first, each in group
order, so that flow ``i`` of a copy corresponds to flow ``i`` of the representative.
"""

from __future__ import annotations

from sim.placement import Placement
from sim.workload.model import CollKind, GroupKind


def copies(placement: Placement | None, kind: CollKind, group: GroupKind,
           ranks: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Rank tuples of every identical copy of a request (the request itself first).

    Requests whose ranks are not a group of ``placement`` (or no placement) have no copies.
    """
    if placement is None or not ranks or max(ranks) >= placement.world_size:
        return [ranks]
    c0 = placement.coord(ranks[0])
    if kind is CollKind.SENDRECV:
        if len(ranks) != 2:
            return [ranks]
        c1 = placement.coord(ranks[1])
        if (c0.tp, c0.dp) != (c1.tp, c1.dp):
            return [ranks]
        out = [ranks]
        for d in range(placement.dp):
            for t in range(placement.tp):
                pair = (placement.rank(t, d, c0.pp), placement.rank(t, d, c1.pp))
                if pair != ranks:
                    out.append(pair)
        return out
    if group is GroupKind.PP or tuple(placement.group(group, ranks[0])) != tuple(ranks):
        return [ranks]
    seen: dict[int, tuple[int, ...]] = {}
    covered: set[int] = set(ranks)
    for d in range(placement.dp):
        for t in range(placement.tp):
            r = placement.rank(t, d, c0.pp)
            if r in covered:
                continue
            g = tuple(placement.group(group, r))
            covered.update(g)
            seen[min(g)] = g
    return [ranks] + [g for _, g in sorted(seen.items())]

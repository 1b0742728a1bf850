"""Symmetric simulation: the identical copies of a representative's communication.

In symmetric mode the engine simulates rank ``(tp=0, dp=0, pp=s)`` of every stage ``s``. When
it starts a collective of one of that rank's groups, the same collective runs at the same time
in every other group of that kind in stage ``s`` (TP: the other DP replicas' TP groups; DP: the
other TP ranks' DP groups; EP / DP_EP / ETP likewise, in Megatron-Core's expert grid); a
pipeline send ``s → s'`` runs for every ``(tp, dp)`` pair. :func:`copies` lists those groups,
the representative's first, each in group order, so that flow ``i`` of a copy corresponds to
flow ``i`` of the representative. In hybrid simulation (sim/parallel/rank_classes.py) only the
groups whose members are in the same classes, member by member, are copies. :func:`local_copies`
keeps just the copies that can touch the representative's links, without routing any
(docs/scale.md).

Stages of at most :data:`SMALL_STAGE` ranks are handled in plain Python (:func:`_copy_rows`,
:func:`_local_rows`); larger ones with numpy arrays (:func:`_copy_array`), imported only then.
Measured on GPT-3 175B runs (TP 8, PP 16, 63 requests): stages of 256 ranks take 58–62 ms in
plain Python and 51–55 ms with numpy, stages of 512 ranks 147 ms and 78 ms, the 64-rank stages
of the 1024-GPU AICB example 13 ms and 30 ms; numpy's import costs ~0.2 s where nothing else
loads it. Both give the same copies (tests/test_copies_plain_python.py).
"""

from __future__ import annotations

from sim.comm import CollKind, GroupKind
from sim.parallel.placement import EXPERT_KINDS, Placement

# TP × DP ranks of a stage up to which copies are listed in plain Python
SMALL_STAGE = 256


def _small(placement: Placement) -> bool:
    return placement.tp * placement.dp <= SMALL_STAGE


def copies(placement: Placement | None, kind: CollKind, group: GroupKind,
           ranks: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Rank tuples of every identical copy of a request (the request itself first, the others
    by their smallest rank), each in group order so that flow ``i`` of a copy corresponds to
    flow ``i`` of the representative. Requests whose ranks are not a group of ``placement``
    (or no placement) have no copies."""
    if placement is None or not ranks or max(ranks) >= placement.world_size:
        return [ranks]
    if _small(placement):
        rows = _copy_rows(placement, kind, group, ranks)
        return [ranks] if rows is None else _ordered(ranks, rows)
    arr = _copy_array(placement, kind, group, ranks)
    return [ranks] if arr is None else _ordered(ranks, arr.tolist())


def _ordered(ranks: tuple[int, ...], rows) -> list[tuple[int, ...]]:
    rep = tuple(ranks)
    out = sorted({tuple(row) for row in rows} - {rep}, key=lambda g: (min(g), g))
    return [rep] + out


# ---- locality: only the copies that can touch the representative's links -------------------
_NODE_KINDS = ("gpu", "nvswitch", "pcie", "cpu", "nic")


def link_scopes(cluster, links) -> tuple[dict[int, set], set[tuple[int, int]]]:
    """Where traffic must start or end to use any of ``links``: per node, the node-local links
    (as node-independent templates ``(u, v)`` of local names) it would have to use, and the
    fabric sub-trees ``(level, block)`` (for a switch up-link or down-link at ``level``, traffic
    with an endpoint below that sub-tree). A NIC-to-leaf link counts as the NIC's node's."""
    nodes: dict[int, set] = {}
    blocks: set[tuple[int, int]] = set()
    for i in links:
        u, v = cluster.names[i]
        if u[0] in _NODE_KINDS and v[0] in _NODE_KINDS:
            nodes.setdefault(u[1], set()).add(((u[0],) + u[2:], (v[0],) + v[2:]))
            continue
        for x in (u, v):
            if x[0] in _NODE_KINDS:  # NIC <-> leaf: any traffic through that NIC
                nodes.setdefault(x[1], set()).add(("nic", x[2]))
        if u[0] in _NODE_KINDS or v[0] in _NODE_KINDS:
            continue
        if u[0] == "sw" and v[0] == "sw":
            lower = u if u[1] < v[1] else v
            blocks.add((lower[1], lower[2]))
        elif u[0] in ("up", "down"):
            blocks.add((u[1], u[2]))
    interned: dict[frozenset, frozenset] = {}
    return {n: interned.setdefault(frozenset(s), frozenset(s)) for n, s in nodes.items()}, blocks


def _stage_base(pl: Placement, group: GroupKind, ranks: tuple[int, ...]
                ) -> tuple[int, int, int] | None:
    """``(first rank of the stage, TP stride, DP stride)`` of a collective over the whole group
    ``ranks`` (its copies are the stage's other groups of that kind), or None: pipeline and
    embedding groups, or ranks that are not one whole group, have no copies."""
    if group in (GroupKind.PP, GroupKind.EMB) or tuple(pl.group(group, ranks[0])) != tuple(ranks):
        return None
    return pl.coord(ranks[0]).pp * pl.stride("pp"), pl.stride("tp"), pl.stride("dp")


def _pair_rows(pl: Placement, ranks: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """Every copy of a send/recv whose two ranks share their TP and DP coordinates: the same
    pair of pipeline stages at every TP × DP position (TP-major), else None."""
    if len(ranks) != 2:
        return None
    c0, c1 = pl.coord(ranks[0]), pl.coord(ranks[1])
    if (c0.tp, c0.dp) != (c1.tp, c1.dp):
        return None
    st, sd, ss = (pl.stride(d) for d in ("tp", "dp", "pp"))
    a, b = c0.pp * ss, c1.pp * ss
    return [(t * st + d * sd + a, t * st + d * sd + b) for t in range(pl.tp)
            for d in range(pl.dp)]


def _copy_rows(pl: Placement, kind: CollKind, group: GroupKind, ranks: tuple[int, ...]
               ) -> list[tuple[int, ...]] | None:
    """Every copy of a request as a list of rank tuples (None: the request has no copies):
    :func:`_copy_array` in plain Python, row for row."""
    if kind is CollKind.SENDRECV:
        return _pair_rows(pl, ranks)
    base = _stage_base(pl, group, ranks)
    if base is None:
        return None
    s0, st, sd = base
    if group in EXPERT_KINDS and pl.etp != pl.tp:
        return [tuple(s0 + (i % pl.tp) * st + (i // pl.tp) * sd for i in row)
                for row in _expert_rows(pl, group)]
    tp, dp, ep = range(pl.tp), range(pl.dp), pl.ep
    if group in (GroupKind.TP, GroupKind.ETP):
        return [tuple(s0 + d * sd + t * st for t in tp) for d in dp]
    if group is GroupKind.DP:
        return [tuple(s0 + t * st + d * sd for d in dp) for t in tp]
    if group in (GroupKind.EP, GroupKind.CP):
        k = ep if group is GroupKind.EP else pl.cp
        return [tuple(s0 + t * st + j * sd + i * sd for i in range(k)) for t in tp
                for j in range(0, pl.dp, k)]
    return [tuple(s0 + t * st + e * sd + i * ep * sd for i in range(pl.dp // ep)) for t in tp
            for e in range(ep)]  # DP_EP


def _expert_rows(pl: Placement, group: GroupKind) -> list[range]:
    """Stage-local indices of every ETP, EP or DP_EP group (see :func:`_expert_copies`)."""
    etp, ep, edp = pl.etp, pl.ep, pl.edp
    if group is GroupKind.ETP:
        return [range((e + ep * d) * etp, (e + ep * d) * etp + etp) for e in range(ep)
                for d in range(edp)]
    if group is GroupKind.EP:
        return [range(t + etp * ep * d, t + etp * ep * d + etp * ep, etp) for t in range(etp)
                for d in range(edp)]
    return [range(t + etp * e, t + etp * e + etp * ep * edp, etp * ep) for t in range(etp)
            for e in range(ep)]  # DP_EP


def _copy_array(placement: Placement, kind: CollKind, group: GroupKind,
                ranks: tuple[int, ...]):
    """Every copy of a request as rows of a numpy array (None: the request has no copies)."""
    import numpy as np

    pl = placement
    if kind is CollKind.SENDRECV:
        rows = _pair_rows(pl, ranks)
        return None if rows is None else np.array(rows, dtype=np.int64).reshape(-1, 2)
    base = _stage_base(pl, group, ranks)
    if base is None:
        return None
    s0, st, sd = base
    if group in EXPERT_KINDS and pl.etp != pl.tp:
        return s0 + _expert_copies(pl, group)
    t, d, ep = np.arange(pl.tp), np.arange(pl.dp), pl.ep
    if group in (GroupKind.TP, GroupKind.ETP):  # ETP = TP: the tensor-parallel group
        return s0 + d[:, None] * sd + t[None, :] * st
    if group is GroupKind.DP:
        return s0 + t[:, None] * st + d[None, :] * sd
    if group in (GroupKind.EP, GroupKind.CP):  # blocks of consecutive DP indices
        k = ep if group is GroupKind.EP else pl.cp
        starts = (t[:, None] * st + np.arange(0, pl.dp, k)[None, :] * sd).reshape(-1)
        return s0 + starts[:, None] + np.arange(k)[None, :] * sd
    starts = (t[:, None] * st + np.arange(ep)[None, :] * sd).reshape(-1)  # DP_EP
    return s0 + starts[:, None] + (np.arange(pl.dp // ep) * ep)[None, :] * sd


def _expert_copies(pl: Placement, group: GroupKind):
    """Every ETP, EP or DP_EP group of one stage (offsets from the stage's first rank), in
    group order: local index ``i = etp + ETP·(ep + EP·edp)`` (sim.parallel.placement), rank ``i mod
    TP`` along tp and ``i // TP`` along dp."""
    import numpy as np

    et, e, d = np.arange(pl.etp), np.arange(pl.ep), np.arange(pl.edp)
    if group is GroupKind.ETP:  # rows (ep, edp), members etp
        i = (e[:, None] + pl.ep * d[None, :]).reshape(-1)[:, None] * pl.etp + et[None, :]
    elif group is GroupKind.EP:  # rows (etp, edp), members ep
        rows = (et[:, None] + pl.etp * pl.ep * d[None, :]).reshape(-1)
        i = rows[:, None] + pl.etp * e[None, :]
    else:  # DP_EP: rows (etp, ep), members edp
        rows = (et[:, None] + pl.etp * e[None, :]).reshape(-1)
        i = rows[:, None] + pl.etp * pl.ep * d[None, :]
    return (i % pl.tp) * pl.stride("tp") + (i // pl.tp) * pl.stride("dp")


def _touches_templates(cluster, members, nodes_scope: dict[int, set]) -> bool:
    """Could a group with these members use one of the scoped node-local links? Its traffic
    inside a node runs between its members there, and between them and the NICs of its
    members (its rails)."""
    gpn = cluster.gpn
    mem = members  # a handful of ranks: plain Python beats numpy's per-call cost
    nic = cluster.gpu_nics
    rails = {nic[m % gpn] for m in mem} if cluster.nics else set()
    by_node: dict[int, list[int]] = {}
    for m in mem:
        if m // gpn in nodes_scope:
            by_node.setdefault(m // gpn, []).append(m % gpn)
    memo = cluster.__dict__.setdefault("_touch_memo", {})
    rail_key = tuple(sorted(rails))
    for n, local in by_node.items():
        want = nodes_scope.get(n)
        if not want:
            continue
        key = (want, tuple(local), rail_key)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = _node_touches(cluster, want, local, rails)
        if hit:
            return True
    return False


def _node_touches(cluster, want: frozenset, local: list[int], rails: set[int]) -> bool:
    segs = [(("gpu", a), ("gpu", b)) for a in local for b in local if a != b]
    for a in local:
        for k in rails:
            if ("nic", k) in want:
                return True
            segs += [(("gpu", a), ("nic", k)), (("nic", k), ("gpu", a))]
    for x, y in segs:
        seg = cluster.segment(x, y)
        if any((seg[j], seg[j + 1]) in want for j in range(len(seg) - 1)):
            return True
    return False


def local_copies(placement: Placement | None, kind: CollKind, group: GroupKind,
                 ranks: tuple[int, ...], cluster, scopes, classes=None
                 ) -> list[tuple[int, ...]]:
    """Like :func:`copies`, restricted to the copies with a member on one of the scope nodes or
    below one of the scope sub-trees (:func:`link_scopes`) — the only copies whose routes can
    use the representative's links. A copy's fabric traffic leaves and enters nodes through the
    NICs of its members (ring / tree channels use the NICs of the group's members, direct
    transfers the destination's), so only those rails' leaves are checked. Cost: vector
    arithmetic over the copies, no routing."""
    if placement is None or not ranks or max(ranks) >= placement.world_size:
        return [ranks]
    if _small(placement):
        rows = _copy_rows(placement, kind, group, ranks)
        if rows is None:
            return [ranks]
        return _ordered(ranks, _local_rows(rows, ranks, cluster, scopes, classes))
    import numpy as np

    arr = _copy_array(placement, kind, group, ranks)
    if arr is None:
        return [ranks]
    if classes is not None:  # copies: same classes member by member (hybrid simulation)
        cls = classes.class_array
        arr = arr[(cls[arr] == cls[np.asarray(ranks)]).all(axis=1)]
    nodes_scope, blocks_scope = scopes
    gpn = cluster.gpn
    nodes = arr // gpn
    keep = np.zeros(len(arr), dtype=bool)
    if nodes_scope:
        near = np.flatnonzero(np.isin(nodes, np.fromiter(nodes_scope, dtype=np.int64)).any(
            axis=1))
        for i in near:
            keep[i] = _touches_templates(cluster, arr[i].tolist(), nodes_scope)
    fabric = cluster.topo.fabric
    if blocks_scope and fabric is not None:
        levels = sorted({lv for lv, _ in blocks_scope})
        want = {lv: np.array(sorted(b for lv2, b in blocks_scope if lv2 == lv)) for lv in levels}
        assert cluster.tree is not None
        n_nodes, nics, spans = cluster.topo.num_nodes, cluster.nics, cluster.tree.spans
        member_nic = np.asarray(cluster.gpu_nics)[arr % gpn]
        for k in range(nics):
            uses_k = (member_nic == k).any(axis=1)
            if not uses_k.any():
                continue
            leaves = fabric.leaf_index(nodes[uses_k], k, n_nodes, nics)
            hit = np.zeros(int(uses_k.sum()), dtype=bool)
            for lv in levels:
                hit |= np.isin(leaves // spans[lv], want[lv]).any(axis=1)
            keep[np.flatnonzero(uses_k)[hit]] = True
    return _ordered(ranks, arr[keep].tolist())


def _local_rows(rows: list[tuple[int, ...]], ranks: tuple[int, ...], cluster, scopes,
                classes) -> list[tuple[int, ...]]:
    """The rows :func:`local_copies` keeps, in plain Python: the same tests row by row."""
    # copies: same classes member by member (hybrid simulation); with one class per stage
    # every row's members lie in the stages of the request's, position by position
    if classes is not None and (len(classes.tp_parts) > 1 or len(classes.dp_parts) > 1):
        cls = classes.class_of
        want = [cls(r) for r in ranks]
        rows = [row for row in rows if [cls(m) for m in row] == want]
    nodes_scope, blocks_scope = scopes
    gpn = cluster.gpn
    fabric = cluster.topo.fabric
    blocks = blocks_scope if fabric is not None and cluster.nics else set()
    if blocks:
        assert cluster.tree is not None
        levels = sorted({lv for lv, _ in blocks})
        spans, nic = cluster.tree.spans, cluster.gpu_nics
        n_nodes, nics = cluster.topo.num_nodes, cluster.nics
    hit: dict[tuple[int, int], bool] = {}  # (node, rail) -> its leaf lies in a scope sub-tree
    kept = []
    for row in rows:
        nodes = {m // gpn for m in row}
        if nodes_scope and not nodes_scope.keys().isdisjoint(nodes) and \
                _touches_templates(cluster, list(row), nodes_scope):
            kept.append(row)
            continue
        if not blocks:
            continue
        for k in {nic[m % gpn] for m in row}:
            for n in nodes:
                h = hit.get((n, k))
                if h is None:
                    leaf = fabric.leaf_index(n, k, n_nodes, nics)
                    h = hit[(n, k)] = any((lv, leaf // spans[lv]) in blocks for lv in levels)
                if h:
                    break
            else:
                continue
            kept.append(row)
            break
    return kept

"""All-to-all at scale: the n(n−1) transfers of an all-to-all costed as classes of transfers.

An all-to-all among n ranks is n(n−1) point-to-point transfers of ``S/n`` bytes each (the
``direct`` plan of :mod:`sim.network.plans`), all starting together. Flow by flow, 1,024 ranks
are a million max-min flows. On a cluster whose nodes are alike, transfers with the same shape
see the same node-local links, so they are costed as one *class flow* each:

- the **shape** of a transfer ``a → b``: the local GPU indices of ``a`` and ``b``, whether it
  stays in its node, and the fabric level at which its route turns (1 = same leaf);
- the **type** of a node: how many transfers of each class leave and enter it (refined until
  every node of a type sends and receives the same number of transfers of every class);
- a **class** = (shape, type of the source node, type of the destination node).

A class flow runs at the rate of one of its transfers. It is limited by the node-local links
of one representative node per type (NVLink / PCIe / NIC-to-leaf; the representative's links
carry the class counts of that node, exactly — every node of the type carries the same) and by
every fabric switch-to-switch link any of its transfers crosses, each loaded with exactly the
number of the class's transfers routed over it (ECMP hashing vectorised, the same CRC-32 as
:meth:`~sim.topology.cluster.Cluster.path`). The loads of every link are therefore the loads
of the flow-by-flow model when every transfer of a class runs at the class's rate.

**Exactness.** The max-min rates of the classes equal the flow-by-flow rates whenever every
class freezes (progressive filling) on a link that *all* its transfers cross in the same way:
a node-local link of the representative (identical on every node of the type) or a fabric link
used by every transfer of the class. Then each transfer has a saturated bottleneck link on
which its rate is maximal, which characterises the unique max-min allocation of the
flow-by-flow model (Bertsekas & Gallager, *Data Networks*, 2nd ed., §6.5.2), and the
progressive filling of the classes performs, link for link, the same floating-point operations
(integer multiplicities, the same levels). A class limited by a fabric link only some of its
transfers use (an unlucky ECMP collision on an oversubscribed fabric) would make all of them
run at that rate; flows carry their set of such *strict* links and the solver counts every fill
where this happens (:attr:`sim.network.fluid.FluidSolver.inexact`). Isolated costs with that
flag fall back to the flow-by-flow plan; inside a simulation the count is reported.

Hierarchical all-to-all (DeepSpeed-MoE / Tutel's two-dimensional all-to-all): an intra-node
all-to-all of ``S/g`` per pair (each GPU gathers what its node sends to GPU ``j`` of every
node), then ``g`` inter-node all-to-alls among the GPUs with the same local index, ``S/N``
per pair (N nodes of g ranks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.comm import CollKind
from sim.network import nccl
from sim.network.ecmp_hash import route_hashes
from sim.network.plans import PROTOCOLS_FOR_DIRECT, Plan, PlanPhase, node_groups
from sim.topology.cluster import Cluster


def supported(cl: Cluster) -> bool:
    """Class costing needs alike nodes: no failed NICs or degraded links."""
    return not cl.perturbed


@dataclass
class ClassFlows:
    """The class flows of one all-to-all phase: per class (path, loads, strict links), its
    number of transfers, and the phase's latency per protocol."""

    items: tuple[tuple[tuple[int, ...], tuple[tuple[int, int], ...], frozenset[int]], ...]
    members: tuple[int, ...]
    transfers: int
    latency_ns: dict[str, int] = field(default_factory=dict)


def _pairs(groups: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (a, b), a ≠ b, of every group (all-to-all transfers)."""
    srcs, dsts = [], []
    for g in groups:
        r = np.asarray(g, dtype=np.int64)
        n = len(r)
        if n < 2:
            continue
        a = np.repeat(r, n)
        b = np.tile(r, n)
        keep = a != b
        srcs.append(a[keep])
        dsts.append(b[keep])
    if not srcs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


_DENSE_MAX = 1 << 23  # key spaces up to this size are counted with bincount, else sorted


def _dense(keys: np.ndarray, space: int) -> tuple[np.ndarray, int]:
    """Dense ids 0..k-1 of ``keys`` (in increasing key order) and k."""
    if space <= _DENSE_MAX:
        present = np.bincount(keys, minlength=space) > 0
        remap = np.cumsum(present) - 1
        return remap[keys], int(remap[-1]) + 1 if space else 0
    uniq, inv = np.unique(keys, return_inverse=True)
    return inv.reshape(-1), len(uniq)


def _tops(cl: Cluster, src: np.ndarray, dst: np.ndarray):
    """Per transfer: leaves of its rail (the destination GPU's NIC) and the level at which its
    route turns (0 = same node, 1 = same leaf, L = through level L)."""
    gpn = cl.gpn
    ns, nd = src // gpn, dst // gpn
    f = cl.topo.fabric
    if f is None or not cl.nics or not (ns != nd).any():
        return np.zeros(len(src), dtype=np.int64), None, None
    nn = cl.topo.num_nodes
    leaf = f.leaf_index(np.arange(nn)[:, None], np.arange(cl.nics)[None, :], nn, cl.nics)
    rail = np.asarray(cl.gpu_nics, dtype=np.int64)[dst % gpn]
    la, lb = leaf[ns, rail], leaf[nd, rail]
    n_leaves = int(leaf.max()) + 1
    assert cl.tree is not None
    span = cl.tree.spans
    ids = np.arange(n_leaves)
    table = np.full((n_leaves, n_leaves), len(span) - 1, dtype=np.int64)
    for lv in range(len(span) - 2, 0, -1):
        table = np.where(ids[:, None] // span[lv] == ids[None, :] // span[lv], lv, table)
    top = np.where(ns == nd, 0, table[la, lb])
    return top, la, lb


def _classes(cl: Cluster, src, dst, top, pinned: frozenset[int]):
    """Class id per transfer and the representative node per node type (see module doc)."""
    gpn = cl.gpn
    ns, nd = src // gpn, dst // gpn
    shape = ((src % gpn) * gpn + dst % gpn) * 8 + top
    n_shapes = gpn * gpn * 8
    n_nodes = cl.topo.num_nodes
    ntype = np.zeros(n_nodes, dtype=np.int64)
    n_types = 1
    for _ in range(8):
        cls, n_cls = _dense((shape * n_types + ntype[ns]) * n_types + ntype[nd],
                            n_shapes * n_types * n_types)
        rows = np.concatenate([
            np.bincount(ns * n_cls + cls, minlength=n_nodes * n_cls).reshape(n_nodes, n_cls),
            np.bincount(nd * n_cls + cls, minlength=n_nodes * n_cls).reshape(n_nodes, n_cls)],
            axis=1)
        _, first, new = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        new = np.argsort(np.argsort(first))[new.reshape(-1)]  # types in order of first node
        if len(first) == n_types:
            break
        ntype, n_types = new, len(first)
    else:  # no stable partition found quickly: every node is its own type (no symmetry used)
        ntype, n_types = np.arange(n_nodes), n_nodes
        cls, n_cls = _dense((shape * n_nodes + ns) * n_nodes + nd, n_shapes * n_nodes ** 2)
    reps: dict[int, int] = {}
    for node in np.unique(np.concatenate([ns, nd])).tolist():
        t = int(ntype[node])
        if t not in reps or (node in pinned and reps[t] not in pinned):
            reps[t] = node
    return cls, n_cls, ntype, reps


def _fabric_codes(cl: Cluster, la, lb, top, hashes):
    """Per cross-leaf transfer, the dense codes of its switch-to-switch links (one array per
    hop, ``-1`` where the route has fewer hops), the number of codes, and a decoder code →
    (u, v) link names."""
    assert cl.tree is not None
    span, up = cl.tree.spans, cl.tree.up
    levels = len(span) - 1
    nb = int(max(la.max(), lb.max())) + 1
    paths = [1, 1]
    for lv in range(2, levels + 1):
        paths.append(paths[-1] * up[lv - 2])
    hops: list[np.ndarray] = []
    spaces: list[tuple] = []  # per hop: (offset, kind, level, switch indices per block)
    off = 0
    if cl.spreading:
        for kind, order in ((0, range(1, levels)), (1, range(levels - 1, 0, -1))):
            for lv in order:
                ends = la if kind == 0 else lb
                hops.append(np.where(top > lv, off + ends // span[lv], -1))
                spaces.append((off, kind, lv, 1))
                off += nb

        def decode(code: int) -> tuple:
            o, kind, lv, _ = max(x for x in spaces if x[0] <= code)
            block = code - o
            if kind == 0:
                return (("up", lv, block), ("sw-up", lv + 1))
            return (("down", lv, block), ("sw-down", lv))
        return hops, off, decode
    n_paths = np.asarray(paths)[top]
    choice = np.where(n_paths > 1, hashes % np.maximum(n_paths, 1), 0)
    jup = {1: np.zeros(len(top), dtype=np.int64)}
    rest = choice
    for lv in range(2, levels + 1):
        jup[lv] = jup[lv - 1] * up[lv - 2] + rest % up[lv - 2]
        rest = rest // up[lv - 2]
    for lv in range(1, levels):  # up-link lv -> lv+1: the upper switch names it
        hops.append(np.where(top > lv, off + (la // span[lv]) * paths[lv + 1] + jup[lv + 1], -1))
        spaces.append((off, 0, lv, paths[lv + 1]))
        off += nb * paths[lv + 1]
    jtop = np.zeros(len(top), dtype=np.int64)
    for lv in range(1, levels + 1):
        jtop = np.where(top == lv, jup[lv], jtop)
    p = np.asarray(paths)
    for lv in range(levels - 1, 0, -1):  # down-link lv+1 -> lv: the upper switch names it
        jd_hi = jtop // np.maximum(p[top] // p[lv + 1], 1)
        hops.append(np.where(top > lv, off + (lb // span[lv]) * paths[lv + 1] + jd_hi, -1))
        spaces.append((off, 1, lv, paths[lv + 1]))
        off += nb * paths[lv + 1]

    def decode(code: int) -> tuple:
        o, kind, lv, per = max(x for x in spaces if x[0] <= code)
        leafblock, j = divmod(code - o, per)  # block of level lv, upper switch
        if kind == 0:
            return (("sw", lv, leafblock, j // up[lv - 1] if lv > 1 else 0),
                    ("sw", lv + 1, leafblock * span[lv] // span[lv + 1], j))
        return (("sw", lv + 1, leafblock * span[lv] // span[lv + 1], j),
                ("sw", lv, leafblock, j // up[lv - 1]))
    return hops, off, decode


def _route_values(cl: Cluster, src, dst):
    """Per transfer (arrays of GPUs, channel 0, the destination GPU's NIC), what picks its
    equal-cost path (:meth:`Cluster._route_value`): the ECMP hash or the D-mod-K destination
    port index; None for a spreading routing."""
    if cl.spreading:
        return None
    if cl.routing == "ecmp":
        return route_hashes(src, dst, 0)
    f = cl.topo.fabric
    assert f is not None
    k = np.asarray(cl.gpu_nics)[dst % cl.gpn]
    return f.port_index(dst // cl.gpn, k, cl.topo.num_nodes, cl.nics)


def _fabric_loads(cl: Cluster, src, dst, cls, n_cls, tops) -> dict[int, dict[int, int]]:
    """Class → {fabric link id: transfers of the class routed over it}."""
    top, la, lb = tops
    if la is None:
        return {}
    idx = np.flatnonzero(top > 1)
    if not len(idx):
        return {}
    hops, n_codes, decode = _fabric_codes(cl, la[idx], lb[idx], top[idx],
                                          _route_values(cl, src[idx], dst[idx]))
    c = cls[idx]
    keys = np.concatenate([np.where(h >= 0, h * n_cls + c, -1) for h in hops])
    keys = keys[keys >= 0]
    space = n_codes * n_cls
    if space <= _DENSE_MAX:
        counts = np.bincount(keys, minlength=space)
        keys = np.flatnonzero(counts)
        counts = counts[keys]
    else:
        keys, counts = np.unique(keys, return_counts=True)
    ids: dict[int, int] = {}
    out: dict[int, dict[int, int]] = {}
    for k, m in zip(keys.tolist(), counts.tolist(), strict=True):
        code, c_id = divmod(k, n_cls)
        link = ids.get(code)
        if link is None:
            link = ids[code] = cl.link(*decode(code))
        out.setdefault(c_id, {})[link] = m
    return out


def _node_parts(cl: Cluster, ls: int, ld: int, xs: int, xd: int, intra: bool
                ) -> tuple[list[int], list[int]]:
    """Link ids of a class's route on its representative nodes: (source side, destination
    side); an intra-node class has only a source side."""
    if intra:
        return [cl.link(u, v) for u, v in cl.local_links(xs, ("gpu", ls), ("gpu", ld))], []
    k = cl.gpu_nics[ld]
    la, lb = cl.leaf_of(xs, k), cl.leaf_of(xd, k)
    a = cl.local_links(xs, ("gpu", ls), ("nic", k))
    a.append((("nic", xs, k), ("sw", 1, la, 0)))
    b = [(("sw", 1, lb, 0), ("nic", xd, k))]
    b += cl.local_links(xd, ("nic", k), ("gpu", ld))
    return [cl.link(u, v) for u, v in a], [cl.link(u, v) for u, v in b]


def class_flows(cl: Cluster, groups: list[tuple[int, ...]], steps: int,
                pinned: frozenset[int] = frozenset()) -> ClassFlows:
    """The class flows of simultaneous all-to-alls among each of ``groups`` (their latency:
    NCCL's ring base latency plus ``steps`` hops, as :func:`~sim.network.plans.direct_plan`)."""
    src, dst = _pairs(groups)
    gpn = cl.gpn
    tops = _tops(cl, src, dst)
    top = tops[0]
    if not len(src):
        return ClassFlows((), (), 0, {p: 0 for p in PROTOCOLS_FOR_DIRECT})
    cls, n_cls, ntype, reps = _classes(cl, src, dst, top, pinned)
    first = np.full(n_cls, len(cls), dtype=np.int64)
    np.minimum.at(first, cls, np.arange(len(cls)))
    members = np.bincount(cls, minlength=n_cls)
    ns, nd = src // gpn, dst // gpn
    rep_s = np.asarray([reps.get(int(t), -1) for t in ntype.tolist()])
    out_cnt = np.bincount(cls[ns == rep_s[ns]], minlength=n_cls)
    in_cnt = np.bincount(cls[(nd == rep_s[nd]) & (ns != nd)], minlength=n_cls)
    fab = _fabric_loads(cl, src, dst, cls, n_cls, tops)
    items = []
    intra_ns = inter_ns = 0
    for c in range(n_cls):
        i = int(first[c])
        s, d = int(src[i]), int(dst[i])
        xs, xd = reps[int(ntype[s // gpn])], reps[int(ntype[d // gpn])]
        intra = s // gpn == d // gpn
        part_a, part_b = _node_parts(cl, s % gpn, d % gpn, xs, xd, intra)
        loads: dict[int, int] = {}
        for link in part_a:
            loads[link] = loads.get(link, 0) + int(out_cnt[c])
        for link in part_b:
            loads[link] = loads.get(link, 0) + int(in_cnt[c])
        strict = list(dict.fromkeys(part_a + part_b))
        mine = fab.get(c, {})
        m = int(members[c])
        strict += sorted(k for k, v in mine.items() if v == m)
        loose = sorted(k for k, v in mine.items() if v != m)
        loads.update(mine)
        items.append((tuple(strict + loose), tuple(loads.items()), frozenset(strict)))
        ns_lat = cl.path_latency_ns(cl.path(s, d, -1, 0))
        if intra:
            intra_ns = max(intra_ns, ns_lat)
        else:
            inter_ns = max(inter_ns, ns_lat)
    multi = bool((ns != nd).any())
    hop = "net" if multi else ("nvlink" if cl.topo.node.intra_kind != "pcie" else "pci")
    phys = inter_ns if multi else intra_ns
    lat = {p: round((nccl.BASE_LAT_US["ring"][p] + steps * nccl.HW_LAT_US[("ring", hop)][p])
                    * 1000) + steps * phys for p in PROTOCOLS_FOR_DIRECT}
    return ClassFlows(tuple(items), tuple(int(x) for x in members), len(src), lat)


# ---- plans ---------------------------------------------------------------------------------
class ClassPlan(Plan):
    """An all-to-all plan costed by classes (:func:`class_plan`). ``stages``: per phase, the
    groups that exchange and the bytes of each transfer as a fraction of ``S``. Its phases
    carry no coflows; :meth:`flows` gives the class flows and the latencies."""

    by_class = True

    def __init__(self, cl: Cluster, algorithm: str, ranks: tuple[int, ...],
                 stages: tuple[tuple[tuple[tuple[int, ...], ...], float], ...]):
        set_ = object.__setattr__
        set_(self, "kind", CollKind.ALLTOALL)
        set_(self, "algorithm", algorithm)
        set_(self, "ranks", ranks)
        set_(self, "stages", stages)
        set_(self, "cluster", cl)
        set_(self, "cache", {})
        set_(self, "phases", tuple(PlanPhase((), lambda _c, i=i: self.flows()[1][i])
                                   for i in range(len(stages))))

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def flows(self, copies: tuple[tuple[int, ...], ...] = (),
              pinned: frozenset[int] = frozenset()) -> tuple[tuple, tuple]:
        """(flows, latencies) per phase when the group and its ``copies`` exchange at once
        (flow items: path, loads, coef, rate cap, strict links)."""
        key = (copies, pinned)
        got = self.cache.get(key)
        if got is None:
            got = self.cache[key] = phase_flows(self.cluster, self, list(copies), pinned)
        return got


def class_plan(cl: Cluster, algorithm: str, ranks: tuple[int, ...]) -> ClassPlan | None:
    """``direct`` (one all-to-all of ``S/n`` per transfer) or ``hierarchical`` (intra-node then
    inter-node, see the module doc; None where nodes hold different numbers of ranks)."""
    n = len(ranks)
    if algorithm == "direct":
        return ClassPlan(cl, "direct", ranks, (((ranks,), 1.0 / n),))
    if algorithm != "hierarchical":
        return None
    nodes = node_groups(cl, ranks)
    n_nodes, g = len(nodes), len(nodes[0])
    if n_nodes == 1 or g == 1 or any(len(x) != g for x in nodes):
        return None
    cols = tuple(tuple(x[j] for x in nodes) for j in range(g))
    return ClassPlan(cl, "hierarchical", ranks, ((tuple(tuple(x) for x in nodes), 1.0 / g),
                                                 (cols, 1.0 / n_nodes)))


def phase_flows(cl: Cluster, plan: ClassPlan, copies: list[tuple[int, ...]],
                pinned: frozenset[int]) -> tuple[tuple, tuple]:
    """(flows, latencies) per phase, in the form of ``FlowNetwork._single_flows``: the class
    flows of ``plan`` run by the representative group and its ``copies`` (same group order)."""
    pos = {r: i for i, r in enumerate(plan.ranks)}
    phases, lats = [], []
    for groups, coef in plan.stages:
        allg = list(groups)
        for cp in copies:
            allg += [tuple(cp[pos[r]] for r in g) for g in groups]
        steps = len(groups[0]) - 1
        cf = class_flows(cl, allg, steps, pinned)
        phases.append(tuple((path, loads, coef, float("inf"), strict)
                            for path, loads, strict in cf.items))
        lats.append(cf.latency_ns)
    return tuple(phases), tuple(lats)

"""Requests the tuner provably costs alike: the key of :meth:`Tuner.choose`'s second cache.

On a uniform cluster (no degraded link, no failed NIC: every node's links have the same
capacities and latencies), two requests of one kind and size get the same algorithm, protocol
and isolated time when

- all their ranks lie in one node each, at the same local GPU indices (``"node"``): every part
  of the choice — plans, routes, link capacities and latencies, NCCL's channels and tree
  bandwidth — is the same inside every node (a ring inside one node keeps all its edges in
  symmetric simulation too, :func:`~sim.network.representative.representative_plan`); or
- they are send/recv pairs whose routes are alike (``"route"``): the choice of a point-to-point
  transfer depends only on its route's links (capacities, how often the transfer crosses
  each, in order) and its latency per protocol, which the key lists (the route is worked out
  anyway: the transfer runs on it); or
- they are other collectives across nodes whose candidates' routes are alike (``"group"``,
  :func:`group_shape`): per candidate algorithm its plan's routes, rate caps and latencies,
  and the group's size, ranks per node, ring and tree bus bandwidths and channel bandwidth
  (NCCL's channels, ramp and tree ceilings) — everything the choice reads; not where an
  in-network algorithm (NVLS, NVLSTree, CollNet) applies (their costs read more of the plan).

Only the plan differs (its ranks); :meth:`Tuner.choose` builds it for the request
(:func:`choice_of`: not at all where the plan is not needed). Choices are
shared within one set of simulated nodes (``tuner.pinned``, part of the key).
tests/test_tuner_shapes.py compares every shared choice with the request's own.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.comm import CollKind
from sim.network.plans import node_groups


def alike_key(tuner, kind: CollKind, ranks: tuple[int, ...], size_bytes: int) -> tuple | None:
    """The key of ``tuner.alike`` under which a request's choice is shared, or None (the
    shape worked out once per group: ``tuner.shapes``)."""
    memo = (kind, ranks, tuner.pinned)
    shape = tuner.shapes.get(memo, tuner.shapes)
    if shape is tuner.shapes:
        shape = tuner.shapes[memo] = shape_key(tuner, kind, ranks)
    return None if shape is None else (shape, size_bytes, tuner.pinned)


def choose_alike(tuner, kind: CollKind, ranks: tuple[int, ...], size_bytes: int,
                 choose: Callable[[CollKind, tuple[int, ...], int], tuple]) -> tuple:
    """``choose(kind, ranks, size_bytes)``, or the choice of an alike request of the same size
    (``tuner.alike``: (shape, size) -> algorithm, protocol, ns) on this request's plan."""
    key = alike_key(tuner, kind, ranks, size_bytes)
    alike = tuner.alike.get(key) if key is not None else None
    if alike is not None:
        return (tuner.rep_plan(kind, alike[0], ranks), alike[1], alike[2])
    got = choose(kind, ranks, size_bytes)
    if key is not None:
        tuner.alike[key] = (got[0].algorithm, got[1], got[2])
    return got


def choice_of(tuner, kind: CollKind, ranks: tuple[int, ...], size_bytes: int
              ) -> tuple[str, str, int]:
    """(algorithm, protocol, isolated ns) of ``tuner.choose``, without building the request's
    plan when an alike request's choice is known (isolated costs and kernel channels need
    no plan)."""
    key = alike_key(tuner, kind, ranks, size_bytes)
    alike = tuner.alike.get(key) if key is not None else None
    if alike is not None:
        return alike
    plan, proto, ns = tuner.choose(kind, ranks, size_bytes)
    return (plan.algorithm, proto, ns)


def node_shape(tuner, ranks: tuple[int, ...]) -> tuple | None:
    """``("node", local GPU indices)`` of ranks inside one node of a uniform cluster (their
    plans and costs are the same in every node; the tuner also keys its ring and tree
    bandwidths by it), else None."""
    cl = tuner.cluster
    if cl.perturbed or len(ranks) < 2:
        return None
    gpn = cl.gpn
    node = ranks[0] // gpn
    if any(r // gpn != node for r in ranks):
        return None
    return ("node", tuple(r % gpn for r in ranks))


def shape_key(tuner, kind: CollKind, ranks: tuple[int, ...]) -> tuple | None:
    """The key of requests costed alike (see the module docstring), or None."""
    if kind is CollKind.ALLTOALL:
        return None
    inside = node_shape(tuner, ranks)
    if inside is not None:
        return (kind, inside)
    cl = tuner.cluster
    if cl.perturbed:
        return None
    if kind is not CollKind.SENDRECV:
        return group_shape(tuner, kind, ranks)
    if len(ranks) != 2 or tuner.candidates(kind, ranks) != ("direct",):
        return None
    plan = tuner.rep_plan(kind, "direct", ranks)
    if plan is None:
        return None
    labels: dict[int, int] = {}  # link id -> order of first use (the routes' shape)
    return ("route", _routes(tuner, plan, labels), tuple(cl.cap[link] for link in labels),
            _latencies(plan))


def group_shape(tuner, kind: CollKind, ranks: tuple[int, ...]) -> tuple | None:
    """``("group", ...)``: a collective across nodes, by everything its choice reads (None
    where an in-network algorithm applies: their costs read more of the plan): the
    candidates; per candidate its plan's routes (labelled links, coefficients, rate caps) and
    latencies; the group's size, ranks per node, ring and tree bus bandwidths and channel
    bandwidth (NCCL's channels and ceilings); the labelled links' capacities. Worked out in
    the order the choice itself reads them (so links are registered in the same order)."""
    if len(ranks) < 2:
        return None
    cands = tuner.candidates(kind, ranks)
    labels: dict[int, int] = {}
    algos: list[tuple] = []
    busbw = tree = None
    for a in cands:
        plan = tuner.rep_plan(kind, a, ranks)
        if plan is None:
            algos.append((a,))
            continue
        if a in ("nvls", "nvlstree", "collnet"):
            return None
        if a in ("ring", "tree") and busbw is None:
            busbw = tuner.ring_busbw_GBps(ranks), tuner.channel_GBps(ranks)
        algos.append((a, len(plan.phases[0].coflows), _routes(tuner, plan, labels),
                      _latencies(plan)))
        if a == "tree":
            tree = tuner.tree_busbw_GBps(ranks)
    sizes = tuple(len(g) for g in node_groups(tuner.cluster, ranks))
    return ("group", kind, len(ranks), sizes, busbw, tree, tuple(algos),
            tuple(tuner.cluster.cap[link] for link in labels))


def _routes(tuner, plan, labels: dict[int, int]) -> tuple:
    """Per phase, per coflow of ``plan`` alone: its path and link loads with every link
    replaced by its order of first use (``labels``, filled), and the rest of its terms."""
    return tuple(tuple([(tuple([labels.setdefault(link, len(labels)) for link in it[0]]),
                         tuple([(labels.setdefault(link, len(labels)), m) for link, m in it[1]]),
                         *it[2:]) for it in ph]) for ph in tuner.single_flows(plan))


def _latencies(plan) -> tuple:
    return tuple(tuple(sorted(ph.latency_ns.items())) for ph in plan.phases)

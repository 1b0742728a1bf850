"""Why a what-if moves the iteration, or cannot: where each group's traffic reaches in the
fabric, and which part of the run each ``--set`` override can touch.

A topology override changes one resource (the leaf switches' up-links, the NICs, NVLink, the
GPU's peaks ...). Whether the run can feel it is a property of the placement: a communication
group whose members all sit under one leaf switch never crosses a leaf's up-links, so an
oversubscribed leaf level cannot change its time. The report says so next to the override, and
says when a change can move the iteration *either way*: the fabric's routes are assigned to
up-links by D-mod-K (OpenSM fat-tree routing: the destination's port modulo the up-link count)
or per-flow hashing (ECMP), so changing the up-link count moves flows between links, and two
flows that collided on one up-link before may not collide after (or the reverse).

The reach of a group: ``0`` one GPU, ``"node"`` inside a node (NVLink or PCIe), ``1`` under one
leaf switch, ``L`` ≥ 2 through switches of fabric level ``L`` (2 = spine, 3 = core). Pipeline
traffic goes between consecutive stages, the embedding group's between the first and the last
stage; a collective's members span their group, whose reach is that of its widest pair. At most
:data:`MAX_RANKS` ranks' groups are examined per kind (spread evenly over the ranks; said
when so).
"""

from __future__ import annotations

from sim.assumption import Assumption
from sim.comm import GroupKind
from sim.parallel.placement import Placement
from sim.topology.cluster import Cluster
from sim.topology.spec import Topology

MAX_RANKS = 1024
NODE = "node"
_LEVEL_WORDS = {1: "one leaf switch", 2: "the spine (level-2 switches)",
                3: "the core (level-3 switches)"}
_ORDER = (GroupKind.TP, GroupKind.CP, GroupKind.EP, GroupKind.ETP, GroupKind.PP,
          GroupKind.DP, GroupKind.DP_EP, GroupKind.EMB)


def _level_words(level: int | str) -> str:
    if level == NODE:
        return "inside a node"
    return ("under " if level == 1 else "through ") + _LEVEL_WORDS.get(
        level, f"level-{level} switches")


def _pairs(kind: GroupKind, group: tuple[int, ...]) -> list[tuple[int, int]]:
    if kind is GroupKind.PP:
        return list(zip(group, group[1:], strict=False))
    return [(group[0], g) for g in group[1:]]


def _pair_reach(cluster: Cluster, a: int, b: int) -> int | str:
    gpn = cluster.gpn
    na, nb = a // gpn, b // gpn
    if na == nb:
        return NODE
    if cluster.tree is None:
        return 1
    ka, kb = cluster.nic_pair(na, nb, cluster.nic_of(b))
    la, lb = cluster.leaf_of(na, ka), cluster.leaf_of(nb, kb)
    if not cluster.tree.joined(la, lb):
        return len(cluster.tree.spans)  # across rails of a rail-only fabric: its top
    return cluster.tree.level(la, lb)


def _rank(level: int | str | None) -> int:
    """Order of reaches: none (-1) < inside a node (0) < one leaf (1) < level 2 ..."""
    if level is None:
        return -1
    return 0 if level == NODE else int(level)


def reach(topo: Topology, placement: Placement, kinds) -> dict[GroupKind, tuple[int | str, bool]]:
    """For each group kind in ``kinds`` with more than one member: its farthest reach over
    its groups, and whether only a sample was examined (at most :data:`MAX_RANKS` pairs per
    kind: the groups of ranks spread evenly, members spread evenly within a group)."""
    cluster = Cluster(topo)
    world = placement.world_size
    out: dict[GroupKind, tuple[int | str, bool]] = {}
    for kind in _ORDER:
        if kind not in kinds:
            continue
        step = max(1, -(-world // MAX_RANKS))
        covered = bytearray(world)  # ranks whose group was examined
        far: int | str | None = None
        budget, sampled = MAX_RANKS, step > 1
        for r in range(0, world, step):
            if covered[r]:
                continue
            try:
                g = placement.group(kind, r)
            except ValueError:  # a middle stage is in no embedding group
                continue
            for m in g:
                covered[m] = 1
            if len(g) < 2:
                continue
            pairs = _pairs(kind, g)
            if len(pairs) > 64:  # members spread evenly
                pairs, sampled = pairs[:: -(-len(pairs) // 64)], True
            for a, b in pairs:
                lv = _pair_reach(cluster, a, b)
                if _rank(lv) > _rank(far):
                    far = lv
            budget -= len(pairs)
            if budget <= 0:
                sampled = True
                break
        if far is not None:
            out[kind] = (far, sampled)
    return out


def reach_line(topo: Topology, placement: Placement, kinds) -> Assumption | None:
    """The report line saying how far each group's traffic reaches (``None`` on one node)."""
    if topo.num_nodes < 2 or placement.world_size <= topo.gpus_per_node:
        return None
    return _reach_line(topo, reach(topo, placement, kinds))


def _reach_line(topo: Topology, rs) -> Assumption | None:
    if not rs:
        return None
    parts = [f"{k.value} {_level_words(lv)}" for k, (lv, _) in rs.items()]
    sampled = any(s for _, s in rs.values())
    routing = topo.fabric.routing if topo.fabric is not None else ""
    return Assumption(
        "traffic reach (farthest switch each group's traffic crosses"
        + (f", at most {MAX_RANKS} rank pairs per group kind examined" if sampled else "") + "): "
        + "; ".join(parts) + (f"; fabric routing {routing}" if routing else ""), "reach")


def report_lines(topo: Topology, placement: Placement, kinds,
                 compute_sources: dict[str, float] | None) -> list[Assumption]:
    """The reach line (multi-node runs) and one line per ``--set`` override, from one
    examination of the groups."""
    multi = topo.num_nodes > 1 and placement.world_size > topo.gpus_per_node
    wanted = multi or (topo.override_paths and topo.num_nodes > 1)
    rs = reach(topo, placement, kinds) if wanted else {}
    line = _reach_line(topo, rs) if multi else None
    return ([line] if line else []) + _override_lines(topo, rs, compute_sources)


def _override_lines(topo: Topology, rs, compute_sources) -> list[Assumption]:
    out = []
    for text, path in zip(topo.override_keys, topo.override_paths, strict=True):
        why = _why(path, topo, rs, compute_sources)
        if why:
            out.append(Assumption(f"effect of --set {text}: {why}", "what-if", departs=True))
    return out


def _crossing(rs, level: int) -> list[str]:
    return [k.value for k, (lv, _) in rs.items() if _rank(lv) >= level]


def _under(rs, level: int) -> str:
    """"TP inside a node, DP under one leaf switch" for the groups below ``level``."""
    return ", ".join(f"{k.value} {_level_words(lv)}" for k, (lv, _) in rs.items()
                     if _rank(lv) < level) or "no group"


def _why(path: tuple, topo: Topology, rs, sources) -> str:
    head = path[0]
    if head == "fabric" and len(path) >= 3 and path[1] == "levels" and isinstance(path[2], int):
        return _level_why(path, topo, rs)
    if head == "fabric" or (head == "node" and len(path) > 1 and path[1] == "nics"):
        what = ("the fabric's links" if head == "fabric" else "the NICs")
        crossing = _crossing(rs, 1)
        if not crossing:
            return (f"changes {what}, which no traffic of this run uses (every group stays "
                    "inside a node): it cannot change the iteration time")
        return f"changes {what}, which the traffic of {', '.join(crossing)} crosses"
    if head == "node" and len(path) > 1 and path[1] == "gpu" and len(path) > 2 \
            and path[2] in ("peak_tflops", "hbm_GBps") and sources:
        total = sum(sources.values())
        roof = sources.get("roofline", 0.0) / total if total > 0 else 0.0
        what = "peaks" if path[2] == "peak_tflops" else "HBM bandwidth"
        if "transferred_table" in sources:  # sim.models.compute_transfer rescales by them
            kinds = ("GEMMs and attention (at the GPU's measured fraction of its catalogue "
                     "peak where it has an achievable matmul rate)" if path[2] == "peak_tflops"
                     else "memory-bound kernels")
            return (f"the GPU's datasheet {what} rescale the times of its {kinds} taken from "
                    f"H100's transferred kernel table ({(1 - roof) * 100:.1f}% of compute, all "
                    f"kinds) and time the roofline's share ({roof * 100:.1f}%)")
        return (f"the GPU's datasheet {what} time only the roofline's share of compute "
                f"({roof * 100:.1f}%); the measured kernel table's times do not depend on them")
    return ""


def _level_why(path: tuple, topo: Topology, rs) -> str:
    i = path[2]
    field = path[3] if len(path) > 3 else ""
    up_from = i + 1  # levels[i] are the switches of level i + 1; their up-links lead above
    if field == "oversubscription" or field == "radix":
        crossing = _crossing(rs, up_from + 1)
        target = f"the up-links of level-{up_from} switches"
        if not crossing:
            below = _under(rs, up_from + 1)
            return (f"changes {target}, which no traffic of this run crosses ({below}): it "
                    "cannot change the iteration time")
        routing = topo.fabric.routing if topo.fabric is not None else ""
        how = {"dmodk": "by D-mod-K (the destination's port modulo the up-link count)",
               "ecmp": "by a per-flow hash (ECMP)"}.get(routing)
        tail = (f"; routes are spread over the up-links {how}, so changing their number moves "
                "flows between links: flows that shared an up-link may no longer (or the "
                "reverse), and the iteration can move either way") if how else ""
        return f"changes {target}, which the traffic of {', '.join(crossing)} crosses{tail}"
    crossing = _crossing(rs, up_from)
    if not crossing:
        return (f"changes level-{up_from} switches, which no traffic of this run reaches "
                f"({_under(rs, up_from)}): it cannot change the iteration time")
    return f"changes level-{up_from} switches, which the traffic of {', '.join(crossing)} reaches"

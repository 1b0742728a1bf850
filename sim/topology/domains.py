"""Which model-parallel groups of a layout leave an NVLink domain.

A topology node is one NVLink domain: a DGX node's 8 GPUs, or a whole NVL72 rack of 72 GPUs
(the 18 compute trays joined by the NVLink switches, which NCCL fuses into one node of its
graph with MNNVL: NCCL v2.30.7 src/graph/topo.cc, ncclTopoGetSystem, "MNNVL clique support").
simrun places rank r on GPU r (node r // GPUs per node; with ``--nproc-per-node K`` the nodes
are the job's view of K GPUs each, sim/topology/nproc.py), Megatron's order filling TP, then CP,
EP and DP, innermost: a TP, CP or EP group stays inside one domain when its ranks fall in one
node, which holds for every group exactly when the block of consecutive ranks it lies in
divides the node's GPU count (e.g. TP·EP = 8 or 72 on NVL72, not 64; with 64 processes per
rack, every power of two up to 64). A group that crosses a domain boundary runs over the NICs,
as NCCL would run it; the run says so (never silently).
"""

from __future__ import annotations

from sim.comm import GroupKind
from sim.parallel.placement import Placement

_KINDS = (GroupKind.TP, GroupKind.CP, GroupKind.EP)


def groups_leaving_domains(placement: Placement, gpus_per_node: int) -> dict[str, int]:
    """Group kind name → how many of its groups span more than one node (only kinds with some;
    each group counted once, by its lowest rank)."""
    out: dict[str, int] = {}
    if placement.world_size <= gpus_per_node:
        return out
    for kind in _KINDS:
        for g in _each_group(placement, kind):
            if min(g) // gpus_per_node != max(g) // gpus_per_node:
                out[kind.name] = out.get(kind.name, 0) + 1
    return out


def _each_group(placement: Placement, kind: GroupKind):
    """Every group of ``kind`` with two ranks or more, once (the groups partition the ranks;
    all of one kind have the same size), found from its lowest rank: one group computed per
    group rather than per rank. A kind of size 1 has nothing to span or spread."""
    if len(placement.group(kind, 0)) < 2:
        return
    covered = bytearray(placement.world_size)
    for r in range(placement.world_size):
        if covered[r]:
            continue
        g = placement.group(kind, r)
        for x in g:
            covered[x] = 1
        yield g


def describe(placement: Placement, gpus_per_node: int) -> str:
    """One report line when TP, CP or EP groups leave their NVLink domain, else ``""``."""
    bad = groups_leaving_domains(placement, gpus_per_node)
    if not bad:
        return ""
    what = ", ".join(f"{n} {k} group{'s' if n > 1 else ''}" for k, n in bad.items())
    return (f"NVLink domains: {what} span two nodes (NVLink domains of {gpus_per_node} GPUs): "
            "their collectives cross the NICs, as NCCL would run them; group sizes whose rank "
            f"blocks divide {gpus_per_node} keep every group inside one domain (as does "
            "--nproc-per-node with a multiple of the group's block)")


def images_differ(placement: Placement, gpus_per_node: int) -> bool:
    """Whether the copies a stage's representative stands for are not all its images: in one
    pipeline stage, two TP, CP, EP or DP groups spread differently over the nodes (e.g. EP
    groups of 16 on 72-GPU NVL72 racks, some inside a rack, one across two). Symmetric
    simulation needs the images (sim/network/copies.py)."""
    if placement.world_size <= gpus_per_node:
        return False
    for kind in _KINDS + (GroupKind.DP,):
        spread: dict[int, set[tuple[int, ...]]] = {}
        for g in _each_group(placement, kind):
            nodes: dict[int, int] = {}
            for x in g:
                nodes[x // gpus_per_node] = nodes.get(x // gpus_per_node, 0) + 1
            shapes = spread.setdefault(placement.coord(g[0]).pp, set())
            shapes.add(tuple(sorted(nodes.values())))
            if len(shapes) > 1:
                return True
    return False


def stages_straddle(placement: Placement, gpus_per_node: int) -> bool:
    """Whether some pipeline stage shares a node with another while the nodes do not hold whole
    stages (neither the stage's GPU count nor the node's divides the other): a stage then
    straddles two nodes, and a representative's copies in the other node are taken as its
    images though their DP traffic crosses different NICs."""
    if placement.world_size <= gpus_per_node:
        return False
    stage = placement.world_size // placement.pp
    return bool(stage % gpus_per_node and gpus_per_node % stage)


def straddle_dp_parts(placement: Placement, gpus_per_node: int
                      ) -> list[tuple[int, ...]] | None:
    """Data-parallel index intervals that make every simulated rank stand only for images when
    pipeline stages straddle the nodes (:func:`stages_straddle`): the ranks of one stage and
    DP index lie in one node, and an interval is cut wherever, in some stage, the next DP
    index lies in another node. Within an interval every rank of a stage shares its node
    with its stage-mates of that interval and its pipeline peers lie in the same node as
    theirs, so one representative per (stage, interval) sees the traffic of all of them.
    ``None`` when a stage's ranks of one DP index (its TP, CP and EP peers) span two nodes."""
    node_of: dict[tuple[int, int], int] = {}
    for r in range(placement.world_size):
        c = placement.coord(r)
        node = node_of.setdefault((c.pp, c.dp), r // gpus_per_node)
        if node != r // gpus_per_node:
            return None
    cuts = {d for (s, d) in node_of if d and node_of[(s, d)] != node_of[(s, d - 1)]}
    bounds = [0, *sorted(cuts), placement.dp]
    return [tuple(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)]

"""Collective algorithms as flows on the cluster: which GPU sends how many bytes to which.

A :class:`Plan` is a sequence of phases; a phase is a set of *coflows* plus a latency term per
protocol. A coflow is a pipelined ring, chain or tree channel: its edges move data in lockstep,
so the whole coflow runs at one rate (the rate of its slowest edge), and each edge carries
``coef × size_bytes`` payload bytes. Channels and phases are independent coflows.

Algorithms (n ranks on N nodes, g ranks per node, C channels = distinct NICs of the ranks):

- ``ring`` (AllReduce, AllGather, ReduceScatter): C rings, one per NIC (rail); ring ``c`` enters
  each node at the GPU next to NIC ``c``, visits the node's ranks and leaves through NIC ``c``
  (PXN), like NCCL's rings. Each edge carries ``2(n−1)/n·S/C`` (AllReduce) or ``(n−1)/n·S/C``.
- ``tree`` (AllReduce): per channel two binary trees over the nodes (NCCL's double binary
  tree, ``ncclGetDtree``: the second mirrored, or shifted for an odd count) with a chain inside
  each node; every edge carries ``S/(2C)`` up (reduce)
  and ``S/(2C)`` down (broadcast).
- ``hierarchical`` (AllReduce, AllGather, ReduceScatter; N > 1 and g > 1): intra-node
  ReduceScatter, then g parallel inter-node rings of ``S/g`` (GPU j of every node, over its own
  NIC), then intra-node AllGather; the phases run one after another.
- ``ring`` for Broadcast: the ring as a chain from the root, every edge carries ``S/C``.
- ``nvls`` (AllReduce inside one node whose NVSwitches declare ``nvls: true``; built in
  :mod:`sim.network.innet`, as are ``nvlstree``, NVLS in each node with a tree across nodes,
  and ``collnet``): NVLink SHARP.
  Each of h = min(n, 32) head GPUs reduces its 1/h of the buffer with a multimem load-reduce
  (the switch reads the n GPUs' S/h and adds them) and multicasts the result with a multimem
  store: a head sends S + S/h and receives S/h + S. As flows: one coflow over the ranks in a
  cycle whose edges carry ``(1 + 1/h) · S``. Payload efficiency NCCL's nvlsEfficiency;
  latency NCCL's 25 µs + two step overheads + twice the path through the switch.
- ``direct``: AllToAll = every ordered pair exchanges ``S/n`` (independent flows); send/recv =
  one flow of ``S``. ``hierarchical`` AllToAll: intra-node, then inter-node among the GPUs of
  the same local index. (Symmetric and isolated costs group the transfers into classes:
  :mod:`sim.network.alltoall`.)

Latency terms follow NCCL's model (:mod:`sim.network.nccl`) plus the physical latency of the
links of each step's path from the topology (ns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from sim.comm import CollKind
from sim.network import nccl
from sim.network.mesh import mesh_ring_edges, mesh_rotate
from sim.network.ncclgraph import dtree_edges, flows_per_rail
from sim.topology.cluster import Cluster

Edge = tuple[int, int, int]  # (src GPU, dst GPU, rail: NIC index for inter-node, -1 = dst's)

ALGORITHMS_FOR: dict[CollKind, tuple[str, ...]] = {
    CollKind.ALLREDUCE: ("ring", "tree", "hierarchical", "nvls", "nvlstree", "collnet"),
    CollKind.ALLGATHER: ("ring", "hierarchical"),
    CollKind.REDUCESCATTER: ("ring", "hierarchical"),
    CollKind.BROADCAST: ("ring",),
    CollKind.ALLTOALL: ("direct", "hierarchical"),
    CollKind.SENDRECV: ("direct",),
}
PROTOCOLS_FOR_DIRECT = ("LL", "Simple")
# What ``auto`` chooses among: the algorithms NCCL itself runs (hierarchical is not one of
# them; it is used only when asked for).
AUTO_ALGORITHMS = ("ring", "tree", "direct", "nvls", "nvlstree", "collnet")


@dataclass(frozen=True, slots=True)
class Coflow:
    edges: tuple[Edge, ...]
    coef: float
    channel: int


class PlanPhase:
    """Coflows of one phase and its latency term (protocol → ns, computed on first use from the
    phase's coflows: it needs every edge's route, which fusability checks and symmetric copies
    do not)."""

    __slots__ = ("coflows", "_latency_fn", "_latency")

    def __init__(self, coflows: tuple[Coflow, ...],
                 latency_fn: Callable[[tuple[Coflow, ...]], dict[str, int]]):
        self.coflows = coflows
        self._latency_fn = latency_fn
        self._latency: dict[str, int] | None = None

    @property
    def latency_ns(self) -> dict[str, int]:
        if self._latency is None:
            self._latency = self._latency_fn(self.coflows)
        return self._latency

    def with_coflows(self, coflows: tuple[Coflow, ...]) -> PlanPhase:
        """The same phase over other (e.g. representative) coflows."""
        return PlanPhase(coflows, self._latency_fn)


@dataclass(frozen=True)
class Plan:
    kind: CollKind
    algorithm: str
    ranks: tuple[int, ...]
    phases: tuple[PlanPhase, ...]
    # an all-to-all costed by classes of transfers (sim.network.alltoall.ClassPlan)
    by_class: ClassVar[bool] = False

    @property
    def protocols(self) -> tuple[str, ...]:
        direct = self.algorithm == "direct" or self.kind is CollKind.ALLTOALL
        if self.algorithm in ("nvls", "nvlstree", "collnet"):
            return ("Simple",)  # NVLS(Tree), CollNet run Simple only (tuning.cc:301, 338-339)
        return PROTOCOLS_FOR_DIRECT if direct else nccl.PROTOCOLS


def node_groups(cl: Cluster, ranks: tuple[int, ...]) -> list[list[int]]:
    """The group's GPUs split by node, nodes in order of first appearance."""
    out: dict[int, list[int]] = {}
    for r in ranks:
        out.setdefault(r // cl.gpn, []).append(r)
    return list(out.values())


def _rails(cl: Cluster, nodes: list[list[int]]) -> list[int]:
    return sorted({cl.nic_of(g) for g in nodes[0]})


def _rotate(cl: Cluster, gpus: list[int], rail: int, c: int) -> list[int]:
    """Order of a node's ranks in channel ``c`` (NIC ``rail``): enter at the GPU next to the NIC,
    leave from another GPU on the NIC's PCIe switch if there is one (else through PXN)."""
    if len(gpus) == 1:
        return list(gpus)
    entry = next((i for i, g in enumerate(gpus) if cl.nic_of(g) == rail), c % len(gpus))
    node = cl.topo.node
    if node.xgmi is not None and len(gpus) > 2:
        return mesh_rotate(cl, gpus, rail, c, entry)
    order = gpus[entry:] + gpus[:entry]
    if rail >= 0 and len(order) > 2:
        sw = node.nics.switch[rail]
        ex = next((g for g in order[1:] if node.pcie.gpu_switch[g % cl.gpn] == sw), None)
        if ex is not None:
            order.remove(ex)
            order.append(ex)
    return order


class _Lat:
    """Accumulates physical step latencies of a phase's edges (ns)."""

    def __init__(self, cl: Cluster, intra_type: str):
        self.cl = cl
        self.intra_type = intra_type
        self.intra_ns = 0
        self.inter_ns = 0

    def add(self, edges: tuple[Edge, ...], channel: int) -> None:
        cl = self.cl
        for s, d, rail in edges:
            ns = cl.path_latency_ns(cl.path(s, d, rail, channel))
            if s // cl.gpn == d // cl.gpn:
                self.intra_ns = max(self.intra_ns, ns)
            else:
                self.inter_ns = max(self.inter_ns, ns)

    def ring(self, steps: int, inter: int, allreduce: bool = False,
             protocols: tuple[str, ...] = nccl.PROTOCOLS) -> dict[str, int]:
        phys = (steps - inter) * self.intra_ns + inter * self.inter_ns
        return {p: round(nccl.ring_latency_us(p, steps, inter, self.intra_type,
                                              allreduce and inter > 0) * 1000) + phys
                for p in protocols}


def _ring_coflows(cl: Cluster, ranks: tuple[int, ...], coef_total: float,
                  chain_root: int | None = None) -> tuple[list[Coflow], int, int]:
    """Ring (or, with ``chain_root``, chain) coflows, one per channel; also returns the number
    of edges and of node-crossing edges of one channel. The edges depend only on the ranks, so
    they are built once per cluster and shared by every operation over the same group."""
    memo = cl.__dict__.setdefault("_ring_memo", {})
    key = (ranks, chain_root)
    got = memo.get(key)
    if got is None:
        got = memo[key] = _ring_edges(cl, ranks, chain_root)
    channels, n_edges, n_inter = got
    m = flows_per_rail(cl) if n_inter else 1
    return ([Coflow(edges, coef_total / (len(channels) * m), c * m + q)
             for c, edges in enumerate(channels) for q in range(m)], n_edges, n_inter)




def _ring_edges(cl: Cluster, ranks: tuple[int, ...], chain_root: int | None
                ) -> tuple[list[tuple[Edge, ...]], int, int]:
    nodes = node_groups(cl, ranks)
    if len(nodes) == 1 and cl.topo.node.xgmi is not None and len(ranks) > 2:
        return mesh_ring_edges(ranks, chain_root)
    if len(nodes) == 1:
        seqs = [list(ranks)]
        rails = [-1]
    else:
        rails = _rails(cl, nodes)
    out = []
    n_edges = n_inter = 0
    for c, k in enumerate(rails):
        if len(nodes) > 1:
            seqs = [_rotate(cl, g, k, c) for g in nodes]
        edges: list[Edge] = []
        for i, seq in enumerate(seqs):
            edges += [(seq[j], seq[j + 1], -1) for j in range(len(seq) - 1)]
            nxt = seqs[(i + 1) % len(seqs)][0]
            edges.append((seq[-1], nxt, k if len(seqs) > 1 else -1))
        if chain_root is not None:
            cut = next(i for i, e in enumerate(edges) if e[1] == chain_root)
            edges = edges[cut + 1:] + edges[:cut]
        n_edges = len(edges)
        n_inter = sum(1 for e in edges if e[0] // cl.gpn != e[1] // cl.gpn)
        out.append(tuple(edges))
    return out, n_edges, n_inter


def ring_plan(cl: Cluster, kind: CollKind, ranks: tuple[int, ...], intra: str) -> Plan:
    """Ring (chain for Broadcast). Latency: NCCL's ``nsteps`` = 2(n−1) for AllReduce, n−1
    otherwise, of which ``nInter`` = 2(N−1) resp. N−1 cross nodes."""
    n = len(ranks)
    n_nodes = len(node_groups(cl, ranks))
    ar = kind is CollKind.ALLREDUCE
    if kind is CollKind.BROADCAST:
        cfs, _, _ = _ring_coflows(cl, ranks, 1.0, chain_root=ranks[0])
    else:
        cfs, _, _ = _ring_coflows(cl, ranks, (2.0 if ar else 1.0) * (n - 1) / n)
    mult = 2 if ar else 1

    def latency(cfs) -> dict[str, int]:
        lat = _Lat(cl, intra)
        for cf in cfs:
            lat.add(cf.edges, cf.channel)
        return lat.ring(mult * (n - 1), mult * (n_nodes - 1), ar)

    return Plan(kind, "ring", ranks, (PlanPhase(tuple(cfs), latency),))


def tree_plan(cl: Cluster, ranks: tuple[int, ...], intra: str) -> Plan:
    nodes = node_groups(cl, ranks)
    n_nodes = len(nodes)
    rails = _rails(cl, nodes) if n_nodes > 1 else [-1]
    c_count = len(rails)
    cfs = []
    for c, k in enumerate(rails):
        seqs = [_rotate(cl, g, k, c) for g in nodes] if n_nodes > 1 else [list(ranks)]
        for t in (0, 1):
            edges: list[Edge] = []
            for seq in seqs:
                s = seq if t == 0 or n_nodes > 1 else seq[::-1]
                for j in range(len(s) - 1):
                    edges.append((s[j], s[j + 1], -1))
                    edges.append((s[j + 1], s[j], -1))
            for child, parent in dtree_edges(n_nodes, t):
                a, b = seqs[child][0], seqs[parent][0]
                edges.append((a, b, k))
                edges.append((b, a, k))
            m = flows_per_rail(cl) if n_nodes > 1 else 1
            cfs += [Coflow(tuple(edges), 1.0 / (2 * c_count * m), (2 * c + t) * m + q)
                    for q in range(m)]
    ppn = max(len(g) for g in nodes)

    def latency(cfs) -> dict[str, int]:
        lat = _Lat(cl, intra)
        for cf in cfs:
            lat.add(cf.edges, cf.channel)
        log2i = n_nodes.bit_length() - 1
        phys = 2 * ((ppn - 1) * lat.intra_ns + log2i * lat.inter_ns)
        return {p: round(nccl.tree_latency_us(p, ppn, n_nodes, intra) * 1000) + phys
                for p in nccl.PROTOCOLS}

    return Plan(CollKind.ALLREDUCE, "tree", ranks, (PlanPhase(tuple(cfs), latency),))


def hierarchical_plan(cl: Cluster, kind: CollKind, ranks: tuple[int, ...],
                      intra: str) -> Plan | None:
    nodes = node_groups(cl, ranks)
    n_nodes, g = len(nodes), len(nodes[0])
    if n_nodes == 1 or g == 1 or any(len(x) != g for x in nodes):
        return None

    def phase(cfs: tuple[Coflow, ...], steps: int, inter: int, ar: bool) -> PlanPhase:
        def latency(cfs) -> dict[str, int]:
            lat = _Lat(cl, intra)
            for cf in cfs:
                lat.add(cf.edges, cf.channel)
            return lat.ring(steps, inter, ar)

        return PlanPhase(cfs, latency)

    def intra_phase(coef: float) -> PlanPhase:
        cfs = tuple(Coflow(tuple((seq[j], seq[(j + 1) % g], -1) for j in range(g)), coef, 0)
                    for seq in nodes)
        return phase(cfs, g - 1, 0, False)

    def inter_phase(coef: float, ar: bool) -> PlanPhase:
        cfs = []
        for j in range(g):
            col = [x[j] for x in nodes]
            edges = tuple((col[i], col[(i + 1) % n_nodes], cl.nic_of(col[i]))
                          for i in range(n_nodes))
            cfs.append(Coflow(edges, coef, j))
        steps = (2 if ar else 1) * (n_nodes - 1)
        return phase(tuple(cfs), steps, steps, ar)

    fi, fn = (g - 1) / g, (n_nodes - 1) / n_nodes / g
    if kind is CollKind.ALLREDUCE:
        phases = (intra_phase(fi), inter_phase(2 * fn, True), intra_phase(fi))
    elif kind is CollKind.ALLGATHER:
        phases = (inter_phase(fn, False), intra_phase(fi))
    else:
        phases = (intra_phase(fi), inter_phase(fn, False))
    return Plan(kind, "hierarchical", ranks, phases)


def _direct_phase(cl: Cluster, kind: CollKind, groups: list[tuple[int, ...]], coef: float,
                  intra: str) -> PlanPhase:
    """Point-to-point coflows (every ordered pair of each group, ``coef × S`` each; send/recv:
    the pair) and their latency: NCCL's ring base latency plus one hop per peer."""
    if kind is CollKind.SENDRECV:
        cfs = [Coflow(((groups[0][0], groups[0][1], -1),), coef, 0)]
    else:
        cfs = [Coflow(((a, b, -1),), coef, 0) for g in groups for a in g for b in g if a != b]
    ranks = groups[0]

    def latency(cfs) -> dict[str, int]:
        lat = _Lat(cl, intra)
        for cf in cfs:
            lat.add(cf.edges, 0)
        multi = any(a // cl.gpn != ranks[0] // cl.gpn for a in ranks)
        hop = "net" if multi else intra
        phys = lat.inter_ns if multi else lat.intra_ns
        steps = 1 if kind is CollKind.SENDRECV else len(ranks) - 1
        return {p: round((nccl.BASE_LAT_US["ring"][p] + steps * nccl.HW_LAT_US[("ring", hop)][p])
                         * 1000) + steps * phys for p in PROTOCOLS_FOR_DIRECT}

    return PlanPhase(tuple(cfs), latency)


def direct_plan(cl: Cluster, kind: CollKind, ranks: tuple[int, ...], intra: str) -> Plan:
    coef = 1.0 if kind is CollKind.SENDRECV else 1.0 / len(ranks)
    return Plan(kind, "direct", ranks, (_direct_phase(cl, kind, [ranks], coef, intra),))


def hierarchical_alltoall_plan(cl: Cluster, ranks: tuple[int, ...], intra: str) -> Plan | None:
    """Two-dimensional all-to-all (DeepSpeed-MoE, Tutel): inside each node every pair exchanges
    ``S/g`` (GPU j collects its node's data for GPU j of every node), then the GPUs with the
    same local index exchange ``S/N`` per pair across the N nodes (the g all-to-alls at once)."""
    nodes = node_groups(cl, ranks)
    n_nodes, g = len(nodes), len(nodes[0])
    if n_nodes == 1 or g == 1 or any(len(x) != g for x in nodes):
        return None
    cols = [tuple(x[j] for x in nodes) for j in range(g)]
    return Plan(CollKind.ALLTOALL, "hierarchical", ranks, (
        _direct_phase(cl, CollKind.ALLTOALL, [tuple(x) for x in nodes], 1.0 / g, intra),
        _direct_phase(cl, CollKind.ALLTOALL, cols, 1.0 / n_nodes, intra)))


def build_plan(cl: Cluster, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
    """The plan of ``kind`` with ``algorithm`` over ``ranks`` (None if not applicable)."""
    if algorithm not in ALGORITHMS_FOR[kind]:
        return None
    # RCCL's xGMI links are NVLink-class (LINK_NVL, sim/topology/mesh.py)
    intra = "nvlink" if cl.topo.node.intra_kind != "pcie" else "pci"
    if algorithm == "ring":
        return ring_plan(cl, kind, ranks, intra)
    if algorithm == "tree":
        return tree_plan(cl, ranks, intra)
    if algorithm == "hierarchical":
        if kind is CollKind.ALLTOALL:
            return hierarchical_alltoall_plan(cl, ranks, intra)
        return hierarchical_plan(cl, kind, ranks, intra)
    return direct_plan(cl, kind, ranks, intra)

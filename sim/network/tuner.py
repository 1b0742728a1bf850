"""Algorithm choice and costing: which plan and NCCL protocol a collective runs, and how long it
takes when nothing else uses the network.

:class:`Tuner` is the flow model's counterpart of NCCL's tuner. For a request (kind, ranks,
size) it builds the candidate plans (:mod:`sim.network.plans`), costs each algorithm × protocol
alone on the cluster (the same max-min fair arithmetic as the contended run,
:func:`~sim.network.fluid.run_alone`, plus NCCL's latency model and the launch overhead) and
keeps the cheapest, unless the configuration fixes the algorithm or protocol. Everything is
cached: plans per (kind, algorithm, ranks), single-group link loads per plan, choices per
request shape. Times are integer nanoseconds, sizes bytes, rates bytes/ns (= GB/s).

NCCL's size-dependent behaviour lives here too (:mod:`sim.network.nccl`): for its own
algorithms (ring, tree) the number of channels NCCL runs at a message size caps the rate
(:meth:`Tuner.size_terms`), and the pipeline ramp adds the time to fill the pipeline with
chunks. Both are memoised per (plan, protocol, size).

New mechanisms that change *which* algorithm or protocol runs, or what one costs alone
(size-dependent tuning, all-to-all costing), belong here.
"""

from __future__ import annotations

import math

from sim.comm import CollKind
from sim.errors import UsageError
from sim.network import innet, nccl, ncclgraph
from sim.network.fluid import Flow, run_alone
from sim.network.plans import ALGORITHMS_FOR, AUTO_ALGORITHMS, Plan, node_groups
from sim.network.representative import representative_plan
from sim.network.shapes import choose_alike, node_shape
from sim.topology.cluster import Cluster
from sim.topology.spec import Topology

# One coflow of one phase, as the solver needs it: (path link ids, ((link id, multiplicity),
# ...), bytes per byte of request, rate cap in bytes/ns).
CoflowLoads = tuple[tuple[int, ...], tuple[tuple[int, int], ...], float, float]
# Per phase, per coflow.
PhaseLoads = tuple[tuple[CoflowLoads, ...], ...]
# What a message size adds to a plan × protocol: a rate cap per coflow (bytes/ns; inf: none)
# and the pipeline ramp per phase (ns).
SizeTerms = tuple[float, tuple[int, ...]]
_NO_TERMS: SizeTerms = (math.inf, ())
# NCCL's PCI_BW (src/graph/topo.h:25, GB/s): rings no faster than this run Simple on 256 threads.
PCI_BW_GBPS = 12.0


def algorithm_table(topology: Topology, algorithm: str | dict[str, str] | None
                    ) -> dict[CollKind, str]:
    """The configured algorithm per collective kind: the topology file's ``collectives``
    settings, overridden by ``algorithm`` (a name for every kind, or ``{op: name}`` with
    ``"*"`` for the default); ``"auto"`` = least predicted time."""
    coll = topology.collectives
    per_op = dict(coll.algorithm)
    default = coll.default_algorithm
    if isinstance(algorithm, str):
        default, per_op = algorithm, {}
    elif isinstance(algorithm, dict):
        default = algorithm.get("*", default)
        per_op.update({k: v for k, v in algorithm.items() if k != "*"})
    return {k: per_op.get(k.value.lower(), default) for k in CollKind}


class Tuner:
    """Plans, isolated costs and the algorithm / protocol choice of collectives on a cluster.

    ``algorithm``: per kind, a fixed algorithm or ``"auto"``; ``protocol``: a fixed NCCL
    protocol or ``"auto"``; ``launch_ns``: overhead added once per collective;
    ``nvls_enable``: NCCL_NVLS_ENABLE (False: NVLS and NVLSTree are never chosen by ``auto``);
    ``nccl_algo`` / ``nccl_proto``: NCCL_ALGO / NCCL_PROTO, per collective what ``auto`` may
    choose (:mod:`sim.network.nccl_env`; None: everything).
    """

    def __init__(self, cluster: Cluster, algorithm: dict[CollKind, str], protocol: str,
                 launch_ns: int, nvls_enable: bool = True):
        self.cluster = cluster
        self.nvls_enable = nvls_enable
        self.nvls_efficiency = nccl.nvls_efficiency(cluster.topo.node.gpu.name)
        self.ll_max_busbw = nccl.ll_max_busbw(cluster.topo.node.gpu.name)
        self.collnet_enable = False  # NCCL_COLLNET_ENABLE (NCCL's default: 0)
        self.nccl_algo: dict[CollKind, frozenset[str]] | None = None
        self.nccl_proto: dict[CollKind, frozenset[str]] | None = None
        self.algorithm = algorithm
        self.protocol = protocol
        self.launch_ns = launch_ns
        self._plans: dict[tuple, Plan | None] = {}
        self._single: dict[int, PhaseLoads] = {}
        self._memo: dict[tuple, dict] = {}
        self._choice: dict[tuple, tuple[Plan, str, int]] = {}
        self.alike: dict[tuple, tuple[str, str, int]] = {}  # (shape, size) -> choice
        self.shapes: dict[tuple, tuple | None] = {}  # (kind, ranks, pinned) -> shape_key
        self._pinned: frozenset[int] | None = None
        self._rplans: dict[tuple, Plan | None] = {}
        self._rep_edges: dict[tuple, tuple] = {}  # representative_plan's memo
        # all-to-alls costed as classes of transfers (sim/network/alltoall.py) where exact;
        # False: flow by flow (the reference the tests compare with)
        self.a2a_classes = True
        self._cplans: dict[tuple, Plan | None] = {}  # alltoall.ClassPlan (imported on use)
        self._classes_ok = True  # unbound (isolated costs) or symmetric simulation
        self._terms: dict[tuple, SizeTerms] = {}

    def pin(self, nodes: frozenset[int] | None, symmetric: bool) -> None:
        """Bound to a simulation: ``nodes`` of the simulated ranks in symmetric simulation,
        whose links representative plans keep (``None``: every rank is simulated, plans are
        not reduced and all-to-alls are not costed by classes)."""
        self._classes_ok = symmetric
        if nodes != self._pinned:
            self._pinned, self._rplans = nodes, {}

    @property
    def pinned(self) -> frozenset[int]:
        """The nodes of the simulated ranks in symmetric simulation (empty otherwise)."""
        return self._pinned or frozenset()

    @property
    def class_plans_used(self) -> bool:
        """Whether an all-to-all has been costed by classes (for the report)."""
        return any(p is not None for p in self._cplans.values())

    def _by_class(self) -> bool:
        """All-to-alls by class: isolated costs and symmetric simulation of alike nodes
        (per-rank simulation keeps every transfer: its other traffic need not be symmetric)."""
        from sim.network import alltoall

        return self.a2a_classes and alltoall.supported(self.cluster) and self._classes_ok

    # ---- plans ---------------------------------------------------------------------------
    def plan(self, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
        """The full plan of ``algorithm`` for ``kind`` over ``ranks`` (None: not applicable)."""
        key = (kind, algorithm, ranks)
        if key not in self._plans:
            self._plans[key] = innet.build(self.cluster, kind, algorithm, ranks)
        return self._plans[key]

    def rep_plan(self, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
        """The plan a simulated request runs on: in symmetric simulation, rings are reduced to
        their distinct edges (:func:`~sim.network.representative.representative_plan`);
        all-to-alls are costed by classes of transfers where that is exact."""
        if kind is CollKind.ALLTOALL and self._by_class():
            ckey = (algorithm, ranks)
            if ckey not in self._cplans:
                from sim.network import alltoall

                self._cplans[ckey] = alltoall.class_plan(self.cluster, algorithm, ranks)
            return self._cplans[ckey]
        plan = self.plan(kind, algorithm, ranks)
        if plan is None or self._pinned is None:
            return plan
        key = (kind, algorithm, ranks)
        got = self._rplans.get(key)
        if got is None:
            got = self._rplans[key] = representative_plan(self.cluster, plan, self._pinned,
                                                              self._rep_edges)
        return got

    def single_flows(self, plan: Plan) -> PhaseLoads:
        """Per phase, per coflow: the link loads of the group alone (no copies)."""
        got = self._single.get(id(plan))
        if got is not None:
            return got
        if plan.by_class:  # an alltoall.ClassPlan
            return plan.flows((), self.pinned)[0]  # type: ignore[attr-defined]
        cl = self.cluster
        maxrate = math.inf
        if plan.algorithm == "tree":
            # NCCL's tree kernels deliver at most algbw = 0.5 × busBw (tuning model): with C
            # channels × 2 trees, each edge carrying S/(2C), that is busBw / (4C) per coflow.
            maxrate = self.ring_busbw_GBps(plan.ranks) / (2 * len(plan.phases[0].coflows))
        phases = []
        for ph in plan.phases:
            items = []
            for cf in ph.coflows:
                loads: dict[int, int] = {}
                for s, d, rail in cf.edges:
                    for link in cl.path(s, d, rail, cf.channel):
                        loads[link] = loads.get(link, 0) + 1
                items.append((tuple(loads), tuple(loads.items()), cf.coef, maxrate))
            phases.append(tuple(items))
        got = tuple(phases)
        self._single[id(plan)] = got
        return got

    # ---- costs ---------------------------------------------------------------------------
    def alone_ns(self, plan: Plan, proto: str, size_bytes: int,
                 flags: list[int] | None = None, ceiling: float = math.inf) -> int:
        """Duration (ns) of ``plan`` with protocol ``proto`` moving ``size_bytes`` alone,
        latencies, pipeline ramp and launch overhead included. ``flags``: see
        :func:`~sim.network.fluid.run_alone` (class flows limited inexactly); ``ceiling``: a
        further rate cap per coflow, bytes/ns (:meth:`nccl_tree_ceiling`)."""
        eff = nccl.efficiency(plan.algorithm, proto, self.nvls_efficiency)
        cap, ramp = self.size_terms(plan, proto, size_bytes)
        cap = min(cap, ceiling)
        total = self.launch_ns
        for p_idx, ph in enumerate(self.single_flows(plan)):
            flows = [Flow(it[0], it[1], it[2] * size_bytes / eff, None, min(it[3], cap),
                          *it[4:]) for it in ph]
            memo = self._memo.setdefault((id(plan), p_idx, cap), {})
            total += run_alone(flows, self.cluster.cap, memo, flags) + \
                plan.phases[p_idx].latency_ns[proto] + (ramp[p_idx] if ramp else 0)
        return total

    # ---- NCCL's size-dependent behaviour -------------------------------------------------
    def channel_GBps(self, ranks: tuple[int, ...]) -> float:
        """NCCL's bandwidth per channel (GB/s) for a group: one NVLink (or PCIe link) inside a
        node, one NIC across nodes; the links' rates × efficiency from the topology (NCCL:
        SM80_NVLINK_BW 20, SM90_NVLINK_BW 20.6, NIC line rate; src/graph/topo.h)."""
        node = self.cluster.topo.node
        if len(node_groups(self.cluster, ranks)) > 1:
            return node.nics.bandwidth_gbps / 8 * node.nics.efficiency
        if node.nvlink is not None:
            return node.nvlink.link_bandwidth_GBps * node.nvlink.efficiency
        if node.xgmi is not None:  # one xGMI link (RCCL: 48 GB/s on MI300X)
            return node.xgmi.link_GBps
        return node.pcie.bandwidth_GBps * node.pcie.efficiency

    def size_terms(self, plan: Plan, proto: str, size_bytes: int) -> SizeTerms:
        """(rate cap per coflow in bytes/ns, pipeline ramp per phase in ns) of NCCL's ring and
        tree at ``size_bytes`` (other algorithms: none). NCCL's channels: C = ring busBw / the
        bandwidth of one channel; at the size, ``nc`` of them run (:func:`nccl.channels_for`),
        so the coflows together move at most nc/C of the ring's bus bandwidth. The ramp:
        :func:`nccl.ramp_ns` with chunks of at most NCCL's chunk size, for the tree and the
        broadcast chain; none for ring all-reduce / all-gather / reduce-scatter."""
        if plan.algorithm in ("nvls", "nvlstree"):  # 16 channels at every size: no cap
            return (math.inf, (innet.nvls_ramp_ns(self.cluster, plan, size_bytes,
                                                   self.nvls_efficiency),))
        if plan.algorithm not in ("ring", "tree"):
            return _NO_TERMS
        ncf = len(plan.phases[0].coflows)
        key = (plan.kind, plan.algorithm, plan.ranks, ncf, proto, size_bytes)
        got = self._terms.get(key)
        if got is not None:
            return got
        ranks = plan.ranks
        n = len(ranks)
        busbw = self.ring_busbw_GBps(ranks)  # wire bytes/ns
        ch_bw = self.channel_GBps(ranks)
        c_max = max(1, round(busbw / ch_bw))
        nc = nccl.channels_for(size_bytes, c_max, plan.algorithm, proto, n,
                               pci_only=busbw <= PCI_BW_GBPS)
        cap = math.inf
        if nc < c_max:
            share = 2 * ncf if plan.algorithm == "tree" else ncf
            cap = nc / c_max * busbw / share
        eff = nccl.efficiency(plan.algorithm, proto, self.nvls_efficiency)
        one_node = len(node_groups(self.cluster, ranks)) == 1
        if plan.algorithm == "ring" and proto == "LL" and one_node:
            # NCCL's single-node LL ceiling (:data:`nccl.LL_MAX_BUSBW_1NODE_GBPS`), payload
            # bus bandwidth → wire bytes/ns per coflow.
            cap = min(cap, self.ll_max_busbw / eff / ncf)
        rate = busbw / c_max * eff  # one channel's payload bytes/ns
        if plan.algorithm == "tree":
            nodes = node_groups(self.cluster, ranks)
            depth = nccl.tree_depth(max(len(g) for g in nodes), len(nodes))
            per_channel = size_bytes / (2 * nc)
        elif plan.kind is CollKind.BROADCAST:
            depth, per_channel = n - 1, size_bytes / nc
        else:
            # Ring all-reduce / all-gather / reduce-scatter: no pipeline to fill
            # (:data:`nccl.RING_RAMP_DEPTH`).
            depth, per_channel = nccl.RING_RAMP_DEPTH, size_bytes / (nc * n)
        bcast = plan.kind is CollKind.BROADCAST
        chunk = min(nccl.max_chunk_bytes(plan.algorithm, proto, bcast), per_channel)
        got = self._terms[key] = (cap, (nccl.ramp_ns(depth, chunk, rate),))
        return got

    def nccl_tree_ceiling(self, plan: Plan, proto: str) -> float:
        """Rate cap per coflow (wire bytes/ns) of NCCL's predicted tree bandwidth
        (:meth:`tree_busbw_GBps`): payload algbw 0.5 × busBw at the Simple protocol's factor,
        the protocol's efficiency relative to it as in :data:`nccl.EFFICIENCY`, for LL128 at
        most 0.5 × its per-channel ceiling; inf for other algorithms. Used for NCCL's choice
        only (:meth:`choose`)."""
        if plan.algorithm != "tree":
            return math.inf
        simple, ll128 = self.tree_busbw_GBps(plan.ranks)
        ncf = len(plan.phases[0].coflows)
        rate = 0.5 * simple / nccl.TREE_BUSBW_FACTOR / ncf
        if proto == "LL128":
            eff = nccl.efficiency("tree", proto)
            rate = min(rate, 0.5 * ll128 / eff / ncf)
        return rate

    def tree_busbw_GBps(self, ranks: tuple[int, ...]) -> tuple[float, float]:
        """NCCL's tree all-reduce bus bandwidth over ``ranks`` before the protocol factor and its
        LL128 ceiling, GB/s (:func:`nccl.tree_busbw_caps`, v2.30.7 tuning.cc:306, 330-336).
        Across nodes from NCCL's tree graph (:func:`ncclgraph.tree_graph`: one channel per NIC
        the node's ranks reach, duplicated as NCCL does; bwIntra on ≤ 2 nodes, bwInter on more;
        NCCL's TREE pattern, × 0.85, with one rank per node, search.cc:1133). On one node the
        ring's C channels of busBw / C each (NCCL's single-node tree graph is not derived).
        GPUs without NCCL's tables (RCCL): 0.92 × the ring's busBw, no per-channel ceiling."""
        key = ("tree", node_shape(self, ranks) or ranks, self._pinned)
        got = self._memo.get(key)
        if got is not None:
            return got["caps"]
        ring = self.ring_busbw_GBps(ranks)
        fam = nccl.nvidia_family(self.cluster.topo.node.gpu.name)
        nodes = node_groups(self.cluster, ranks)
        ch_bw = self.channel_GBps(ranks)
        if fam is None:
            caps = (nccl.TREE_BUSBW_FACTOR * ring, math.inf)
        elif len(nodes) == 1:
            channels = max(1, round(ring / ch_bw))
            caps = nccl.tree_busbw_caps(fam, 1, channels, ring / channels)
        else:
            node = self.cluster.topo.node
            ppn = max(len(g) for g in nodes)
            intra = (math.inf if ppn == 1 else node.nvlink.gpu_bandwidth_GBps
                     if node.nvlink is not None else node.pcie.bandwidth_GBps
                     * node.pcie.efficiency)
            rails = len({self.cluster.nic_of(g) for g in nodes[0]})
            channels, bw_intra, bw_inter = ncclgraph.tree_graph(
                nccl.COMPUTE_CAPABILITY[fam], rails, ch_bw, intra)
            caps = nccl.tree_busbw_caps(fam, len(nodes), channels,
                                        bw_intra if len(nodes) <= 2 else bw_inter, ppn == 1)
        self._memo[key] = {"caps": caps}
        return caps

    def ring_busbw_GBps(self, ranks: tuple[int, ...]) -> float:
        """Bus bandwidth (GB/s) of a large ring all-reduce over ``ranks`` alone: NCCL's busBw."""
        key = ("busbw", node_shape(self, ranks) or ranks, self._pinned)
        got = self._memo.get(key)
        if got is None:
            plan = self.rep_plan(CollKind.ALLREDUCE, "ring", ranks)
            assert plan is not None
            size = 1 << 30
            ph = self.single_flows(plan)[0]
            flows = [Flow(path, loads, coef * size) for path, loads, coef, _ in ph]
            t = max(run_alone(flows, self.cluster.cap), 1)  # ns; never 0 (a free ring)
            n = len(ranks)
            got = self._memo[key] = {"busbw": size / t * 2 * (n - 1) / n}
        return got["busbw"]

    def candidates(self, kind: CollKind, ranks: tuple[int, ...]) -> tuple[str, ...]:
        """The algorithms considered for ``kind`` over ``ranks``: the configured one where it
        applies, else every algorithm NCCL's tuner would pick from."""
        fixed = self.algorithm[kind]
        if fixed != "auto" and fixed in ALGORITHMS_FOR[kind] and \
                self.rep_plan(kind, fixed, ranks) is not None:
            return (fixed,)
        allowed = self.nccl_algo.get(kind) if self.nccl_algo is not None else None
        return tuple(a for a in ALGORITHMS_FOR[kind] if a in AUTO_ALGORITHMS
                     and (a not in ("nvls", "nvlstree") or self.nvls_enable)
                     and (a != "collnet" or self.collnet_enable)
                     and (allowed is None or a in allowed))

    def choose(self, kind: CollKind, ranks: tuple[int, ...], size_bytes: int
               ) -> tuple[Plan, str, int]:
        """(plan, protocol, isolated ns): NCCL-like least predicted time, or the fixed choice.
        The prediction is the model's time, the tree's under NCCL's tree ceilings as well
        (:meth:`nccl_tree_ceiling`); the returned time is the model's."""
        key = (kind, ranks, size_bytes, self._pinned)
        got = self._choice.get(key)
        if got is not None:
            return got
        # requests costed alike share one choice (sim/network/shapes.py)
        got = self._choice[key] = choose_alike(self, kind, ranks, size_bytes, self._choose)
        return got

    def _choose(self, kind: CollKind, ranks: tuple[int, ...], size_bytes: int
                ) -> tuple[Plan, str, int]:
        best: tuple[Plan, str, int] | None = None
        best_rank = 0
        for a in self.candidates(kind, ranks):
            plan = self.rep_plan(kind, a, ranks)
            if plan is None:
                continue
            protos = plan.protocols
            if self.protocol != "auto" and self.protocol in protos:
                protos = (self.protocol,)
            elif self.nccl_proto is not None and kind in self.nccl_proto:
                protos = tuple(p for p in protos if p in self.nccl_proto[kind])
            for p in protos:
                flags: list[int] = []
                t = self.alone_ns(plan, p, size_bytes, flags)
                if any(flags):  # classes not exact here: every transfer on its own
                    plan = self.plan(kind, a, ranks)
                    assert plan is not None
                    t = self.alone_ns(plan, p, size_bytes)
                # NCCL's choice sees its own tree ceilings (tuning heuristics, not the
                # kernels' rate: :meth:`tree_busbw_GBps`); the time stays the model's
                ceiling = self.nccl_tree_ceiling(plan, p)
                rank = t if ceiling == math.inf else \
                    self.alone_ns(plan, p, size_bytes, ceiling=ceiling)
                if plan.algorithm == "nvlstree":  # and its NVLSTree ceiling, likewise
                    algbw = innet.nvlstree_nccl_algbw(self.cluster, plan,
                                                      self.channel_GBps(ranks))
                    fixed = self.launch_ns + plan.phases[0].latency_ns[p] + \
                        self.size_terms(plan, p, size_bytes)[1][0]
                    rank = max(rank, fixed + math.ceil(size_bytes / algbw))
                if best is None or rank < best_rank:
                    best, best_rank = (plan, p, t), rank
        if best is None:  # NCCL: "No algorithm/protocol available"
            raise UsageError(f"no enabled algorithm and protocol runs {kind.value.lower()} over "
                             f"{len(ranks)} ranks", field="--nccl-algo/--nccl-proto")
        return best

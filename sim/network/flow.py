"""The contention-aware network model: collectives as coflows on the cluster graph.

:class:`FlowNetwork` turns every communication into the coflows of its algorithm
(:mod:`sim.network.plans`), routes their edges on the cluster (:mod:`sim.topology.cluster`),
and lets all active coflows share links with max-min fairness (:mod:`sim.network.fluid`),
recomputed inside the SimPy loop when flows start or end. A communication finishes when its
last coflow has finished and its latency term (NCCL's model + physical link latency + launch
overhead) has elapsed. Phases of hierarchical algorithms run one after another.

Symmetric mode (``bind(..., symmetric=True)``): each request stands for its identical copies
(:mod:`sim.network.symmetry`). The network routes the copies once per request class and keeps,
for each representative coflow, the multiplicity with which all copies load every link on the
representatives' paths (e.g. 8 copies through one NIC load it 8×; copies in other racks load
their own, equivalent links, which are not tracked). Per-event work is therefore proportional
to the representative's coflows, not to the number of GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy
from simpy.events import NORMAL

from sim.comm import CollKind, GroupKind
from sim.network import alltoall, nccl
from sim.network.base import CommRequest, CommResult, Network
from sim.network.fluid import Flow, FluidSolver, run_alone
from sim.network.plans import (
    ALGORITHMS_FOR,
    AUTO_ALGORITHMS,
    Plan,
    build_plan,
    representative_plan,
)
from sim.network.symmetry import copies, link_scopes, local_copies
from sim.placement import Placement
from sim.rank_classes import RankClasses
from sim.topology.cluster import Cluster
from sim.topology.spec import Topology

_NONE = CommResult(0, "none", 0.0)


@dataclass
class CommStats:
    """Totals for one process-group kind over the started (non-fused) communications."""

    count: int = 0
    size_bytes: int = 0
    actual_ns: int = 0
    isolated_ns: int = 0

    @property
    def slowdown(self) -> float:
        """Achieved time / isolated time (1.0 = no contention)."""
        return self.actual_ns / self.isolated_ns if self.isolated_ns else 1.0

    @property
    def contention_ns(self) -> int:
        return self.actual_ns - self.isolated_ns


class _Op:
    __slots__ = ("req", "plan", "proto", "agg", "event", "t0", "phase", "pending", "iso",
                 "bneck")

    def __init__(self, req, plan, proto, agg, event, t0, iso):
        self.req, self.plan, self.proto, self.agg = req, plan, proto, agg
        self.event, self.t0, self.iso = event, t0, iso
        self.phase = 0
        self.pending = 0
        self.bneck = -1  # the link that limited the flow that finished last


class FlowNetwork(Network):
    """Max-min fair flow-level network on a topology (see module docstring)."""

    def __init__(self, topology: Topology, *, algorithm: str | dict[str, str] | None = None,
                 routing: str = "ecmp", protocol: str | None = None):
        self.topology = topology
        self.cluster = Cluster(topology, routing)
        self.perturbed = self.cluster.perturbed
        coll = topology.collectives
        per_op = dict(coll.algorithm)
        default = coll.default_algorithm
        if isinstance(algorithm, str):
            default, per_op = algorithm, {}
        elif isinstance(algorithm, dict):
            default = algorithm.get("*", default)
            per_op.update({k: v for k, v in algorithm.items() if k != "*"})
        self.algorithm: dict[CollKind, str] = {
            k: per_op.get(k.value.lower(), default) for k in CollKind}
        self.protocol = protocol if protocol is not None else coll.protocol
        self.launch_ns = coll.launch_overhead_ns
        self._plans: dict[tuple, Plan | None] = {}
        self._single: dict[int, tuple] = {}
        self._memo: dict[tuple, dict] = {}
        self._choice: dict[tuple, tuple[Plan, str, int]] = {}
        self.placement: Placement | None = None
        self.symmetric = False
        self._pinned: frozenset[int] | None = None  # nodes of the simulated ranks (symmetric)
        self._rplans: dict[tuple, Plan | None] = {}
        # per (placement layout, symmetric): aggregated flows and fusability, kept across binds
        self._layouts: dict[tuple, tuple[dict, dict]] = {}
        self._agg: dict[tuple, tuple] = {}
        self._fusable: dict[GroupKind, bool] = {}
        # all-to-alls costed as classes of transfers (sim/network/alltoall.py) where exact;
        # False: flow by flow (the reference the tests compare with)
        self.a2a_classes = True
        self._cplans: dict[tuple, alltoall.ClassPlan | None] = {}
        self._reset()

    # ---- binding -------------------------------------------------------------------------
    def _reset(self) -> None:
        self.solver = FluidSolver(self.cluster.cap)
        self._wakes: set[int] = set()
        self.stats: dict[GroupKind, CommStats] = {}
        # link id -> [ns communications took beyond their isolated time, how many], charged
        # to the link that limited them when they finished
        self.link_delay: dict[int, list[int]] = {}
        self.chosen: dict[tuple, int] = {}
        self.ops_started = 0

    def bind(self, env: simpy.Environment, placement: Placement, classes: RankClasses | bool,
             traffic: dict[GroupKind, frozenset[CollKind]] | None = None) -> None:
        super().bind(env, placement, classes, traffic)
        self._reset()
        pl = placement
        classes = self.classes
        gpn = self.cluster.gpn
        pinned = frozenset(r // gpn for r in classes.reps) if classes.reduced else None
        if pinned != self._pinned:
            self._pinned, self._rplans = pinned, {}
        tkey = None if traffic is None else tuple(sorted(
            (g.value, tuple(sorted(k.value for k in ks))) for g, ks in traffic.items()))
        ckey = (tuple(classes.tp_parts), tuple(classes.dp_parts))
        key = (pl.tp, pl.dp, pl.pp, pl.ep, pl.order_string, ckey, tkey)
        self._agg, self._fusable = self._layouts.setdefault(key, ({}, {}))

    # ---- plans and choices ---------------------------------------------------------------
    def rep_plan(self, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
        """The plan a simulated request runs on: in symmetric simulation, rings are reduced to
        their distinct edges (:func:`~sim.network.plans.representative_plan`)."""
        if kind is CollKind.ALLTOALL and self._by_class():
            key = (algorithm, ranks)
            if key not in self._cplans:
                self._cplans[key] = alltoall.class_plan(self.cluster, algorithm, ranks)
            return self._cplans[key]
        plan = self.plan(kind, algorithm, ranks)
        if plan is None or self._pinned is None:
            return plan
        key = (kind, algorithm, ranks)
        got = self._rplans.get(key)
        if got is None:
            got = self._rplans[key] = representative_plan(self.cluster, plan, self._pinned)
        return got

    def _by_class(self) -> bool:
        """All-to-alls by class: isolated costs and symmetric simulation of alike nodes (per-rank
        simulation keeps every transfer: its other traffic need not be symmetric)."""
        return self.a2a_classes and alltoall.supported(self.cluster) and (
            self.placement is None or self.symmetric)

    def plan(self, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
        key = (kind, algorithm, ranks)
        if key not in self._plans:
            self._plans[key] = build_plan(self.cluster, kind, algorithm, ranks)
        return self._plans[key]

    def _single_flows(self, plan: Plan) -> tuple:
        """Per phase, per coflow: (path, loads) of the group alone."""
        got = self._single.get(id(plan))
        if got is not None:
            return got
        if isinstance(plan, alltoall.ClassPlan):
            return plan.flows((), self._pinned or frozenset())[0]
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

    def _aggregated_flows(self, plan: Plan, req: CommRequest) -> tuple[tuple, tuple]:
        """(flows, latencies) per phase: like :meth:`_single_flows`, with the loads of every
        symmetric copy on the representative's links (symmetric mode). Latencies are the
        representative's own (its copies are assumed to be its images; where a copy's path
        is longer, e.g. it crosses a leaf boundary the representative does not, only
        per-rank simulation sees the difference)."""
        akey = (id(plan), req.group)
        got = self._agg.get(akey)
        if got is not None:
            return got
        single = self._single_flows(plan)
        groups = [req.ranks]
        scope_nodes: dict = {}
        if self.symmetric:
            tracked_all = {link for ph in single for path, _, _, _ in ph for link in path}
            scopes = link_scopes(self.cluster, tracked_all)
            scope_nodes = scopes[0]
            groups = local_copies(self.placement, req.kind, req.group, req.ranks, self.cluster,
                                  scopes, self.classes)
        if len(groups) == 1:
            got = self._agg[akey] = (single, tuple(ph.latency_ns for ph in plan.phases))
            return got
        cl = self.cluster
        ids = cl.ids
        phases = []
        extra: dict[int, int] = {}  # loads of copies counted in bulk (send/recv away from scope)
        if req.kind is CollKind.SENDRECV:  # a copy is one edge: no plan to build
            gpn = cl.gpn
            near, away = [], []
            for g in groups[1:]:
                (near if g[0] // gpn in scope_nodes or g[1] // gpn in scope_nodes
                 else away).append(g)
            counted = self._count_away(away, single[0][0][0]) if away else {}
            if counted is None:
                near, counted = groups[1:], {}
            extra = counted
            copy_edges = [(((((g[0], g[1], -1),), 0),),) for g in near]
        else:
            copy_edges = []
            for g in groups[1:]:
                cp = self.plan(req.kind, plan.algorithm, g)
                assert cp is not None
                copy_edges.append(tuple(tuple((cf.edges, cf.channel) for cf in cph.coflows)
                                        for cph in cp.phases))
        for p_idx, ph in enumerate(single):
            tracked = {link for path, _, _, _ in ph for link in path}
            loads = [dict(lds) for _, lds, _, _ in ph]
            for link, n in extra.items():
                if n:
                    loads[0][link] = loads[0].get(link, 0) + n
            for cp in copy_edges:
                cph = cp[p_idx]
                assert len(cph) == len(ph), "copies must have the same plan shape"
                for i, (edges, channel) in enumerate(cph):
                    li = loads[i]
                    for s, d, rail in edges:
                        # away from the scope nodes only fabric links can be tracked ones
                        away = s // cl.gpn not in scope_nodes and d // cl.gpn not in scope_nodes
                        route = cl.fabric_names(s, d, rail, channel) if away else \
                            cl.path_names(s, d, rail, channel)
                        for name in route:
                            link = ids.get(name)
                            if link in tracked:
                                li[link] = li.get(link, 0) + 1
            phases.append(tuple((path, tuple(ld.items()), coef, cap)
                                for (path, _, coef, cap), ld in zip(ph, loads, strict=True)))
        lats = tuple(ph.latency_ns for ph in plan.phases)
        got = self._agg[akey] = (tuple(phases), lats)
        return got

    def _class_flows(self, plan: alltoall.ClassPlan, req: CommRequest) -> tuple[tuple, tuple]:
        """Like :meth:`_aggregated_flows` for an all-to-all by classes: the classes of the
        request's transfers and, in symmetric mode, those of all its copies."""
        others = copies(self.placement, req.kind, req.group, req.ranks)[1:] \
            if self.symmetric else []
        return plan.flows(tuple(others), self._pinned or frozenset())

    @property
    def class_plans_used(self) -> bool:
        """Whether an all-to-all has been costed by classes (for the report)."""
        return any(p is not None for p in self._cplans.values())

    def _count_away(self, pairs: list[tuple[int, ...]], path: tuple[int, ...]
                    ) -> dict[int, int] | None:
        """Send/recv copies with no endpoint near the representative: how many cross each
        fabric link of its ``path`` (vectorised routing; None if not available)."""
        import numpy as np

        cl = self.cluster
        wanted = {cl.names[i]: i for i in path if cl.names[i][0][0] in ("sw", "up", "down")}
        if not wanted:
            return {}
        src = np.fromiter((g[0] for g in pairs), dtype=np.int64, count=len(pairs))
        dst = np.fromiter((g[1] for g in pairs), dtype=np.int64, count=len(pairs))
        return cl.count_fabric_links(src, dst, 0, wanted)

    def _alone_ns(self, plan: Plan, proto: str, size_bytes: int,
                  flags: list[int] | None = None) -> int:
        eff = nccl.efficiency(plan.algorithm, proto)
        total = self.launch_ns
        for p_idx, ph in enumerate(self._single_flows(plan)):
            flows = [Flow(it[0], it[1], it[2] * size_bytes / eff, None, it[3], *it[4:])
                     for it in ph]
            memo = self._memo.setdefault((id(plan), p_idx), {})
            total += run_alone(flows, self.cluster.cap, memo, flags) + \
                plan.phases[p_idx].latency_ns[proto]
        return total

    def ring_busbw_GBps(self, ranks: tuple[int, ...]) -> float:
        """Bus bandwidth (GB/s) of a large ring all-reduce over ``ranks`` alone: NCCL's busBw."""
        key = ("busbw", ranks, self._pinned)
        got = self._memo.get(key)
        if got is None:
            plan = self.rep_plan(CollKind.ALLREDUCE, "ring", ranks)
            assert plan is not None
            size = 1 << 30
            ph = self._single_flows(plan)[0]
            flows = [Flow(path, loads, coef * size) for path, loads, coef, _ in ph]
            t = max(run_alone(flows, self.cluster.cap), 1)  # ns; never 0 (a free ring)
            n = len(ranks)
            got = self._memo[key] = {"busbw": size / t * 2 * (n - 1) / n}
        return got["busbw"]

    def choose(self, kind: CollKind, ranks: tuple[int, ...], size_bytes: int
               ) -> tuple[Plan, str, int]:
        """(plan, protocol, isolated ns): NCCL-like least predicted time, or the fixed choice."""
        key = (kind, ranks, size_bytes, self._pinned)
        got = self._choice.get(key)
        if got is not None:
            return got
        fixed = self.algorithm[kind]
        algos = tuple(a for a in ALGORITHMS_FOR[kind] if a in AUTO_ALGORITHMS)
        if fixed != "auto" and fixed in ALGORITHMS_FOR[kind] and \
                self.rep_plan(kind, fixed, ranks) is not None:
            algos = (fixed,)
        best: tuple[Plan, str, int] | None = None
        for a in algos:
            plan = self.rep_plan(kind, a, ranks)
            if plan is None:
                continue
            protos = plan.protocols
            if self.protocol != "auto" and self.protocol in protos:
                protos = (self.protocol,)
            for p in protos:
                flags: list[int] = []
                t = self._alone_ns(plan, p, size_bytes, flags)
                if any(flags):  # classes not exact here: every transfer on its own
                    plan = self.plan(kind, a, ranks)
                    assert plan is not None
                    t = self._alone_ns(plan, p, size_bytes)
                if best is None or t < best[2]:
                    best = (plan, p, t)
        assert best is not None
        self._choice[key] = best
        return best

    # ---- Network interface ---------------------------------------------------------------
    @staticmethod
    def _trivial(req: CommRequest) -> bool:
        r = req.ranks
        return req.size_bytes <= 0 or len(r) <= 1 or (req.kind is CollKind.SENDRECV
                                                      and r[0] == r[-1])

    def isolated(self, req: CommRequest) -> CommResult:
        if self._trivial(req):
            return _NONE
        plan, proto, t = self.choose(req.kind, req.ranks, req.size_bytes)
        return CommResult(t, f"{plan.algorithm}/{proto}", req.size_bytes / t)

    def start(self, req: CommRequest) -> simpy.Event:
        env = self.env
        assert env is not None, "bind() first"
        if self._trivial(req):
            return env.timeout(0, value=_NONE)
        plan, proto, iso = self.choose(req.kind, req.ranks, req.size_bytes)
        if isinstance(plan, alltoall.ClassPlan):
            agg = self._class_flows(plan, req)
        else:
            agg = self._aggregated_flows(plan, req)
        op = _Op(req, plan, proto, agg, env.event(), env.now, iso)
        self.ops_started += 1
        self._start_phase(op)
        return op.event

    def _start_phase(self, op: _Op, _ev: object = None) -> None:
        now = self.env.now  # type: ignore[union-attr]
        wire = op.req.size_bytes / nccl.efficiency(op.plan.algorithm, op.proto)
        flows = [Flow(it[0], it[1], it[2] * wire, op, it[3], *it[4:])
                 for it in op.agg[0][op.phase]]
        if isinstance(op.plan, alltoall.ClassPlan):
            self.solver.strict_flows = True
        op.pending = len(flows)
        self.solver.add(flows, now)
        self._schedule_wake()

    def _schedule_wake(self) -> None:
        t = self.solver.next_time()
        if t is None or t in self._wakes:
            return
        env = self.env
        assert env is not None
        self._wakes.add(t)
        ev = env.timeout(t - env.now)
        ev.callbacks.append(self._on_wake)

    def _on_wake(self, _ev: object) -> None:
        env = self.env
        assert env is not None
        now = env.now
        self._wakes.discard(now)
        done = self.solver.pop_due(now)
        if done:
            self.solver.remove(done, now)
            for f in done:
                op: _Op = f.owner  # type: ignore[assignment]
                op.pending -= 1
                if op.pending == 0:
                    op.bneck = f.bneck
                    self._phase_done(op, now)
        self._schedule_wake()

    def _phase_done(self, op: _Op, now: int) -> None:
        env = self.env
        assert env is not None
        lat = op.agg[1][op.phase][op.proto]
        op.phase += 1
        if op.phase < len(op.plan.phases):
            env.timeout(lat).callbacks.append(lambda ev, op=op: self._start_phase(op))
            return
        end = now + lat + self.launch_ns
        dur = end - op.t0
        res = CommResult(dur, f"{op.plan.algorithm}/{op.proto}",
                         op.req.size_bytes / dur if dur else 0.0)
        st = self.stats.get(op.req.group)
        if st is None:
            st = self.stats[op.req.group] = CommStats()
        st.count += 1
        st.size_bytes += op.req.size_bytes
        st.actual_ns += dur
        st.isolated_ns += op.iso
        if dur > op.iso and op.bneck >= 0:  # slower than alone: charge the limiting link
            d = self.link_delay.setdefault(op.bneck, [0, 0])
            d[0] += dur - op.iso
            d[1] += 1
        key = (op.req.kind, op.req.group, len(op.req.ranks), res.algorithm)
        self.chosen[key] = self.chosen.get(key, 0) + 1
        ev = op.event
        ev._ok = True  # what simpy's Timeout does: succeed after a delay
        ev._value = res
        env.schedule(ev, NORMAL, end - now)

    # ---- event economy -------------------------------------------------------------------
    def fusable(self, group: GroupKind) -> bool:
        got = self._fusable.get(group)
        if got is None:
            from sim.network.fusion import is_fusable

            got = self._fusable[group] = is_fusable(self, group)
        return got

    # ---- reporting -----------------------------------------------------------------------
    def contention_stats(self) -> dict[GroupKind, CommStats]:
        """Per group kind: started communications, achieved vs isolated time (ns)."""
        return {k: self.stats[k] for k in sorted(self.stats, key=lambda g: g.value)}

    def describe(self) -> list[str]:
        from sim.network.describe import describe_network

        return describe_network(self)

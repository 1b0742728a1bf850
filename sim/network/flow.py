"""The contention-aware network model: collectives as coflows on the cluster graph.

:class:`FlowNetwork` turns every communication into the coflows of its algorithm
(:mod:`sim.network.plans`), routes their edges on the cluster (:mod:`sim.topology.cluster`),
and lets all active coflows share links with max-min fairness (:mod:`sim.network.fluid`),
recomputed inside the SimPy loop when flows start or end. A communication finishes when its
last coflow has finished and its latency term (NCCL's model + physical link latency + launch
overhead) has elapsed. Phases of hierarchical algorithms run one after another.

It composes three parts, each with one concern:

- :class:`~sim.network.tuner.Tuner`: plans, isolated costs, algorithm and protocol choice;
- :class:`~sim.network.copies.CopyLoads`: the link loads of a request's symmetric copies;
- :class:`~sim.network.driver.FlowDriver`: the SimPy driver of one run (created by ``bind``).

Symmetric mode (``bind(..., symmetric=True)``): each request stands for its identical copies
(:mod:`sim.network.symmetry`). The network routes the copies once per request class and keeps,
for each representative coflow, the multiplicity with which all copies load every link on the
representatives' paths (e.g. 8 copies through one NIC load it 8×; copies in other racks load
their own, equivalent links, which are not tracked). Per-event work is therefore proportional
to the representative's coflows, not to the number of GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from sim.comm import CollKind, GroupKind
from sim.network import nccl
from sim.network.base import CommRequest, CommResult, Network
from sim.network.copies import CopyLoads
from sim.network.describe import describe_network
from sim.network.driver import CommStats, FlowDriver, Prepared
from sim.network.fluid import FluidSolver
from sim.network.fusion import FusionQuery, is_fusable
from sim.network.plans import Plan
from sim.network.shapes import choice_of
from sim.network.tuner import PCI_BW_GBPS, Tuner, algorithm_table
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses
from sim.topology.cluster import Cluster
from sim.topology.spec import Topology

_NONE = CommResult(0, "none", 0.0)
_UNSEEN = object()


@dataclass
class _LayoutMemo:
    """What stays valid across runs with the same layout: copy loads and fusability."""

    flows: dict = field(default_factory=dict)
    fusable: dict[GroupKind, bool] = field(default_factory=dict)


def _curve_use(topology: Topology):
    """A use counter when the topology carries calibrated time curves, else ``None``."""
    if not topology.collectives.time_curves:
        return None
    from sim.network.curves import CurveUse

    return CurveUse()


class FlowNetwork(Network):
    """Max-min fair flow-level network on a topology (see module docstring)."""

    def __init__(self, topology: Topology, *, algorithm: str | dict[str, str] | None = None,
                 routing: str | None = None, protocol: str | None = None, nvls_enable: bool = True):
        self.topology = topology
        self.cluster = Cluster(topology, routing)
        self.perturbed = self.cluster.perturbed
        coll = topology.collectives
        self.tuner = Tuner(self.cluster, algorithm_table(topology, algorithm),
                           protocol if protocol is not None else coll.protocol,
                           coll.launch_overhead_ns, nvls_enable)
        self.copies = CopyLoads(self.tuner)
        self.placement: Placement | None = None
        self.symmetric = False
        self._layouts: dict[tuple, _LayoutMemo] = {}
        self._memo = _LayoutMemo()
        # request (ranks, bytes, kind, group) -> what starting it needs, for the bound run
        self._started: dict[tuple, Prepared | None] = {}
        self._channels: dict[tuple, int] = {}  # kernel_channels, for the bound run
        self.curve_use = _curve_use(topology)  # calibrated requests, for the report
        # until bind(): a driver on an environment of its own (empty statistics)
        self.driver = FlowDriver(simpy.Environment(), self.cluster.cap, self.launch_ns,
                                 self.tuner.nvls_efficiency)

    # ---- configuration (read API) --------------------------------------------------------
    @property
    def algorithm(self) -> dict[CollKind, str]:
        """The configured algorithm per kind (``"auto"``: least predicted time)."""
        return self.tuner.algorithm

    @property
    def protocol(self) -> str:
        return self.tuner.protocol

    @property
    def launch_ns(self) -> int:
        return self.tuner.launch_ns

    # ---- binding -------------------------------------------------------------------------
    def bind(self, env: simpy.Environment, placement: Placement, classes: RankClasses | bool,
             traffic: dict[GroupKind, frozenset[CollKind]] | None = None) -> None:
        super().bind(env, placement, classes, traffic)
        classes = self.classes
        assert classes is not None
        self.driver = FlowDriver(env, self.cluster.cap, self.launch_ns, self.tuner.nvls_efficiency)
        self._started = {}
        self._channels = {}
        self.curve_use = _curve_use(self.topology)
        gpn = self.cluster.gpn
        self.tuner.pin(frozenset(r // gpn for r in classes.reps) if classes.reduced else None,
                       classes.reduced)
        tkey = None if traffic is None else tuple(sorted(
            (g.value, tuple(sorted(k.value for k in ks))) for g, ks in traffic.items()))
        ckey = (tuple(classes.tp_parts), tuple(classes.dp_parts))
        pl = placement
        key = (pl.tp, pl.dp, pl.pp, pl.ep, pl.order_string, ckey, tkey)
        self._memo = self._layouts.setdefault(key, _LayoutMemo())
        self.copies.bind(placement, classes, self._memo.flows)

    # ---- plans and choices (see Tuner) ---------------------------------------------------
    @property
    def a2a_classes(self) -> bool:
        """All-to-alls costed by classes of transfers where exact (False: flow by flow)."""
        return self.tuner.a2a_classes

    @a2a_classes.setter
    def a2a_classes(self, value: bool) -> None:
        self.tuner.a2a_classes = value
        self._started = {}
        self._channels = {}

    def rep_plan(self, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
        """The plan a simulated request runs on (see :meth:`Tuner.rep_plan`)."""
        return self.tuner.rep_plan(kind, algorithm, ranks)

    def choose(self, kind: CollKind, ranks: tuple[int, ...], size_bytes: int
               ) -> tuple[Plan, str, int]:
        """(plan, protocol, isolated ns) of a request (see :meth:`Tuner.choose`)."""
        return self.tuner.choose(kind, ranks, size_bytes)

    # ---- Network interface ---------------------------------------------------------------
    @staticmethod
    def _trivial(req: CommRequest) -> bool:
        r = req.ranks
        return req.size_bytes <= 0 or len(r) <= 1 or (req.kind is CollKind.SENDRECV
                                                      and r[0] == r[-1])

    def isolated(self, req: CommRequest) -> CommResult:
        if self._trivial(req):
            return _NONE
        algorithm, proto, t = choice_of(self.tuner, req.kind, req.ranks, req.size_bytes)
        k = self._curve_factor(req, count=False)
        if k != 1.0:
            t = self.launch_ns + round((t - self.launch_ns) * k)
        return CommResult(t, f"{algorithm}/{proto}", req.size_bytes / t)

    def start(self, req: CommRequest) -> simpy.Event:
        key = (req.ranks, req.size_bytes, req.kind, req.group)
        prep = self._started.get(key, _UNSEEN)
        if prep is _UNSEEN:
            prep = self._started[key] = self._prepare(req)
        if prep is None:
            env = self.env
            assert env is not None, "bind() first"
            return env.timeout(0, value=_NONE)
        return self.driver.launch(req, prep)

    def _prepare(self, req: CommRequest) -> Prepared | None:
        """What :meth:`start` needs of ``req`` (None: trivial). Every part is a pure function of
        the request in the bound layout (the tuner's choice, the copies' loads and the size
        terms are memoised on it too), so :meth:`start` keeps it for the run."""
        assert self.env is not None, "bind() first"
        if self._trivial(req):
            return None
        plan, proto, iso = self.tuner.choose(req.kind, req.ranks, req.size_bytes)
        flows = self.copies.flows(plan, req.kind, req.group, req.ranks)
        terms = self.tuner.size_terms(plan, proto, req.size_bytes)
        return self.driver.prepare(req, plan, proto, flows, iso, terms,
                                   self._curve_factor(req, count=True))

    def _curve_factor(self, req: CommRequest, count: bool) -> float:
        """The calibrated time factor of ``req`` (1 without a curve for its collective;
        :mod:`sim.network.curves`); ``count``: record its use for the report."""
        curves = self.topology.collectives.time_curves
        if not curves:
            return 1.0
        from sim.network.curves import curve_for

        op = req.kind.value.lower()
        c = curve_for(curves, op, len(req.ranks))
        if c is None:
            return 1.0
        k, outside = c.factor(req.size_bytes)
        if count:
            self.curve_use.add(op, outside, c.ranks != len(req.ranks))
        return k

    def kernel_channels(self, req: CommRequest, max_channels: int) -> int:
        """CTAs of ``req``'s NCCL kernel: the algorithm and protocol the tuner chose for it, at
        its size (:func:`sim.network.nccl.kernel_channels`)."""
        key = (req.ranks, req.size_bytes, req.kind, max_channels)
        got = self._channels.get(key)
        if got is None:
            got = self._channels[key] = self._kernel_channels(req, max_channels)
        return got

    def _kernel_channels(self, req: CommRequest, max_channels: int) -> int:
        if self._trivial(req):
            return 0
        algorithm, proto, _ = choice_of(self.tuner, req.kind, req.ranks, req.size_bytes)
        pci = algorithm == "ring" and self.tuner.ring_busbw_GBps(req.ranks) <= PCI_BW_GBPS
        return nccl.kernel_channels(req.size_bytes, max_channels, algorithm, proto,
                                    len(req.ranks), pci)

    # ---- event economy -------------------------------------------------------------------
    def fusable(self, group: GroupKind) -> bool:
        known = self._memo.fusable
        got = known.get(group)
        if got is None:
            assert self.placement is not None and self.classes is not None, "bind() first"
            query = FusionQuery(self.tuner, self.placement, self.classes, self.traffic)
            got = known[group] = is_fusable(query, group)
        return got

    def fusable_groups(self) -> dict[GroupKind, bool]:
        """The group kinds whose fusability has been asked for in this layout, and the answers."""
        return dict(self._memo.fusable)

    # ---- reporting (read API) ------------------------------------------------------------
    @property
    def solver(self) -> FluidSolver:
        """The fluid solver of the current run (active flows, completion heap)."""
        return self.driver.solver

    @property
    def stats(self) -> dict[GroupKind, CommStats]:
        return self.driver.stats

    @property
    def link_delay(self) -> dict[int, list[int]]:
        """Link id → [ns communications took beyond their isolated time, how many], charged
        to the link that limited them when they finished."""
        return self.driver.link_delay

    @property
    def chosen(self) -> dict[tuple, int]:
        """(kind, group, group size, "algorithm/protocol") → communications that ran so."""
        return self.driver.chosen

    @property
    def ops_started(self) -> int:
        return self.driver.ops_started

    def contention_stats(self) -> dict[GroupKind, CommStats]:
        """Per group kind: started communications, achieved vs isolated time (ns)."""
        return {k: self.stats[k] for k in sorted(self.stats, key=lambda g: g.value)}

    def counters(self) -> dict[tuple, int]:
        out = self.driver.counters()
        if self.curve_use is not None:
            out.update({("curve", op, i): x for op, c in self.curve_use.counts.items()
                        for i, x in enumerate(c)})
        return out

    def set_counters(self, values: dict[tuple, int]) -> None:
        self.driver.set_counters(values)
        for key, x in values.items():
            if key[0] == "curve" and self.curve_use is not None:
                self.curve_use.counts[key[1]][key[2]] = x

    def describe(self) -> list[str]:
        out = describe_network(self.tuner, self.driver, self.symmetric, self.fusable_groups())
        if self.curve_use is not None:
            out += self.curve_use.lines(self.topology.collectives.time_curves)
        return out

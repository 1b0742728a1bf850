"""The SimPy driver of the flow model: running communications as fluid flows in simulated time.

:class:`FlowDriver` owns the :class:`~sim.network.fluid.FluidSolver` of one run. A started
communication (:class:`Transfer`) adds the coflows of its current phase to the solver; the
driver keeps one SimPy timeout at the next time a flow completes (never two for the same
time), advances the solver there, and moves a transfer to its next phase after the phase's
latency, or completes it: its :class:`Completion` event succeeds at the end of its last
latency and launch overhead with a :class:`~sim.network.base.CommResult`. Per group kind it
counts achieved against isolated time (:class:`CommStats`), charges time lost to contention to
the link that limited the transfer, and counts which algorithms ran.

Mechanisms that change how transfers progress in time once started (compute/communication
overlap, kernel interference with compute, …) belong here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy
from simpy.events import NORMAL

from sim.comm import GroupKind
from sim.network import nccl
from sim.network.base import CommRequest, CommResult
from sim.network.fluid import Flow, FluidSolver
from sim.network.plans import Plan


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


class Completion(simpy.Event):
    """The event a started communication returns: it succeeds once, after a delay that is only
    known when the communication's last flow has finished.

    SimPy's :class:`simpy.Timeout` fixes its delay when created; this event type fixes it
    later, with the same single heap entry (so the event count and order are those of a
    timeout created at that moment). It sets the outcome the way SimPy's own event types do
    (``Timeout.__init__``), which simpy 4 defines (pinned in pyproject.toml).
    """

    def succeed_after(self, delay_ns: int, value: CommResult) -> None:
        """Succeed with ``value`` ``delay_ns`` from now. Call it once (the driver does, when
        the communication's last phase has finished; not checked, it is on the hot path)."""
        self._ok = True
        self._value = value
        self.env.schedule(self, NORMAL, delay_ns)


class Prepared:
    """What starting one request needs, worked out once per distinct request of a run
    (:meth:`FlowDriver.prepare`): the plan and protocol, the isolated time, per phase the
    arguments of its flows (bytes and rate cap at this size) and its latency table, NCCL's
    pipeline ramp, the result's algorithm label and the key it is counted under."""

    __slots__ = ("plan", "proto", "iso", "phases", "lats", "ramp", "algorithm", "chosen",
                 "is_class", "nphases", "results")

    def __init__(self, plan: Plan, proto: str, iso: int, phases: tuple, lats: tuple,
                 ramp: tuple, chosen: tuple):
        self.plan, self.proto, self.iso = plan, proto, iso
        self.phases, self.lats, self.ramp = phases, lats, ramp
        self.algorithm = f"{plan.algorithm}/{proto}"
        self.chosen = chosen
        self.is_class = plan.by_class
        self.nphases = len(plan.phases)
        self.results: dict[int, CommResult] = {}  # duration ns -> the result


class Transfer:
    """One started communication: its request, its :class:`Prepared` start, and progress.
    ``bneck``: the link that limited the flow that finished last."""

    __slots__ = ("req", "prep", "event", "t0", "phase", "pending", "bneck")

    def __init__(self, req: CommRequest, prep: Prepared, event: Completion, t0: int):
        self.req, self.prep = req, prep
        self.event, self.t0 = event, t0
        self.phase = 0
        self.pending = 0
        self.bneck = -1


class FlowDriver:
    """Runs :class:`Transfer` s on a :class:`FluidSolver` inside a SimPy environment.

    Read API for reports: :attr:`stats` (per group kind), :attr:`link_delay` (link id →
    [ns beyond isolated time, communications] charged to the link that limited them),
    :attr:`chosen` ((kind, group, group size, "algorithm/protocol") → count) and
    :attr:`ops_started`.
    """

    def __init__(self, env: simpy.Environment, cap: list[float], launch_ns: int,
                 nvls_efficiency: float = nccl.NVLS_EFFICIENCY):
        self.env = env
        self.nvls_efficiency = nvls_efficiency  # NCCL's NVLS factor of the GPUs
        self.launch_ns = launch_ns
        self.solver = FluidSolver(cap)
        self._wakes: set[int] = set()
        self.stats: dict[GroupKind, CommStats] = {}
        self.link_delay: dict[int, list[int]] = {}
        self.chosen: dict[tuple, int] = {}
        self.ops_started = 0
        self._wake = self._on_wake  # bound once: a callback of every wake-up

    def start(self, req: CommRequest, plan: Plan, proto: str, flows: tuple, iso_ns: int,
              terms: tuple = (math.inf, ())) -> Completion:
        """Start ``req`` on ``plan`` with ``proto``; ``flows``: (per-phase coflow loads,
        per-phase latencies) from :class:`~sim.network.copies.CopyLoads`; ``iso_ns``: its
        isolated duration (for the contention statistics); ``terms``: NCCL's rate cap per
        coflow and pipeline ramp per phase at this size (:meth:`Tuner.size_terms`)."""
        return self.launch(req, self.prepare(req, plan, proto, flows, iso_ns, terms))

    def prepare(self, req: CommRequest, plan: Plan, proto: str, flows: tuple, iso_ns: int,
                terms: tuple = (math.inf, ()), scale: float = 1.0) -> Prepared:
        """The :class:`Prepared` start of ``req`` (arguments as :meth:`start`'s): each flow's
        bytes are the coflow's coefficient × the wire bytes (payload / NCCL's protocol
        efficiency), its rate cap the lesser of the coflow's and NCCL's size cap. ``scale``: a
        calibrated factor on every part of its time but the launch (wire bytes, latencies,
        ramp; :mod:`sim.network.curves`)."""
        wire = req.size_bytes / nccl.efficiency(plan.algorithm, proto, self.nvls_efficiency)
        cap, ramp = terms
        loads, lats = flows
        if scale != 1.0:
            wire *= scale
            lats = tuple({p: round(v * scale) for p, v in lat.items()} for lat in lats)
            ramp = tuple(round(r * scale) for r in ramp)
            iso_ns = self.launch_ns + round((iso_ns - self.launch_ns) * scale)
        phases = tuple(tuple((it[0], it[1], it[2] * wire, min(it[3], cap), it[4:], [])
                             for it in ph) for ph in loads)
        chosen = (req.kind, req.group, len(req.ranks), f"{plan.algorithm}/{proto}")
        return Prepared(plan, proto, iso_ns, phases, lats, ramp, chosen)

    def launch(self, req: CommRequest, prep: Prepared) -> Completion:
        """Start ``req`` as ``prep`` says; its :class:`Completion` event."""
        env = self.env
        op = Transfer(req, prep, Completion(env), env.now)
        self.ops_started += 1
        self._start_phase(op)
        return op.event

    def _start_phase(self, op: Transfer) -> None:
        flows = []
        for path, loads, rem, maxrate, rest, solo in op.prep.phases[op.phase]:
            f = Flow(path, loads, rem, op, maxrate, *rest)
            f.solo = solo  # the same coflow at the same size: its rate alone is the same
            flows.append(f)
        if op.prep.is_class:
            self.solver.strict_flows = True
        op.pending = len(flows)
        self.solver.add(flows, self.env.now)
        self._schedule_wake()

    def _schedule_wake(self) -> None:
        t = self.solver.next_time()
        if t is None or t in self._wakes:
            return
        env = self.env
        self._wakes.add(t)
        env.timeout(t - env.now).callbacks.append(self._wake)

    def _on_wake(self, _ev: simpy.Event) -> None:
        now = self.env.now
        self._wakes.discard(now)
        done = self.solver.pop_due(now)
        if done:
            self.solver.remove(done, now)
            for f in done:
                op: Transfer = f.owner  # type: ignore[assignment]
                op.pending -= 1
                if op.pending == 0:
                    op.bneck = f.bneck
                    self._phase_done(op, now)
        self._schedule_wake()

    def _phase_done(self, op: Transfer, now: int) -> None:
        prep = op.prep
        lat = prep.lats[op.phase][prep.proto] + (prep.ramp[op.phase] if prep.ramp else 0)
        op.phase += 1
        if op.phase < prep.nphases:
            self.env.timeout(lat).callbacks.append(lambda _ev, op=op: self._start_phase(op))
            return
        end = now + lat + self.launch_ns
        dur = end - op.t0
        req = op.req
        res = prep.results.get(dur)
        if res is None:  # results are immutable: one per duration
            res = prep.results[dur] = CommResult(dur, prep.algorithm,
                                                 req.size_bytes / dur if dur else 0.0)
        st = self.stats.get(req.group)
        if st is None:
            st = self.stats[req.group] = CommStats()
        st.count += 1
        st.size_bytes += req.size_bytes
        st.actual_ns += dur
        st.isolated_ns += prep.iso
        if dur > prep.iso and op.bneck >= 0:  # slower than alone: charge the limiting link
            d = self.link_delay.setdefault(op.bneck, [0, 0])
            d[0] += dur - prep.iso
            d[1] += 1
        key = prep.chosen
        self.chosen[key] = self.chosen.get(key, 0) + 1
        op.event.succeed_after(end - now, res)

    def counters(self) -> dict[tuple, int]:
        """The report's counts (:meth:`sim.network.base.Network.counters`): communications
        by choice, per-group totals, per-link delays, inexact fills."""
        out: dict[tuple, int] = {("chosen", k): v for k, v in self.chosen.items()}
        for g, st in self.stats.items():
            out.update({("stats", g, f): getattr(st, f) for f in _STATS})
        for link, pair in self.link_delay.items():
            out.update({("delay", link, i): x for i, x in enumerate(pair)})
        out[("inexact",)] = self.solver.inexact
        return out

    def set_counters(self, values: dict[tuple, int]) -> None:
        """Set the counts of :meth:`counters` (the keys it gave)."""
        for key, x in values.items():
            if key[0] == "chosen":
                self.chosen[key[1]] = x
            elif key[0] == "stats":
                setattr(self.stats[key[1]], key[2], x)
            elif key[0] == "delay":
                self.link_delay[key[1]][key[2]] = x
            elif key[0] == "inexact":
                self.solver.inexact = x


_STATS = ("count", "size_bytes", "actual_ns", "isolated_ns")

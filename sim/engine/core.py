"""The SimPy event loop that times a pipeline-parallel iteration.

Each simulated rank is one SimPy process walking its schedule (``sim.pipeline.schedules``): per
forward/backward op it waits for the activation/gradient from the neighbouring virtual stage,
runs the chunk's compiled steps (``sim.engine.segments``), issues the stage's delayed gradient
syncs due after that backward, and sends its output on. Blocking (TP/EP) collectives stall the
compute stream; non-blocking (DP) ones run FIFO on a per-group stream beside later compute;
the optimizer waits for them. A collective starts when every *simulated* member of its group
has reached it (symmetric mode: the unsimulated copies are the network's business).

Pipeline sends are asynchronous: the transfer starts when the sender finishes the op, the
receiver blocks until the data has arrived. Time a receiver waits before the sender has even
started is pipeline bubble; the rest is exposed PP communication.
"""

from __future__ import annotations

import simpy

from sim.comm import Comm, GroupKind
from sim.engine.clock import Clock, relaxed_gc
from sim.engine.comms import GROUP_NAME, AsyncStreams, PipeTransfers, Rendezvous, comm_args
from sim.engine.critical import critical_path
from sim.engine.host import HostDispatch
from sim.engine.interference import ComputeSharing, Interference, overlap_ctas
from sim.engine.jitter import Jitter
from sim.engine.ledger import Groups, Ledger
from sim.engine.paired import detach_blocking, detached
from sim.engine.result import RankStats, SimResult, add_layer_totals
from sim.engine.segments import (
    BACKWARD,
    AsyncIssue,
    Await,
    AwaitParams,
    Blocking,
    Compiled,
    Fused,
    OverlapBlocking,
    blocking_comms,
    compile_pass,
    scaled,
)
from sim.engine.steps import add_layer_comm, blocking, fused_shared, fused_spans, overlap_blocking
from sim.errors import SimulationStalled
from sim.network.base import CommRequest, Network
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses
from sim.pipeline.ops import ScheduleOp, op_passes
from sim.pipeline.schedules import schedule_table
from sim.program.pipeline import PipelineProgram, Task, TaskKind
from sim.program.workload import PhaseKind


def simulate(
    program: PipelineProgram,
    network: Network,
    *,
    placement: Placement | None = None,
    per_rank: bool = False,
    classes: RankClasses | None = None,
    compute_scale: dict[int, float] | None = None,
    record_spans: bool = False,
    fuse: bool = True,
    until_ns: int | None = None,
    interference: Interference | None = None,
    jitter: Jitter | None = None,
    host_dispatch_ns: int = 0,
) -> SimResult:
    """Simulate one iteration of ``program`` on ``network``.

    ``per_rank``: simulate every rank (default: one representative per pipeline stage, which
    is exact on uniform clusters). ``classes``: an explicit partition of the ranks into
    classes with one simulated representative each (overrides ``per_rank``; see
    :mod:`sim.parallel.rank_classes`). ``compute_scale``: rank → factor on its compute times (a
    slow GPU: 1.5). ``record_spans``: keep every interval for traces and plots. ``fuse``: merge
    compute with fusable blocking comms into single timeouts; done only where every simulated member
    of the group runs in lockstep (one simulated member, or a uniform per-rank run).
    ``until_ns``: stop the clock there (watchdog); ranks still busy then are reported as
    stalled. ``interference``: asynchronous collectives take SMs from the compute beside them
    (:mod:`sim.engine.interference`; ``None``: overlap is free). ``jitter``: seeded random
    factors on kernel and transfer times (:mod:`sim.engine.jitter`); the simulated members of a
    group then drift apart, so every collective is a rendezvous (pass per-rank classes to let
    each synchronisation wait for its slowest member). ``host_dispatch_ns``: the CPU's time to
    issue one kernel (:mod:`sim.engine.host`; 0: the host is never the bottleneck).
    """
    if placement is None:
        placement = Placement(program.tp, program.dp, program.pp, program.ep, cp=program.cp,
                              etp=program.etp)
    if classes is None:
        classes = (RankClasses.per_rank if per_rank else RankClasses.symmetric)(placement)
    with relaxed_gc():
        return _Engine(program, network, placement, classes, compute_scale or {}, record_spans,
                       fuse, interference, jitter, host_dispatch_ns).run(until_ns)


class _Engine:
    """One run: the rank processes, composed with the communication parts (rendezvous,
    asynchronous streams, pipeline transfers) that share its :class:`Ledger`."""

    def __init__(self, prog: PipelineProgram, net: Network, pl: Placement,
                 classes: RankClasses, scale: dict[int, float], record: bool,
                 fuse: bool, interference: Interference | None = None,
                 jitter: Jitter | None = None, host_ns: int = 0) -> None:
        if (pl.tp, pl.dp, pl.pp) != (prog.tp, prog.dp, prog.pp):
            raise ValueError("placement does not match the program's layout")
        if classes.placement is not pl:
            raise ValueError("the rank classes belong to another placement")
        self.env = env = Clock()
        self.prog, self.net, self.pl, self.fuse = prog, net, pl, fuse
        self.classes = classes
        self.per_rank = classes.label == "per-rank"
        self.scale = {r: f for r, f in scale.items() if f != 1.0}
        self.p, self.v, self.m = prog.pp, prog.vpp, prog.microbatches
        self.stype = prog.schedule_type
        self.split = self.stype.splits_backward  # B = input-gradient pass, W separate
        self.sched = schedule_table(prog.schedule, self.p, self.m, self.v,
                                    prog.microbatch_group_size, prog.ep_a2a_overlap)
        self.sim_ranks = list(classes.reps)
        sim_set = frozenset(self.sim_ranks)
        for r in self.scale:
            if r not in sim_set:
                raise ValueError(f"rank {r} has its own speed but is not simulated")
        net.bind(env, pl, classes, traffic=prog.traffic())
        # simulated members of a group run in lockstep only when the run is uniform
        plain = classes.is_per_rank or (len(classes.tp_parts) == len(classes.dp_parts) == 1)
        self.jitter = jitter
        self.lockstep = plain and not self.scale and not net.perturbed and jitter is None
        self.ledger = Ledger({r: RankStats(r, pl.coord(r).pp, classes.size_of(r))
                              for r in self.sim_ranks}, record)
        self.groups = Groups(pl, sim_set)
        self.rdv = Rendezvous(env, net, self.groups, self.ledger, jitter)
        self.sharing = ComputeSharing(env, interference) if interference is not None else None
        self.host = (HostDispatch(env, self.ledger, host_ns, prog.cuda_graphs) if host_ns > 0
                     else None)
        self.streams = AsyncStreams(env, self.rdv, self.ledger, self.sharing)
        # (rank, bucket) -> the issued parameter all-gather and its group
        self.param_gathers: dict[tuple[int, int], tuple[simpy.Process, GroupKind]] = {}
        self.pipe = PipeTransfers(env, net, self.ledger, prog.pp_bytes, jitter)
        self._iso: dict[tuple, tuple[int, str] | None] = {}
        self._compiled: dict[tuple, Compiled] = {}
        self._passes: dict[tuple, Compiled] = {}  # shared by ranks whose passes compile alike
        self._blocking: dict[tuple, tuple[Comm, ...]] = {}
        self._costs: dict[tuple, tuple] = {}  # a pass's fused costs and CTAs, by its groups
        self._all_compiled: list[tuple[int, Compiled]] = []
        self._xfers: dict[tuple, tuple[int, int] | None] = {}  # see transfer()
        self._ops: dict[int, list] = {}  # stage -> op_passes of its schedule

    # ---- helpers -------------------------------------------------------------------------
    def fused_cost(self, rank: int, comm: Comm) -> tuple[int, str] | None:
        if not self.fuse or not self.net.fusable(comm.group):
            return None
        groups = self.groups
        members = groups.of(comm.group, rank)
        if not self.lockstep and groups.sim_count(members) > 1 and (
                comm.group is not GroupKind.TP or self.jitter is not None
                or len({self.scale.get(r, 1.0) for r in members if r in groups.simulated}) > 1):
            return None  # members may drift apart: a rendezvous at every collective instead
        key = (comm.kind, comm.group, members, comm.size_bytes)
        if key not in self._iso:
            res = self.net.isolated(CommRequest(comm.kind, comm.group, members, comm.size_bytes))
            self._iso[key] = (res.duration_ns, res.algorithm)
        return self._iso[key]

    def compiled(self, rank: int, stage: int, chunk: int, kind: str, last: bool,
                 overlapped: bool = False) -> Compiled:
        """The pass of op ``kind`` (``F``, whole ``B``, input-gradient ``I``, ``W``) on ``chunk``;
        ``last``: the chunk's edge op (:func:`~sim.pipeline.ops.op_edges`); ``overlapped``: in
        a DualPipe F&B op (:mod:`sim.engine.paired`; nothing fused)."""
        key = (rank, chunk, kind, last, overlapped)
        comp = self._compiled.get(key)
        if comp is None:  # kind Bd: backward without the deferred output-layer wgrad
            layers = self.prog.stages[stage].pass_layers(chunk, kind)
            forward, ep_only = kind == "F", self.prog.ep_a2a_overlap
            passes = {"W": (PhaseKind.WEIGHT_GRAD,), "I": (PhaseKind.INPUT_GRAD,)}.get(
                kind, BACKWARD)
            scale = self.scale.get(rank, 1.0)

            def cost(c: Comm) -> tuple[int, str] | None:  # F&B ops: detached comms unfused
                return None if overlapped and detached(c, ep_only) else self.fused_cost(rank, c)

            def ctas(c: Comm, record: bool = True) -> int:  # an async NCCL kernel's SMs
                return overlap_ctas(self.sharing, self.net, self.groups.of(c.group, rank), c,
                                    record)
            # a pass depends on the rank only through its compute scale and the fused costs
            # (and kernel CTAs) of its blocking comms: ranks that agree share the compiled steps;
            # those depend on the rank only through its groups' members (worked out once each)
            comms = self._blocking.get(bkey := (stage, chunk, kind))
            if comms is None:
                comms = self._blocking[bkey] = blocking_comms(layers, forward, passes)
            sig = (stage, chunk, kind, passes, last, scale, overlapped, tuple(
                self.groups.of(g, rank) for g in dict.fromkeys(c.group for c in comms)))
            costs = self._costs.get(sig)
            if costs is None:
                costs = self._costs[sig] = tuple((cost(c), ctas(c, False)) for c in comms)
            sig = sig[:-1] + (costs,)
            shared = self._passes.get(sig)
            if shared is None:
                shared = self._passes[sig] = compile_pass(
                    layers, forward, last and not forward, cost, scale, passes,
                    await_params=last and forward, ctas=ctas)
            comp = Compiled(shared.steps, shared.layer_totals)
            tp_group = self.groups.of(GroupKind.TP, rank)
            if not self.lockstep and GroupKind.TP in comp.fused_groups() and \
                    self.groups.sim_count(tp_group) > 1:
                # simulated TP peers at the same speed: once they start the pass together
                # (their first TP collective would make them), every later collective lines up
                comp.barrier = GroupKind.TP
            self._compiled[key] = comp
            self._all_compiled.append((rank, comp))
        return comp

    # ---- processes -----------------------------------------------------------------------
    def run(self, until_ns: int | None) -> SimResult:
        ledger = self.ledger
        procs = {r: self.env.process(self.rank_proc(r)) for r in self.sim_ranks}
        self.env.run(until=until_ns)
        stalled = [r for r, pr in procs.items() if not pr.triggered]
        if stalled:
            shown = "; ".join(f"rank {r}: {ledger.waiting.get(r, 'running')}" for r in stalled[:8])
            more = f" (and {len(stalled) - 8} more)" if len(stalled) > 8 else ""
            raise SimulationStalled(
                f"simulation stopped at t = {self.env.now * 1e-9:.6f} s with {len(stalled)} "
                f"rank(s) still waiting: {shown}{more}")
        for pr in procs.values():
            if not pr.ok:
                raise pr.value
        self.pipe.check_delivered()
        stats = ledger.stats
        iteration = max(s.end_ns for s in stats.values())
        for s in stats.values():
            tail = iteration - s.end_ns
            s.bubble_ns += tail
            if tail:
                ledger.span(s.rank, "compute", s.end_ns, iteration, "bubble", "idle")
        self._layer_totals()
        last = max(stats.values(), key=lambda s: (s.end_ns, -s.rank))
        path = critical_path(ledger.deps, last.rank, iteration)
        return SimResult(self.prog, iteration, [stats[r] for r in self.sim_ranks],
                         ledger.spans or [], self.env.scheduled, self.per_rank,
                         self.net.describe(), self.classes.describe(), path,
                         sum(self.sharing.beside.values()) if self.sharing else 0,
                         {g: tuple(sorted(c)) for g, c in self.sharing.used.items()}
                         if self.sharing else {})

    def rank_proc(self, rank: int):
        env, st = self.env, self.ledger.stats[rank]
        stage = st.stage
        prog = self.prog.stages[stage]
        yield from self.tasks(rank, prog.prologue)
        st.pipeline_start_ns = env.now
        syncs, backwards = prog.syncs_by_backward(), 0
        ops = self._ops.get(stage)  # the same for every rank of the stage: worked out once
        if ops is None:
            ops = self._ops[stage] = op_passes(self.sched[stage], self.split, prog.defers)
        for parts, edges, kinds in ops:
            for o in parts:  # wait for the inputs from other stages
                got = self.transfer(rank, stage, o, False)
                if got is not None:
                    yield from self.pipe.recv(rank, (rank, o.kind, o.microbatch, got[1]))
            # an F&B op (DualPipe, combined 1F1B): both inputs, both passes, comms beside
            paired = len(parts) > 1
            waits: tuple[GroupKind, ...] = ()
            for o, edge, kind in zip(parts, edges, kinds, strict=False):
                comp = self.compiled(rank, stage, o.chunk, kind, edge, paired)
                if paired:
                    comp, more = detach_blocking(comp, True, self.prog.ep_a2a_overlap)
                    waits += more
                yield from self.run_steps(rank, comp, o.microbatch, o.chunk, o.kind)
            for group in waits:
                yield from self.streams.await_overlap(rank, group)
            for o in parts:
                if o.kind == "B":  # Megatron's grad_sync_func (features.grad_sync), then send
                    backwards += 1
                    if backwards - 1 in syncs:
                        yield from self.tasks(rank, syncs[backwards - 1])
                got = self.transfer(rank, stage, o, True)  # send the output on
                if got is not None:
                    self.pipe.send(rank, got[0], (got[0], o.kind, o.microbatch, got[1]),
                                   o.microbatch, o.chunk)
        st.pipeline_end_ns = env.now
        yield from self.tasks(rank, prog.tail)  # deferred output-layer wgrad, then epilogue
        yield from self.streams.drain(rank)
        st.end_ns = env.now

    def transfer(self, rank: int, stage: int, op: ScheduleOp, out: bool) -> tuple | None:
        """``(peer rank, receiver's virtual stage)`` of the transfer into ``op`` or out of it
        (``out``), or None; a pure function of the key below, worked out once."""
        got = self._xfers.get(key := (rank, op.kind, op.chunk, out), self._xfers)
        if got is self._xfers:
            got = self.stype.transfer(self.p, self.v, stage, op, out=out)
            if got is not None:
                c0 = self.pl.coord(rank)
                got = (self.pl.rank(c0.tp, c0.dp, got[0]), got[1])
            self._xfers[key] = got
        return got

    def run_steps(self, rank: int, comp: Compiled, mb: int, chunk: int, op: str = ""):
        env, ledger, sharing, jitter = self.env, self.ledger, self.sharing, self.jitter
        st = ledger.stats[rank]
        comp.executions += 1
        if comp.barrier is not None:
            t0 = env.now
            yield from self.rdv.barrier(rank, comp.barrier)
            st.exposed_comm_ns[comp.barrier] += env.now - t0
        for i, step in enumerate(comp.steps):
            if jitter is not None and type(step) is Fused:
                step = jitter.fused(step, rank, mb, chunk, op, i)  # noqa: PLW2901
            if self.host is not None:  # the GPU waits until the CPU has issued the step
                yield from self.host.before(rank, step, mb, chunk)
            if type(step) is Fused:
                if sharing is not None and not sharing.quiet(rank) and step.duration_ns:
                    yield from fused_shared(sharing, ledger, rank, step, mb, chunk)
                    continue
                t0 = env.now
                if step.duration_ns:
                    yield env.timeout(step.duration_ns)
                st.compute_ns += step.compute_ns
                for g, ns in step.comm_ns:
                    st.exposed_comm_ns[g] += ns
                if ledger.spans is not None:
                    fused_spans(self.ledger, rank, t0, step, mb, chunk)
            elif type(step) is Blocking:
                yield from blocking(env, self.rdv, ledger, rank, step, mb, chunk)
            elif type(step) is OverlapBlocking:
                yield from overlap_blocking(self.env, self.rdv, self.ledger, rank, step, mb, chunk)
            elif type(step) is Await:
                t0 = env.now
                yield from self.streams.await_overlap(rank, step.group)
                add_layer_comm(st, step.layer, GROUP_NAME[step.group], env.now - t0)
            elif type(step) is AwaitParams:
                proc, group = self.param_gathers[rank, step.bucket]
                yield from self.streams.wait_for(
                    rank, proc, group,
                    f"parameter all-gather bucket {step.bucket} (first use: {step.layer})")
            else:
                assert type(step) is AsyncIssue
                (self.streams.issue_overlap if step.overlap else self.streams.issue)(
                    rank, step.comm, f"{step.layer}.{step.phase.value}")

    def tasks(self, rank: int, tasks: tuple[Task, ...]):
        env, ledger = self.env, self.ledger
        st = ledger.stats[rank]
        scale = self.scale.get(rank, 1.0)
        for t in tasks:
            if t.wait_async:
                yield from self.streams.drain(rank)
            compute_ns = scaled(t.compute_ns, scale)
            if self.jitter is not None:
                compute_ns = self.jitter.kernel_ns(compute_ns, rank, "task", t.label)
            if compute_ns:
                t0 = env.now
                if self.sharing is not None and not self.sharing.quiet(rank):
                    lost: dict[GroupKind, int] = {}
                    yield from self.sharing.work(rank, compute_ns, lost)
                    for g, ns in lost.items():
                        st.exposed_comm_ns[g] += ns
                    if env.now > t0 + compute_ns:
                        ledger.span(rank, "compute", t0 + compute_ns, env.now, "comm_wait",
                                    "slowed by communication")
                else:
                    yield env.timeout(compute_ns)
                if t.kind is TaskKind.OPTIMIZER:
                    st.optimizer_ns += compute_ns
                else:
                    st.compute_ns += compute_ns
                if ledger.spans is not None:
                    ledger.span(rank, "compute", t0, t0 + compute_ns, t.kind.span, t.label)
            if t.comm is None:
                continue
            if t.comm.blocking:
                t0 = env.now
                res, (_, arrived) = yield from self.rdv.collective(rank, t.comm, t.label)
                # waiting in the embedding group for the other end of the pipeline is idle
                idle = arrived - t0 if t.comm.group is GroupKind.EMB else 0
                st.bubble_ns += idle
                if idle:
                    ledger.span(rank, "compute", t0, arrived, "bubble", "wait for other stage")
                st.exposed_comm_ns[t.comm.group] += env.now - t0 - idle
                if ledger.spans is not None:
                    ledger.span(rank, t.comm.group.value, t0 + idle, env.now, "comm", t.label,
                                -1, -1, comm_args(t.comm, res.algorithm if res else ""))
            else:
                proc = self.streams.issue(rank, t.comm, t.label)
                if t.param_bucket >= 0:
                    self.param_gathers[rank, t.param_bucket] = (proc, t.comm.group)

    def _layer_totals(self) -> None:
        for rank, comp in self._all_compiled:
            if comp.executions:
                add_layer_totals(self.ledger.stats[rank].layers, comp.layer_totals,
                                 comp.executions)

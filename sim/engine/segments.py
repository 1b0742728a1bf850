"""Compile a chunk's layers into the few steps the event loop must actually take.

Event economy: consecutive compute and blocking communications whose cost does not depend on
other traffic (the network says the group is *fusable*) are merged into one :class:`Fused`
timeout; only non-fusable blocking comms (:class:`Blocking`) and asynchronous issues
(:class:`AsyncIssue`) break a run. The parts of each fused run are kept so traces, timelines and
per-layer totals can be reconstructed exactly without extra events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sim.comm import Comm, GroupKind
from sim.engine.overlap import overlapped_ns
from sim.program.workload import GemmOverlap, Layer, Phase, PhaseKind

_PHASE_INDEX = {PhaseKind.FORWARD: 0, PhaseKind.INPUT_GRAD: 1, PhaseKind.WEIGHT_GRAD: 2}


@dataclass(frozen=True, slots=True)
class Part:
    """A piece of a fused run: ``offset_ns`` from its start, lasting ``duration_ns``.

    ``group`` is ``None`` for compute, else the group of the (blocking) communication.
    ``kernels_ns`` / ``sync_kernels``: a compute part's launches and host wait (the phase's,
    :class:`~sim.program.workload.Phase`; :mod:`sim.engine.host`).
    """

    offset_ns: int
    duration_ns: int
    phase: PhaseKind
    layer: str
    group: GroupKind | None
    comm: Comm | None = None
    algorithm: str = ""
    kernels_ns: tuple[int, ...] = ()
    sync_kernels: int = 0


@dataclass(frozen=True, slots=True)
class Fused:
    duration_ns: int
    compute_ns: int
    comm_ns: tuple[tuple[GroupKind, int], ...]
    parts: tuple[Part, ...]


@dataclass(frozen=True, slots=True)
class Blocking:
    comm: Comm
    phase: PhaseKind
    layer: str


@dataclass(frozen=True, slots=True)
class OverlapBlocking:
    """A blocking collective pipelined with a GEMM of ``gemm_ns`` (``overlap``), whose cost is
    known only when it runs: the GEMM time is not in the fused run before it."""

    overlap: GemmOverlap
    gemm_ns: int
    phase: PhaseKind
    layer: str


@dataclass(frozen=True, slots=True)
class AsyncIssue:
    """Issue ``comm`` without waiting; ``overlap``: on the group's overlap stream, awaited by
    the :class:`Await` that follows its phase's compute."""

    comm: Comm
    phase: PhaseKind
    layer: str
    overlap: bool = False


@dataclass(frozen=True, slots=True)
class Await:
    """Wait for the oldest outstanding overlapped / prefetched comm of ``group`` (exposed
    comm): at the end of an overlapping phase, or where a phase asks (``await_group``)."""

    group: GroupKind
    phase: PhaseKind
    layer: str


@dataclass(frozen=True, slots=True)
class AwaitParams:
    """Wait for parameter all-gather bucket ``bucket`` (its first use in the iteration)."""

    bucket: int
    layer: str


Step = Fused | Blocking | OverlapBlocking | AsyncIssue | Await | AwaitParams
# (comm, phase) -> (duration_ns, algorithm) if fusable for this rank, else None
CostFn = Callable[[Comm], "tuple[int, str] | None"]
# comm -> the CTAs (SMs) its NCCL kernel holds on this rank (an ``nccl`` GEMM overlap)
CtasFn = Callable[[Comm], int]


@dataclass
class Compiled:
    """The steps of one (chunk, direction, last-microbatch?) for one rank, plus its per-layer
    totals (ns per execution) and how often it ran."""

    steps: tuple[Step, ...]
    layer_totals: dict[str, list]  # name -> [fwd, ig, wg, {group: comm_ns}, fwd_count]
    executions: int = 0
    barrier: GroupKind | None = None  # group whose simulated members sync before the pass

    def fused_groups(self) -> set[GroupKind]:
        return {p.group for s in self.steps if type(s) is Fused for p in s.parts
                if p.group is not None}


BACKWARD = (PhaseKind.INPUT_GRAD, PhaseKind.WEIGHT_GRAD)


def phases(layers: tuple[Layer, ...], forward: bool,
           backward: tuple[PhaseKind, ...] = BACKWARD):
    """The (layer, phase kind, phase) sequence of a forward or backward pass over ``layers``;
    ``backward``: the phases a backward pass runs per layer (a split-backward schedule runs
    the input-gradient and the weight-gradient passes separately)."""
    if forward:
        for lay in layers:
            yield lay, PhaseKind.FORWARD, lay.forward
    else:
        for lay in reversed(layers):
            for kind in backward:
                yield lay, kind, lay.phase(kind)


def scaled(ns: int, factor: float) -> int:
    """``ns`` × ``factor`` in whole nanoseconds (exact when the factor is 1)."""
    return ns if factor == 1.0 else int(round(ns * factor))


def blocking_comms(layers: tuple[Layer, ...], forward: bool,
                   passes: tuple[PhaseKind, ...] = BACKWARD) -> tuple[Comm, ...]:
    """The distinct blocking comms of a pass over ``layers`` (and the comms of its GEMM
    overlaps), in the order the pass issues them."""
    seen: dict[Comm, None] = {}
    for _lay, _kind, ph in phases(layers, forward, passes):
        if ph.comm is not None and ph.comm.blocking:
            seen.setdefault(ph.comm, None)
        for o in ph.overlaps:
            seen.setdefault(o.comm, None)
    return tuple(seen)


def _waits_before(lay: Layer, kind: PhaseKind, ph, await_params: bool) -> list[Step]:
    """The waits a phase starts with: the first use of its parameter all-gather buckets (when
    ``await_params``), then an awaited overlapped group."""
    out: list[Step] = []
    if await_params and lay.param_buckets:
        out.extend(AwaitParams(b, lay.name) for b in lay.param_buckets)
    if ph.await_group is not None:
        out.append(Await(ph.await_group, kind, lay.name))
    return out


def compile_pass(layers: tuple[Layer, ...], forward: bool, issue_async: bool,
                 cost: CostFn, scale: float = 1.0,
                 backward: tuple[PhaseKind, ...] = BACKWARD,
                 await_params: bool = False, ctas: CtasFn | None = None) -> Compiled:
    """Compile one pass. ``issue_async``: include non-blocking (gradient) communications;
    ``scale``: factor on compute times (a slow GPU); ``backward``: see :func:`phases`;
    ``await_params``: the first forward of the iteration — a layer that opens a parameter
    all-gather bucket first waits for it, and each layer's ``first_forward_ns`` is added to
    its forward compute. ``ctas``: the SMs the NCCL kernel of an ``nccl`` GEMM overlap holds
    (default: none, the overlap is free)."""
    steps: list[Step] = []
    parts: list[Part] = []
    totals: dict[str, list] = {}
    run = [0, 0, {}]  # duration, compute, comm by group

    def flush() -> None:
        if parts:
            steps.append(Fused(run[0], run[1], tuple(sorted(run[2].items(),
                                                            key=lambda kv: kv[0].value)),
                               tuple(parts)))
            parts.clear()
            run[0], run[1], run[2] = 0, 0, {}

    for lay, kind, ph in phases(layers, forward, backward):
        if await_params and lay.first_forward_ns and kind is PhaseKind.FORWARD:
            ph = replace(ph, compute_ns=ph.compute_ns + lay.first_forward_ns)  # noqa: PLW2901
        waits = _waits_before(lay, kind, ph, await_params)
        if waits:
            flush()
            steps.extend(waits)
        tot = totals.setdefault(lay.name, [0, 0, 0, {}, 0])
        if kind is PhaseKind.FORWARD:
            tot[4] += 1
        c = ph.comm
        overlap = c is not None and (c.overlap or c.prefetch) and c.size_bytes > 0
        if overlap:
            flush()
            steps.append(AsyncIssue(c, kind, lay.name, overlap=True))
        _compute(ph, kind, lay.name, scale, cost, (steps, parts, run, tot), flush, ctas)
        if c is None:
            continue
        if overlap:
            if c.overlap:
                flush()
                steps.append(Await(c.group, kind, lay.name))
            continue
        if not c.blocking:
            if issue_async or c.per_microbatch:
                flush()
                steps.append(AsyncIssue(c, kind, lay.name))
            continue
        fused = cost(c)
        if fused is None:
            flush()
            steps.append(Blocking(c, kind, lay.name))
            continue
        dur, algo = fused
        _comm_part(parts, run, tot, Part(run[0], dur + c.post_delay_ns, kind, lay.name, c.group,
                                         c, algo))
    flush()
    return Compiled(tuple(steps), totals)


def _compute(ph: Phase, kind: PhaseKind, layer: str, scale: float, cost: CostFn,
             state: tuple[list, list, list, list], flush: Callable[[], None],
             ctas: CtasFn | None = None) -> None:
    """A phase's compute, with its GEMM-overlapped collectives (``Phase.overlaps``): a fusable
    one adds the time its overlap exposes (:func:`~sim.engine.overlap.overlapped_ns` − GEMM)
    after the compute; a non-fusable one becomes an :class:`OverlapBlocking` step that runs its
    GEMM. An ``nccl`` overlap gets its kernel's CTAs from ``ctas`` here."""
    steps, parts, run, tot = state
    compute_ns = scaled(ph.compute_ns, scale)
    tot[_PHASE_INDEX[kind]] += compute_ns
    costed = [(_with_ctas(o, ctas), scaled(o.gemm_ns, scale), cost(o.comm))
              for o in ph.overlaps if o.comm.size_bytes > 0]
    alone = compute_ns - sum(g for _o, g, fused in costed if fused is None)
    if alone:
        parts.append(Part(run[0], alone, kind, layer, None, kernels_ns=ph.kernels_ns,
                          sync_kernels=ph.sync_kernels))
        run[0] += alone
        run[1] += alone
    for o, g, fused in costed:
        if fused is None:
            flush()
            steps.append(OverlapBlocking(o, g, kind, layer))
            continue
        extra = overlapped_ns(o.method, g, fused[0], o.splits, o.sms, o.comm_sms) - g
        _comm_part(parts, run, tot, Part(run[0], extra, kind, layer, o.comm.group, o.comm,
                                         fused[1]))


def _with_ctas(o: GemmOverlap, ctas: CtasFn | None) -> GemmOverlap:
    """``o`` with the SMs its NCCL kernel holds (an ``nccl`` overlap; others carry their own)."""
    if o.method != "nccl":
        return o
    return replace(o, comm_sms=min(ctas(o.comm), o.sms - 1) if ctas is not None else 0)


def _comm_part(parts: list[Part], run: list, tot: list, part: Part) -> None:
    """Append the (fused, blocking) communication ``part`` to the run unless it is empty."""
    dur, g = part.duration_ns, part.group
    if dur and g is not None:
        parts.append(part)
        run[0] += dur
        run[2][g] = run[2].get(g, 0) + dur
        tot[3][g.value] = tot[3].get(g.value, 0) + dur

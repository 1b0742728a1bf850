"""A proven lower bound on a layout's iteration time, without simulating it: the pipeline
replayed with its compute only (docs/sweeps.md, "Best-first sweeps").

The engine (:mod:`sim.engine.core`) runs each simulated rank as one process that walks its
stage's schedule op by op: the prologue tasks, then per op the receives from the neighbouring
stages, the op's compiled pass(es), the delayed gradient-sync tasks after a backward, the
sends; then the tail (deferred drain, epilogue: optimizer). Every compute time of a rank is
spent inside that walk, one step after the other (a fused step waits its whole duration, at
least its compute; a GEMM-overlapped collective at least its GEMM,
:func:`sim.engine.overlap.overlapped_ns`; SM interference and host dispatch only lengthen
steps; DualPipe's F&B op runs its two passes back to back). A receive cannot complete before
the matching send, which leaves when the sender's op has ended. Hence, with ``c(x)`` the
compute (ns) the engine counts for step ``x`` and ``end`` the simulated end of an op:

    end(op) ≥ max(end(previous op of the stage), end(the op that sends its input)) + c(op)

and the iteration ends after every stage's tail. :func:`replay` evaluates exactly that
recursion with equality (every communication, wait and slowdown set to zero), in the engine's
order, on the engine's own data (:func:`~sim.pipeline.schedules.schedule_table`,
:func:`~sim.pipeline.ops.op_edges`, :meth:`~sim.pipeline.types.Schedule.transfer`,
:func:`~sim.engine.segments.phases`), so by induction over the ops its end time is at most the
simulated iteration time. Compute here is the program's kernel durations unscaled: the bound is
refused (``None``) where the engine would scale them (faults) or draw them (jitter, which a
sweep refuses anyway).

``tests/test_sweep_bound.py`` checks that every stage's replayed compute equals the compute and
optimizer time the engine reports for it, and that the bound is at most the simulated time on
every schedule.
"""

from __future__ import annotations

from sim.engine.segments import BACKWARD, phases
from sim.pipeline.ops import op_edges
from sim.pipeline.schedules import schedule_table
from sim.program.pipeline import PipelineProgram, StageProgram, Task
from sim.program.workload import PhaseKind

_PASSES = {"W": (PhaseKind.WEIGHT_GRAD,), "I": (PhaseKind.INPUT_GRAD,)}


def _tasks_ns(tasks: tuple[Task, ...]) -> int:
    return sum(t.compute_ns for t in tasks)


class _Passes:
    """The compute (ns) of one op's pass on one stage, as the engine compiles it
    (:meth:`sim.engine.core._Engine.compiled`), cached by (chunk, kind, edge)."""

    def __init__(self, stage: StageProgram):
        self.stage = stage
        self.cache: dict[tuple[int, str, bool], int] = {}

    def ns(self, chunk: int, kind: str, edge: bool) -> int:
        key = (chunk, kind, edge)
        got = self.cache.get(key)
        if got is None:
            layers = self.stage.pass_layers(chunk, kind)
            forward = kind == "F"
            got = sum(ph.compute_ns for _, _, ph in
                      phases(layers, forward, _PASSES.get(kind, BACKWARD)))
            if forward and edge:  # the chunk's first forward: once-per-iteration work
                got += sum(lay.first_forward_ns for lay in layers)
            self.cache[key] = got
        return got


def replay(program: PipelineProgram) -> tuple[int, list[int]]:
    """``(iteration end, per-stage compute)`` (ns) of ``program`` run with its compute only
    (see the module): the end is a lower bound on the simulated iteration time; the per-stage
    compute is what the engine counts as that stage's compute plus optimizer time."""
    prog = program
    p, v, m = prog.pp, prog.vpp, prog.microbatches
    stype = prog.schedule_type
    split = stype.splits_backward
    sched = schedule_table(prog.schedule, p, m, v, prog.microbatch_group_size,
                           prog.ep_a2a_overlap)
    passes = [_Passes(st) for st in prog.stages]
    syncs = [st.syncs_by_backward() for st in prog.stages]
    edges = [op_edges(ops, split) for ops in sched]
    clock = [_tasks_ns(st.prologue) for st in prog.stages]  # each stage's time so far
    work = list(clock)
    nxt = [0] * p  # next op index per stage
    backs = [0] * p
    arrived: dict[tuple, int] = {}  # (receiver stage, kind, microbatch, virtual stage) → ns
    left = sum(len(ops) for ops in sched)
    while left:
        progressed = False
        for s in range(p):
            ops = sched[s]
            while nxt[s] < len(ops):
                op = ops[nxt[s]]
                parts = (op,) if op.paired is None else (op, op.paired)
                ready = clock[s]
                keys = []
                for o in parts:
                    got = stype.transfer(p, v, s, o, out=False)
                    if got is not None:
                        keys.append((s, o.kind, o.microbatch, got[1]))
                if any(k not in arrived for k in keys):
                    break  # its input is not sent yet: another stage first
                for k in keys:
                    ready = max(ready, arrived.pop(k))
                for o, edge in zip(parts, edges[s][nxt[s]], strict=False):
                    kind = "I" if o.kind == "B" and o.input_grad_only(split) else o.kind
                    if kind == "B" and prog.stages[s].defers(o.chunk, o.microbatch):
                        kind = "Bd"
                    c = passes[s].ns(o.chunk, kind, edge)
                    ready += c
                    work[s] += c
                for o in parts:
                    if o.kind == "B":
                        c = _tasks_ns(syncs[s].get(backs[s], ()))
                        backs[s] += 1
                        ready += c
                        work[s] += c
                    got = stype.transfer(p, v, s, o, out=True)
                    if got is not None:
                        arrived[got[0], o.kind, o.microbatch, got[1]] = ready
                clock[s] = ready
                nxt[s] += 1
                left -= 1
                progressed = True
        if not progressed:
            raise ValueError("the schedule's ops wait on each other (no op can run)")
    tails = [_tasks_ns(st.tail) for st in prog.stages]
    ends = [c + t for c, t in zip(clock, tails, strict=True)]
    return max(ends), [w + t for w, t in zip(work, tails, strict=True)]


def lower_bound_ns(program: PipelineProgram, topology) -> int | None:
    """A lower bound (ns) on the simulated iteration time of ``program`` on ``topology``
    (:func:`replay`), or ``None`` where the engine would not run the program's kernel
    durations as they are (the topology's faults scale some ranks' compute)."""
    if not topology.faults.empty:
        return None
    return replay(program)[0]

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

from functools import lru_cache

from sim.pipeline.ops import op_edges
from sim.pipeline.registry import schedule_type
from sim.pipeline.schedules import schedule_table
from sim.program.pipeline import PipelineProgram
from sim.sweep.passes import Passes, tasks_ns, with_tails

Part = tuple[int, str, bool, int, int]
"""One pass of a planned op: ``(chunk, kind, edge, microbatch, send)``: ``kind`` ``F``, ``B``
(whole backward), ``I`` (input gradient) or ``W``; ``edge`` as
:func:`~sim.pipeline.ops.op_edges`; ``send``: the slot its output goes to (−1: none)."""


@lru_cache(maxsize=16)
def plan(schedule: str, p: int, m: int, v: int, n: int | None, ep_overlap: bool
         ) -> tuple[tuple[int, tuple[int, ...], tuple[Part, ...]], ...]:
    """The ops of a pipeline in an order where every op comes after the op that sends its
    input (the engine's data dependencies, :meth:`~sim.pipeline.types.Schedule.transfer`),
    each ``(stage, slots it receives, parts)``; a slot is one transfer. Depends only on the
    schedule and its sizes, so layouts of one shape share it (cached)."""
    stype = schedule_type(schedule)
    split = stype.splits_backward
    sched = schedule_table(schedule, p, m, v, n, ep_overlap)
    edges = [op_edges(ops, split) for ops in sched]
    slots: dict[tuple, int] = {}
    peers: dict[tuple, tuple[int, int] | None] = {}

    def slot(key: tuple) -> int:
        return slots.setdefault(key, len(slots))

    def transfer(s: int, o, out: bool) -> tuple[int, int] | None:
        """The schedule's transfer of ``o`` (it depends on the op's kind and chunk only)."""
        key = (s, o.kind, o.chunk, out)
        if key not in peers:
            peers[key] = stype.transfer(p, v, s, o, out=out)
        return peers[key]

    out = []
    sent: set[int] = set()
    nxt = [0] * p
    left = sum(len(ops) for ops in sched)
    while left:
        progressed = False
        for s in range(p):
            ops = sched[s]
            while nxt[s] < len(ops):
                op = ops[nxt[s]]
                ops_of = (op,) if op.paired is None else (op, op.paired)
                recv = []
                for o in ops_of:
                    got = transfer(s, o, False)
                    if got is not None:
                        recv.append(slot((s, o.kind, o.microbatch, got[1])))
                if any(r not in sent for r in recv):
                    break  # its input is not sent yet: another stage first
                parts = []
                for o, edge in zip(ops_of, edges[s][nxt[s]], strict=False):
                    kind = "I" if o.kind == "B" and o.input_grad_only(split) else o.kind
                    got = transfer(s, o, True)
                    dst = -1 if got is None else slot((got[0], o.kind, o.microbatch, got[1]))
                    if dst >= 0:
                        sent.add(dst)
                    parts.append((o.chunk, kind, edge, o.microbatch, dst))
                out.append((s, tuple(recv), tuple(parts)))
                nxt[s] += 1
                left -= 1
                progressed = True
        if not progressed:
            raise ValueError("the schedule's ops wait on each other (no op can run)")
    return tuple(out)


def replay(program: PipelineProgram, comm_ns=None) -> tuple[int, list[int]]:
    """``(iteration end, per-stage work)`` (ns) of ``program`` run with its compute only
    (see the module) and, with ``comm_ns`` (``comm → ns``, :mod:`sim.sweep.comm_bound`), a
    lower bound of every blocking collective of a single pass (an F&B op's collectives run
    beside its other pass: not counted): the end is a lower bound on the simulated iteration
    time; without ``comm_ns`` the per-stage work is what the engine counts as that stage's
    compute plus optimizer time."""
    prog = program
    ops = plan(prog.schedule, prog.pp, prog.microbatches, prog.vpp,
               prog.microbatch_group_size, prog.ep_a2a_overlap)
    stages = prog.stages
    passes = [Passes(st, comm_ns) for st in stages]
    syncs = [{i: tasks_ns(t) for i, t in st.syncs_by_backward().items()} for st in stages]
    deferred = [st.deferred is not None for st in stages]
    clock = [tasks_ns(st.prologue) for st in stages]  # each stage's time so far
    work = list(clock)
    backs = [0] * len(stages)
    arrived: dict[int, int] = {}  # slot → ns its data is sent
    for s, recv, parts in ops:
        t = clock[s]
        for r in recv:
            t = max(t, arrived[r])
        start = t
        single = len(parts) == 1
        for chunk, kind, edge, mb, _ in parts:
            if kind == "B" and deferred[s] and stages[s].defers(chunk, mb):
                kind = "Bd"  # noqa: PLW2901 - the pass the engine runs
            t += passes[s].ns(chunk, kind, edge, single)
        for _, kind, _, _, dst in parts:
            if kind in ("B", "I"):  # Megatron's grad_sync_func after a backward, then send
                t += syncs[s].get(backs[s], 0)
                backs[s] += 1
            if dst >= 0:
                arrived[dst] = t
        work[s] += t - start
        clock[s] = t
    return with_tails(stages, clock, work)


def lower_bound_ns(program: PipelineProgram, topology) -> int | None:
    """A lower bound (ns) on the simulated iteration time of ``program`` on ``topology``
    (:func:`replay`), or ``None`` where the engine would not run the program's kernel
    durations as they are (the topology's faults scale some ranks' compute)."""
    if not topology.faults.empty:
        return None
    from sim.sweep.comm_bound import comm_bound, group_sizes
    from sim.sweep.fast_bound import fast_replay

    return fast_replay(program, comm_bound(topology, group_sizes(program)))[0]

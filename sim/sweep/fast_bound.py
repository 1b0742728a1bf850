"""The lower bound of :mod:`sim.sweep.bound` computed faster: the same recursion on a compiled
form of the pipeline's ops, for the early pass of a best-first sweep (every layout that fits
gets its bound, docs/sweeps.md).

:func:`~sim.sweep.bound.replay` walks :func:`~sim.sweep.bound.plan`'s ops with a dictionary
look-up per pass, transfer and send. Here the ops of one pipeline shape are compiled once
(:func:`compiled`): each distinct pass numbered, each transfer a slot number, each backward
its number on its stage; a layout's replay (:func:`fast_replay`) then times each distinct pass
once and walks the ops with list indexing only.

Why the result is :func:`~sim.sweep.bound.replay`'s, exactly: the recursion ``end(op) =
max(end(previous op of the stage), end(the op that sends its input)) + c(op)`` has one
solution, whatever order evaluates it, as long as every op comes after its stage's previous
op and after the op that sends its input. :func:`compiled` walks each stage's ops in the
stage's order and takes an op only once its inputs are sent (a stage waits on the first slot
it misses, and is woken when that slot is sent), so its order is such an order; each op adds
the same integers (the pass times of :class:`~sim.sweep.passes.Passes`, the gradient syncs
after the same backward numbers, the deferred output-layer pass on the same microbatches).
``tests/test_sweep_groups.py`` compares both on every schedule.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

from sim.pipeline.ops import op_edges
from sim.pipeline.registry import schedule_type
from sim.pipeline.schedules import schedule_tuples
from sim.program.pipeline import PipelineProgram
from sim.sweep.passes import Passes, tasks_ns, with_tails

Op = tuple[int, tuple[int, ...], tuple[tuple[int, int, int, int], ...], tuple[tuple[int, int], ...]]
"""One compiled op: ``(stage, slots it receives, parts, sends)``; a part ``(pass, its deferred
pass (kind ``Bd``) or −1, chunk, microbatch)``, a send per part ``(the stage's backward number
or −1, slot or −1)``."""

Compiled = tuple[tuple[tuple[int, int, str, bool, bool], ...], tuple[Op, ...], int]
"""``(passes, ops, slots)``: the distinct ``(stage, chunk, kind, edge, single)`` of
:meth:`~sim.sweep.passes.Passes.ns` (``single``: the op has one pass), the ops in a
dependency order (see the module) and the number of transfer slots."""


def _stage_ops(stype, p: int, v: int, s: int, ops, split: bool, index: dict, bases: dict
               ) -> list[Op]:
    """The compiled ops of stage ``s`` (``ops``: its schedule order), in that order. A
    transfer's slot is ``base + microbatch``, ``base`` numbering its (receiving stage, kind,
    receiver's virtual stage) in ``bases`` (``m`` slots each)."""
    edges = op_edges(ops, split)
    transfers: dict[tuple[str, int, bool], int] = {}
    m = bases["m"]

    def base(o, out: bool) -> int:
        key = (o.kind, o.chunk, out)
        got = transfers.get(key)
        if got is None:
            peer = stype.transfer(p, v, s, o, out=out)
            got = -1 if peer is None else bases.setdefault(
                (peer[0] if out else s, o.kind, peer[1]), m * (len(bases) - 1))
            transfers[key] = got
        return got

    out: list[Op] = []
    backs = 0
    shapes: dict[tuple[str, int, bool], tuple] = {}  # an unpaired op's all but microbatch
    for op, edge in zip(ops, edges, strict=True):
        if op.paired is None:
            key = (op.kind, op.chunk, edge[0])
            got = shapes.get(key)
            if got is None:
                kind = "I" if op.kind == "B" and op.input_grad_only(split) else op.kind
                pid = index.setdefault((s, op.chunk, kind, edge[0], True), len(index))
                did = (index.setdefault((s, op.chunk, "Bd", edge[0], True), len(index))
                       if kind == "B" else -1)
                got = shapes[key] = (base(op, False), pid, did, kind in ("B", "I"),
                                     base(op, True))
            rb, pid, did, back, sb = got
            mb = op.microbatch
            out.append((s, (rb + mb,) if rb >= 0 else (), ((pid, did, op.chunk, mb),),
                        ((backs if back else -1, sb + mb if sb >= 0 else -1),)))
            backs += back
            continue
        both = (op, op.paired)
        recv = tuple(b + o.microbatch for o in both if (b := base(o, False)) >= 0)
        parts, sends = [], []
        for o, e in zip(both, edge, strict=True):
            kind = "I" if o.kind == "B" and o.input_grad_only(split) else o.kind
            pid = index.setdefault((s, o.chunk, kind, e, False), len(index))
            did = (index.setdefault((s, o.chunk, "Bd", e, False), len(index))
                   if kind == "B" else -1)
            parts.append((pid, did, o.chunk, o.microbatch))
            b = -1
            if kind in ("B", "I"):
                b, backs = backs, backs + 1
            sb = base(o, True)
            sends.append((b, sb + o.microbatch if sb >= 0 else -1))
        out.append((s, recv, tuple(parts), tuple(sends)))
    return out


@lru_cache(maxsize=4)
def compiled(schedule: str, p: int, m: int, v: int, n: int | None, ep_overlap: bool
             ) -> Compiled:
    """The ops of a pipeline compiled for :func:`fast_replay` (:data:`Compiled`). Depends only
    on the pipeline's shape; a sweep's early pass sends the layouts of one shape together
    (:mod:`sim.sweep.groups`), so a few entries are enough."""
    stype = schedule_type(schedule)
    split = stype.splits_backward
    index: dict[tuple, int] = {}
    bases: dict = {"m": m}
    per = [_stage_ops(stype, p, v, s, ops, split, index, bases)
           for s, ops in enumerate(schedule_tuples(schedule, p, m, v, n, ep_overlap))]
    n_slots = m * (len(bases) - 1)
    sent = bytearray(n_slots)
    waiting: dict[int, int] = {}  # slot → the stage waiting for it
    nxt = [0] * p
    ready = deque(range(p))
    order: list[Op] = []
    while ready:
        s = ready.popleft()
        ops, i = per[s], nxt[s]
        while i < len(ops):
            op = ops[i]
            miss = -1
            for r in op[1]:
                if not sent[r]:
                    miss = r
                    break
            if miss >= 0:
                waiting[miss] = s
                break
            order.append(op)
            for _, d in op[3]:
                if d >= 0:
                    sent[d] = 1
                    if d in waiting:
                        ready.append(waiting.pop(d))
            i += 1
        nxt[s] = i
    if len(order) != sum(len(ops) for ops in per):
        raise ValueError("the schedule's ops wait on each other (no op can run)")
    return tuple(index), tuple(order), n_slots


def fast_replay(program: PipelineProgram, comm_ns=None) -> tuple[int, list[int]]:
    """:func:`~sim.sweep.bound.replay` of ``program`` (same arguments, same result: see the
    module) on :func:`compiled`'s form of its pipeline."""
    prog = program
    keys, ops, n_slots = compiled(prog.schedule, prog.pp, prog.microbatches, prog.vpp,
                                  prog.microbatch_group_size, prog.ep_a2a_overlap)
    stages = prog.stages
    passes = [Passes(st, comm_ns) for st in stages]
    pns = [passes[s].ns(chunk, kind, edge, single) for s, chunk, kind, edge, single in keys]
    syncs = [{i: tasks_ns(t) for i, t in st.syncs_by_backward().items()} for st in stages]
    dchunk = [-1 if st.deferred is None else st.deferred.chunk for st in stages]
    dmicro = [0 if st.deferred is None else st.deferred.microbatches for st in stages]
    clock = [tasks_ns(st.prologue) for st in stages]  # each stage's time so far
    work = list(clock)
    arrived = [0] * n_slots  # slot → ns its data is sent (written before it is read)
    for s, recv, parts, sends in ops:
        t = clock[s]
        if len(parts) == 1:  # the common op: at most one receive, one pass, one send
            if recv:
                a = arrived[recv[0]]
                if a > t:
                    t = a
            start = t
            pid, did, chunk, mb = parts[0]
            t += pns[did] if did >= 0 and chunk == dchunk[s] and mb < dmicro[s] else pns[pid]
            b, dst = sends[0]
            if b >= 0:  # Megatron's grad_sync_func after a backward, then the send
                t += syncs[s].get(b, 0)
            if dst >= 0:
                arrived[dst] = t
            work[s] += t - start
            clock[s] = t
            continue
        for r in recv:
            a = arrived[r]
            if a > t:
                t = a
        start = t
        for pid, did, chunk, mb in parts:
            t += pns[did] if did >= 0 and chunk == dchunk[s] and mb < dmicro[s] else pns[pid]
        for b, dst in sends:
            if b >= 0:
                t += syncs[s].get(b, 0)
            if dst >= 0:
                arrived[dst] = t
        work[s] += t - start
        clock[s] = t
    return with_tails(stages, clock, work)

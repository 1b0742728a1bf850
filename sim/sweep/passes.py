"""The compute of one pass of a pipeline op, as the lower bound reads it
(:mod:`sim.sweep.bound`, :mod:`sim.sweep.fast_bound`)."""

from __future__ import annotations

from sim.engine.segments import BACKWARD, phases
from sim.program.pipeline import StageProgram, Task
from sim.program.workload import PhaseKind

_PASSES = {"W": (PhaseKind.WEIGHT_GRAD,), "I": (PhaseKind.INPUT_GRAD,)}


def tasks_ns(tasks: tuple[Task, ...]) -> int:
    """The compute (ns) of ``tasks`` one after the other."""
    return sum(t.compute_ns for t in tasks)


def with_tails(stages, clock: list[int], work: list[int]) -> tuple[int, list[int]]:
    """``(iteration ns, per-stage work ns)`` once every stage has run its tail tasks after its
    pipeline (``clock``: each stage's time at the end of its ops; ``work``: its busy time)."""
    tails = [tasks_ns(st.tail) for st in stages]
    ends = [c + t for c, t in zip(clock, tails, strict=True)]
    return max(ends), [w + t for w, t in zip(work, tails, strict=True)]


class Passes:
    """The compute (ns) of one op's pass on one stage, as the engine compiles it
    (:meth:`sim.engine.core._Engine.compiled`), plus, with ``comm_ns``, a lower bound of each
    blocking collective the pass waits for (:mod:`sim.sweep.comm_bound`); cached by (chunk,
    kind, edge, with the collectives). Integer sums: each pass's layers are walked once
    (:meth:`sums`), its variants add their parts."""

    def __init__(self, stage: StageProgram, comm_ns=None):
        self.stage = stage
        self.comm_ns = comm_ns
        self.cache: dict[tuple[int, str, bool, bool], int] = {}
        self.parts: dict[tuple[int, str], tuple[int, int, int]] = {}

    def ns(self, chunk: int, kind: str, edge: bool, comm: bool = False) -> int:
        key = (chunk, kind, edge, comm)
        got = self.cache.get(key)
        if got is None:
            compute, blocking, first = self.sums(chunk, kind)
            got = compute
            if comm and self.comm_ns is not None:
                got += blocking  # each a blocking step after its phase's compute
            if kind == "F" and edge:  # the chunk's first forward: once-per-iteration work
                got += first
            self.cache[key] = got
        return got

    def sums(self, chunk: int, kind: str) -> tuple[int, int, int]:
        """``(compute, blocking collectives, first-forward work)`` (ns) of the pass ``kind``
        on ``chunk``: the phases' compute, the lower bounds of their blocking collectives
        (none without ``comm_ns``) and the layers' once-per-iteration first-forward work."""
        key = (chunk, kind)
        got = self.parts.get(key)
        if got is None:
            layers = self.stage.pass_layers(chunk, kind)
            compute = blocking = 0
            comm_ns = self.comm_ns
            for _, _, ph in phases(layers, kind == "F", _PASSES.get(kind, BACKWARD)):
                compute += ph.compute_ns
                c = ph.comm
                if comm_ns is not None and c is not None and c.blocking \
                        and not (c.overlap or c.prefetch) and c.size_bytes > 0:
                    blocking += comm_ns(c)
            got = self.parts[key] = (compute, blocking,
                                     sum(lay.first_forward_ns for lay in layers))
        return got

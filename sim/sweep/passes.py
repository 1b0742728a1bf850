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


class Passes:
    """The compute (ns) of one op's pass on one stage, as the engine compiles it
    (:meth:`sim.engine.core._Engine.compiled`), plus, with ``comm_ns``, a lower bound of each
    blocking collective the pass waits for (:mod:`sim.sweep.comm_bound`); cached by (chunk,
    kind, edge, with the collectives)."""

    def __init__(self, stage: StageProgram, comm_ns=None):
        self.stage = stage
        self.comm_ns = comm_ns
        self.cache: dict[tuple[int, str, bool, bool], int] = {}

    def ns(self, chunk: int, kind: str, edge: bool, comm: bool = False) -> int:
        key = (chunk, kind, edge, comm)
        got = self.cache.get(key)
        if got is None:
            layers = self.stage.pass_layers(chunk, kind)
            forward = kind == "F"
            got = 0
            for _, _, ph in phases(layers, forward, _PASSES.get(kind, BACKWARD)):
                got += ph.compute_ns
                c = ph.comm
                if comm and self.comm_ns is not None and c is not None and c.blocking \
                        and not (c.overlap or c.prefetch) and c.size_bytes > 0:
                    got += self.comm_ns(c)  # a blocking step after the phase's compute
            if forward and edge:  # the chunk's first forward: once-per-iteration work
                got += sum(lay.first_forward_ns for lay in layers)
            self.cache[key] = got
        return got

"""How big a ``--trace`` will be, known before the simulation runs, and the guard on it.

The trace (:mod:`sim.viz.trace`) has, for every rank shown, one event per compute phase and per
communication of every layer, microbatch and model chunk (a gradient reduction issued only in
the last microbatch's backward counts once), the forward/backward op boxes, the pipeline sends,
bubbles and exposed waits (at most about one per op), and the prologue/epilogue tasks.
:func:`stage_events` counts those from the program; :func:`estimate_trace_bytes` adds up their
lines: each kind of event is a fixed JSON skeleton plus the layer name it carries (twice in a
compute event, once in a communication's name). The skeleton sizes are the mean line lengths
measured on the shipped examples' traces (1024- and 512-GPU AICB files, a generated GPT-2 and
GPT-3 175B), within ±8 bytes of every line; tests/test_trace_size.py checks the estimate
against written traces. A trace estimated over :data:`LIMIT_BYTES` is refused unless
``--force`` is given: large traces take minutes to write, and ui.perfetto.dev's in-browser
loader handles a few hundred MB at most.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sim.errors import UsageError
from sim.parallel.placement import Placement
from sim.program.pipeline import PipelineProgram, StageProgram

LIMIT_BYTES = 200_000_000
# bytes of an event line without its layer name(s), by kind (measured means, see the module)
PHASE_BYTES = {"forward": 155, "input_grad": 167, "weight_grad": 170}
TASK_BYTES = 141  # iteration-level compute and the optimizer
COMM_BYTES = 302  # a collective: op, group, members, bytes, algorithm, bandwidths
OP_BYTES = 136  # a forward/backward box of the pipeline-ops track
SEND_BYTES = 260  # a pipeline send
WAIT_BYTES = 135  # a bubble or an exposed wait


def _comm_every_microbatch(comm) -> bool:
    return comm.blocking or comm.per_microbatch or comm.overlap or comm.prefetch


def stage_counts(prog: PipelineProgram, st: StageProgram) -> tuple[int, int]:
    """(events, bytes) of one rank of stage ``st`` in the trace (see the module)."""
    m, v = prog.microbatches, prog.vpp
    m = prog.schedule_type.microbatches_per_chunk(m)  # DualPipe: half per direction
    events = size = 0
    for chunk in st.chunks:
        for lay in chunk:
            name = len(lay.name)
            for kind, ph in (("forward", lay.forward), ("input_grad", lay.input_grad),
                             ("weight_grad", lay.weight_grad)):
                if ph.compute_ns > 0:
                    events += m
                    size += m * (PHASE_BYTES[kind] + 2 * name)
                if ph.comm is not None:
                    n = m if _comm_every_microbatch(ph.comm) else 1
                    events += n
                    size += n * (COMM_BYTES + len(ph.comm.kind.value) + name + len(kind))
    ops = 2 * m * v  # forward and backward boxes; about as many bubbles and waits
    sends = ops if prog.pp > 1 else 0
    events += 2 * ops + sends
    size += ops * (OP_BYTES + WAIT_BYTES) + sends * SEND_BYTES
    for task in (*st.prologue, *st.tail, *(t for g in st.grad_syncs for t in g.tasks)):
        events += 2
        size += TASK_BYTES + 2 * len(task.label) + COMM_BYTES + len(task.label)
    return events, size


def stage_events(prog: PipelineProgram, st: StageProgram) -> int:
    """Trace events of one rank of stage ``st``."""
    return stage_counts(prog, st)[0]


def estimate_trace_bytes(prog: PipelineProgram, ranks_per_stage: Counter[int]) -> int:
    """Estimated bytes of a trace showing ``ranks_per_stage[s]`` ranks of each stage ``s``."""
    return sum(n * stage_counts(prog, prog.stages[s])[1] for s, n in ranks_per_stage.items())


def shown_per_stage(spec: str | tuple[int, ...], placement: Placement, per_rank: bool,
                    simulated: Iterable[int]) -> Counter[int]:
    """How many ranks of each stage a ``--trace-ranks`` value shows (before simulating)."""
    if spec == "stage-reps":
        return Counter(range(placement.pp))
    if spec == "all":
        ranks: Iterable[int] = range(placement.world_size) if per_rank else simulated
    else:
        ranks = spec
    return Counter(placement.coord(r).pp for r in ranks)


def check_trace_size(prog: PipelineProgram, spec: str | tuple[int, ...], placement: Placement,
                     per_rank: bool, simulated: Iterable[int], force: bool) -> str:
    """Refuse (exit 2) a trace estimated over :data:`LIMIT_BYTES` unless ``force``; returns a
    warning to print when ``force`` lets one through (else ``""``)."""
    counts = shown_per_stage(spec, placement, per_rank, simulated)
    size = estimate_trace_bytes(prog, counts)
    if size <= LIMIT_BYTES:
        return ""
    what = (f"the trace of {sum(counts.values())} ranks would be about {size / 1e6:,.0f} MB "
            f"(over {LIMIT_BYTES / 1e6:.0f} MB)")
    if not force:
        raise UsageError(f"{what}: show fewer ranks with --trace-ranks (e.g. stage-reps), or "
                         "add --force to write it anyway", field="trace")
    return f"{what}; writing it anyway (--force)"

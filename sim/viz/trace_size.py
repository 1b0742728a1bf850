"""How big a ``--trace`` will be, known before the simulation runs, and the guard on it.

The trace has one event per compute phase and per communication of every layer, microbatch and
model chunk, plus the pipeline-op boxes, pipeline sends, bubbles and the prologue/epilogue tasks,
for every rank shown (sim/viz/trace.py). :func:`estimate_trace_bytes` counts those from the
program and multiplies by :data:`BYTES_PER_EVENT`, the mean size of an event line measured on the
shipped examples (see tests/test_trace_size.py, which checks the estimate against written
traces). A trace estimated over :data:`LIMIT_BYTES` is refused unless ``--force`` is given:
large traces take minutes to write and are too big for Perfetto's in-browser loader
(ui.perfetto.dev loads traces of a few hundred MB at most).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sim.errors import UsageError
from sim.placement import Placement
from sim.workload.program import PipelineProgram, StageProgram

BYTES_PER_EVENT = 250  # measured mean of one event line, 234-252 on the shipped examples
LIMIT_BYTES = 200_000_000


def stage_events(prog: PipelineProgram, st: StageProgram) -> int:
    """Trace events of one rank of stage ``st`` (an upper-side estimate, see the module)."""
    per_microbatch = 0
    for chunk in st.chunks:
        for lay in chunk:
            for ph in (lay.forward, lay.input_grad, lay.weight_grad):
                per_microbatch += (ph.compute_ns > 0) + (ph.comm is not None)
    m, v = prog.microbatches, prog.vpp
    boxes = 2 * m * v  # forward and backward op boxes
    sends = 2 * m * v if prog.pp > 1 else 0
    waits = 2 * m * v  # bubbles and exposed waits between ops, at most about one per op
    tasks = 2 * (len(st.prologue) + len(st.epilogue))
    return m * per_microbatch + boxes + sends + waits + tasks


def estimate_trace_bytes(prog: PipelineProgram, ranks_per_stage: Counter[int]) -> int:
    """Estimated bytes of a trace showing ``ranks_per_stage[s]`` ranks of each stage ``s``."""
    events = sum(n * stage_events(prog, prog.stages[s]) for s, n in ranks_per_stage.items())
    return events * BYTES_PER_EVENT


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
                     per_rank: bool, simulated: Iterable[int], force: bool) -> None:
    """Refuse (exit 2) a trace estimated over :data:`LIMIT_BYTES` unless ``force``."""
    counts = shown_per_stage(spec, placement, per_rank, simulated)
    size = estimate_trace_bytes(prog, counts)
    if size > LIMIT_BYTES and not force:
        raise UsageError(
            f"the trace of {sum(counts.values())} ranks would be about {size / 1e6:,.0f} MB "
            f"(over {LIMIT_BYTES / 1e6:.0f} MB): show fewer ranks with --trace-ranks (e.g. "
            "stage-reps), or add --force to write it anyway", field="--trace")

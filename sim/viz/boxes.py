"""The data behind the timeline plot: engine spans merged into per-op boxes (integer ns).

The engine records compute per *layer*; a figure of a 16-stage × 16-microbatch run would drown
in ~25 000 slivers. Each stage row therefore gets two lanes:

- ``compute`` lane — tiles ``[0, iteration]`` exactly, one box per:
  - pipeline op: every compute span of one (microbatch, chunk, direction) on the rank, from the
    op's first to its last span, *including* the blocking (TP/EP) collectives inside it. Kind
    ``forward``; ``backward`` (input-grad, with the weight-grad the engine runs right after each
    layer's input-grad; in the split-backward schedules,
    :attr:`~sim.pipeline.types.Schedule.splits_backward`,
    the input-grad ``B`` op only, as for DualPipe's backwards whose ``W`` is deferred);
    ``weight_grad`` (the separate ``W`` op of a split-backward schedule, or an op with
    weight-grad compute only); DualPipe's overlapped F&B op is its forward box followed by its
    backward box;
  - ``compute`` (iteration-level rows: embedding grads, loss, …) and ``optimizer``;
  - ``bubble`` (waiting for another stage, or idle after finishing);
  - ``exposed_<G>``: the compute stream blocked on group ``G`` outside any op (waiting for a
    pipeline transfer in flight, for outstanding DP gradient reductions, or a blocking
    iteration-level collective).
- ``comm`` lane — every communication of the rank on its own stream: blocking TP/EP collectives
  (exposed), pipeline sends (PP) and asynchronous DP gradient reductions (overlapped unless an
  ``exposed_DP`` box says otherwise). Kind = group name.

Spans of the same kind and lane that touch (one ends where the next starts) are merged; ops are
never merged with each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.engine.result import SimResult, Span
from sim.pipeline.schedules import schedule_table

PHASE_KINDS = ("forward", "input_grad", "weight_grad")
LANES = ("compute", "comm")
COMM_ORDER = ("TP", "EP", "ETP", "PP", "DP", "DP_EP", "EMB")


@dataclass(frozen=True, slots=True)
class Box:
    """One rectangle of the timeline: ``[start_ns, end_ns)`` on ``lane`` of row ``row``."""

    row: int
    lane: str
    start_ns: int
    end_ns: int
    kind: str
    microbatch: int = -1
    chunk: int = -1

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def label(self, with_chunk: bool) -> str:
        """Microbatch number of an op box (``"3"``, or ``"3.1"`` = microbatch 3, chunk 1)."""
        if self.microbatch < 0:
            return ""
        return f"{self.microbatch}.{self.chunk}" if with_chunk else str(self.microbatch)


def span_phase(span: Span) -> str:
    """The layer phase of a span: its kind for compute, the label suffix for collectives."""
    if span.kind in PHASE_KINDS:
        return span.kind
    return span.label.rsplit(".", 1)[-1]


def arg(span: Span, key: str, default: object = None) -> object:
    for k, v in span.args:
        if k == key:
            return v
    return default


def is_blocking(span: Span) -> bool:
    """A collective that stalls the compute stream (its time is exposed communication)."""
    return span.kind == "comm" and span.stream != "PP" and bool(arg(span, "blocking", False))


def op_key(span: Span, split: bool = False) -> tuple[int, int, str] | None:
    """``(microbatch, chunk, 'F'|'B'|'W')`` for compute/blocking-comm spans of a pipeline op;
    ``split``: the schedule runs the weight-gradient phases as separate ``W`` ops."""
    if span.microbatch < 0:
        return None
    if span.stream == "compute":
        if span.kind not in PHASE_KINDS:
            return None
    elif not is_blocking(span):
        return None
    phase = span_phase(span)
    if phase == "forward":
        return span.microbatch, span.chunk, "F"
    return span.microbatch, span.chunk, "W" if split and phase == "weight_grad" else "B"


def compute_lane_kind(span: Span) -> str | None:
    """Compute-lane kind of a span that is not part of an op (None: not on the compute lane)."""
    if span.stream == "compute":
        if span.kind in PHASE_KINDS:
            return "compute"
        if span.kind == "recv_wait":
            return "exposed_PP"
        if span.kind == "comm_wait":
            return f"exposed_{arg(span, 'group', 'DP')}"
        return span.kind  # optimizer, bubble
    if is_blocking(span):
        return f"exposed_{span.stream}"
    return None


def timeline_boxes(result: SimResult, ranks: Sequence[int]) -> list[Box]:
    """Boxes for ``ranks`` (row ``i`` = ``ranks[i]``), sorted by (row, lane, start, end)."""
    row_of = {r: i for i, r in enumerate(ranks)}
    split = result.program.schedule_type.splits_backward
    deferred = deferred_weight_passes(result)
    ops: dict[tuple, list] = {}  # (row, mb, chunk, dir) -> [start, end, has_ig, has_wg, has_f]
    singles: list[Box] = []
    for s in result.spans:
        row = row_of.get(s.rank)
        if row is None:
            continue
        key = op_key(s, split or (s.rank, s.microbatch, s.chunk) in deferred)
        if key is not None:
            e = ops.get((row,) + key)
            if e is None:
                e = ops[(row,) + key] = [s.start_ns, s.end_ns, False, False]
            else:
                e[0] = min(e[0], s.start_ns)
                e[1] = max(e[1], s.end_ns)
            if s.kind == "input_grad":
                e[2] = True
            elif s.kind == "weight_grad":
                e[3] = True
        else:
            kind = compute_lane_kind(s)
            if kind is not None:
                singles.append(Box(row, "compute", s.start_ns, s.end_ns, kind))
        if s.stream != "compute":
            singles.append(Box(row, "comm", s.start_ns, s.end_ns, s.stream))
    boxes = [_merge_touching(singles)]
    op_boxes = []
    for (row, mb, chunk, d), (t0, t1, ig, wg) in ops.items():
        kind = "forward" if d == "F" else (
            "backward" if d == "B" and (ig or not wg) else "weight_grad")
        if t1 > t0:
            op_boxes.append(Box(row, "compute", t0, t1, kind, mb, chunk))
    boxes.append(op_boxes)
    out = [b for part in boxes for b in part]
    out.sort(key=lambda b: (b.row, LANES.index(b.lane), b.start_ns, b.end_ns, b.kind))
    return out


def deferred_weight_passes(result: SimResult) -> frozenset[tuple[int, int, int]]:
    """``(rank, microbatch, chunk)`` whose backward is input-gradient only with a separate
    ``W`` op, in a schedule that mixes both (DualPipe); empty elsewhere."""
    prog = result.program
    if not prog.schedule_type.partly_splits_backward:
        return frozenset()
    table = schedule_table(prog.schedule, prog.pp, prog.microbatches, prog.vpp)
    return frozenset((st.rank, op.microbatch, op.chunk) for st in result.ranks
                     for op in table[st.stage] if op.kind == "B" and op.weights is False)


def _merge_touching(boxes: list[Box]) -> list[Box]:
    """Merge boxes of the same (row, lane, kind) where one ends exactly where the next starts."""
    boxes = sorted(boxes, key=lambda b: (b.row, b.lane, b.kind, b.start_ns, b.end_ns))
    out: list[Box] = []
    for b in boxes:
        if b.start_ns == b.end_ns:
            continue  # zero-length (e.g. a free collective): nothing to draw
        last = out[-1] if out else None
        if (last is not None and (last.row, last.lane, last.kind) == (b.row, b.lane, b.kind)
                and last.end_ns == b.start_ns):
            out[-1] = Box(b.row, b.lane, last.start_ns, b.end_ns, b.kind)
        else:
            out.append(b)
    return out

"""The op of a pipeline schedule (:mod:`sim.pipeline.types`): what one stage runs next, as
data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sim.errors import UsageError


@dataclass(frozen=True, slots=True)
class ScheduleOp:
    """``F`` (forward), ``B`` (backward) or ``W`` (weight-gradient pass) of ``microbatch`` on
    model chunk ``chunk``. In the split-backward schedules
    (:attr:`sim.pipeline.types.Schedule.splits_backward`)
    ``B`` is the input-gradient pass only; elsewhere it is the whole backward, unless
    ``weights`` says otherwise for this op (DualPipe mixes both: ``weights=False`` marks an
    input-gradient pass whose ``W`` runs later). ``paired``: the backward that runs with this
    forward as one overlapped F&B op (DualPipe); its compute follows the forward's."""

    kind: str
    microbatch: int
    chunk: int = 0
    weights: bool | None = None
    paired: ScheduleOp | None = None

    def __str__(self) -> str:
        return self.label(bool(self.chunk))

    def label(self, with_chunk: bool) -> str:
        kind = "I" if self.kind == "B" and self.weights is False else self.kind
        own = f"{kind}{self.microbatch}" + (f".{self.chunk}" if with_chunk else "")
        return own + (f"&{self.paired.label(with_chunk)}" if self.paired else "")

    def input_grad_only(self, split: bool) -> bool:
        """Whether this ``B`` runs the input-gradient pass only (``split``: the schedule's
        convention, :attr:`sim.pipeline.types.Schedule.splits_backward`)."""
        return split if self.weights is None else not self.weights


def check_args(p: int, r: int, m: int) -> None:
    """Pipeline size ``p ≥ 1``, ``m ≥ 1`` microbatches and a stage ``r`` in ``0..p−1``."""
    if p < 1:
        raise UsageError(f"pipeline size must be ≥ 1, got {p}", field="pp")
    if m < 1:
        raise UsageError(f"microbatches must be ≥ 1, got {m}", field="microbatches")
    if not 0 <= r < p:
        raise ValueError(f"stage {r} outside 0..{p - 1}")


def op_edges(ops: list[ScheduleOp], split: bool) -> list[tuple[bool, bool]]:
    """Per op (and its paired backward): whether it is its chunk's first forward (it waits for
    the parameter all-gathers) or, for a backward or weight pass, the chunk's last op of its
    kind that computes weight gradients — whole ``B`` and ``W`` — or, for an input-gradient
    ``B``, the chunk's last ``B`` (these issue the gradient reductions; with one microbatch
    order per chunk, the ops of microbatch 0 and M−1)."""
    first: dict[int, int] = {}
    last: dict[tuple[str, int], int] = {}
    for i, op in enumerate(ops):
        for o in (op, op.paired) if op.paired else (op,):
            if o.kind == "F":
                first.setdefault(o.chunk, i)
            elif o.kind == "W" or not o.input_grad_only(split):
                last["WB", o.chunk] = i
            if o.kind == "B":
                last["B", o.chunk] = i

    def edge(i: int, o: ScheduleOp) -> bool:
        if o.kind == "F":
            return first[o.chunk] == i
        if o.kind == "B" and o.input_grad_only(split):
            return last["B", o.chunk] == i
        return last["WB", o.chunk] == i

    return [(edge(i, op), edge(i, op.paired) if op.paired else False)
            for i, op in enumerate(ops)]


def op_passes(ops: list[ScheduleOp], split: bool, defers: Callable[[int, int], bool]
              ) -> list[tuple[tuple[ScheduleOp, ...], tuple[bool, bool], tuple[str, ...]]]:
    """Per op: the op and its paired backward, their edges (:func:`op_edges`) and the passes
    they run: ``F``, ``W``, whole ``B``, input-gradient ``I``, or ``Bd``, a whole backward
    that defers its output-layer weight gradient (``defers(chunk, microbatch)``:
    Megatron-Core's defer_embedding_wgrad_compute)."""
    def kind(o: ScheduleOp) -> str:
        if o.kind != "B":
            return o.kind
        return "I" if o.input_grad_only(split) else "Bd" if defers(o.chunk, o.microbatch) \
            else "B"

    out = []
    for op, edges in zip(ops, op_edges(ops, split), strict=True):
        parts = (op,) if op.paired is None else (op, op.paired)
        out.append((parts, edges, tuple(kind(o) for o in parts)))
    return out


def pair_steady_state(ops: list[ScheduleOp]) -> list[ScheduleOp]:
    """``ops`` with every forward that a backward directly follows (the 1F1B steady state) made
    one F&B op with it (:attr:`ScheduleOp.paired`); warm-up forwards and cool-down backwards
    stay alone."""
    out: list[ScheduleOp] = []
    i = 0
    while i < len(ops):
        op = ops[i]
        if op.kind == "F" and i + 1 < len(ops) and ops[i + 1].kind == "B":
            out.append(replace(op, paired=ops[i + 1]))
            i += 2
        else:
            out.append(op)
            i += 1
    return out

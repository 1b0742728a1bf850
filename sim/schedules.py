"""Pipeline schedules as pure functions: the per-rank order of forward/backward ops.

Exactly as Megatron-LM runs them (see docs/schedules.md). Notation: ``p`` pipeline stages,
``r`` this stage (0 = first), ``M`` microbatches per iteration, ``v`` model chunks per stage,
``N`` the interleaved schedule's microbatch group size (default ``p``).

The engine times these orders; nothing here knows about time.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import UsageError
from sim.limits import MAX_WORK

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
SPLIT_BACKWARD = frozenset({"zb-h1"})
"""Schedules whose ``B`` op is the input-gradient pass only, with a separate ``W`` op for the
weight-gradient pass (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024)."""


@dataclass(frozen=True, slots=True)
class ScheduleOp:
    """``F`` (forward), ``B`` (backward) or ``W`` (weight-gradient pass) of ``microbatch`` on
    model chunk ``chunk``. In the split-backward schedules (:data:`SPLIT_BACKWARD`) ``B`` is the
    input-gradient pass only; elsewhere it is the whole backward."""

    kind: str
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")

    def label(self, with_chunk: bool) -> str:
        return f"{self.kind}{self.microbatch}.{self.chunk}" if with_chunk else str(self)


def _check(p: int, r: int, m: int) -> None:
    if p < 1:
        raise UsageError(f"pipeline size must be ≥ 1, got {p}", field="--pp")
    if m < 1:
        raise UsageError(f"microbatches must be ≥ 1, got {m}", field="--microbatches")
    if not 0 <= r < p:
        raise ValueError(f"stage {r} outside 0..{p - 1}")


def gpipe(p: int, r: int, m: int) -> list[ScheduleOp]:
    """All M forwards, then all M backwards in FIFO order (Megatron style)."""
    _check(p, r, m)
    return [ScheduleOp("F", i) for i in range(m)] + [ScheduleOp("B", i) for i in range(m)]


def one_f_one_b(p: int, r: int, m: int) -> list[ScheduleOp]:
    """Non-interleaved 1F1B: warmup ``min(p−r−1, M)`` forwards, steady F/B pairs, cooldown."""
    _check(p, r, m)
    w = min(p - r - 1, m)
    steady = m - w
    ops = [ScheduleOp("F", i) for i in range(w)]
    for i in range(steady):
        ops.append(ScheduleOp("F", w + i))
        ops.append(ScheduleOp("B", i))
    ops.extend(ScheduleOp("B", i) for i in range(steady, m))
    return ops


def check_zero_bubble(p: int, m: int) -> None:
    """ZB-H1's constraint: at least as many microbatches as stages (its W deferral of up to
    ``p−1`` passes fills the cooldown of a pipeline in steady state; with ``M < p`` there is
    none, and 1F1B is the schedule to use). Raises :class:`UsageError`."""
    if m < p:
        raise UsageError(f"the zb-h1 schedule needs at least as many microbatches as pipeline "
                         f"stages (M={m} < p={p}); use --schedule 1f1b", field="--microbatches")


def zb_h1(p: int, r: int, m: int) -> list[ScheduleOp]:
    """ZB-H1 (Qi et al., ICLR 2024, section 3.1): 1F1B's order of ``F`` and ``B`` (warmup
    ``min(p−r−1, M)`` forwards, steady F/B pairs, cooldown), with each weight-gradient pass
    ``W`` split off the backward and deferred: on stage ``r``, ``W(i)`` follows ``B(i+r)``; the
    ``W`` left at the end run after the last ``B``. The input-gradient chain up the pipeline is
    no longer delayed by weight gradients, and the deferred ``W`` fill the cooldown. Derivation
    of the iteration time in docs/schedules.md."""
    _check(p, r, m)
    w = min(p - r - 1, m)
    ops = [ScheduleOp("F", i) for i in range(w)]
    for i in range(m):
        if i < m - w:
            ops.append(ScheduleOp("F", w + i))
        ops.append(ScheduleOp("B", i))
        if i >= r:
            ops.append(ScheduleOp("W", i - r))
    ops.extend(ScheduleOp("W", i) for i in range(max(m - r, 0), m))
    return ops


def check_interleaved(p: int, m: int, v: int, n: int | None = None) -> int:
    """Megatron's constraints on the interleaved schedule; returns the group size N.

    Raises :class:`UsageError` naming the violated constraint.
    """
    if v < 2:
        raise UsageError(
            f"the interleaved schedule needs a virtual pipeline size ≥ 2 (got {v}); "
            "use --schedule 1f1b or set --vpp",
            field="--vpp",
        )
    if p < 2:
        raise UsageError("the interleaved schedule needs ≥ 2 pipeline stages", field="--pp")
    group = p if n is None else n
    if not p <= group <= m:
        raise UsageError(
            f"interleaved schedule: microbatch group size N={group} must lie in [p={p}, M={m}] "
            f"(Megatron needs at least as many microbatches as pipeline stages)",
            field="--microbatches",
        )
    if m % group != 0 and m % group < p:
        raise UsageError(
            f"interleaved schedule: M mod N = {m} mod {group} = {m % group} must be 0 or ≥ p={p} "
            "(Megatron refuses this: dependency bubbles)",
            field="--microbatches",
        )
    return group


def interleaved_table(m: int, v: int, n: int) -> list[tuple[int, int]]:
    """Megatron's schedule table: virtual id k → (microbatch, chunk); chunk is the outer loop
    inside each group of N microbatches."""
    table: list[tuple[int, int]] = []
    for g in range(0, m, n):
        hi = m if g + n >= m else g + n
        for c in range(v):
            table.extend((mb, c) for mb in range(g, hi))
    return table


def interleaved(p: int, r: int, m: int, v: int, n: int | None = None) -> list[ScheduleOp]:
    """Interleaved 1F1B with ``v`` chunks per stage (virtual stage of chunk c = c·p + r)."""
    _check(p, r, m)
    group = check_interleaved(p, m, v, n)
    table = interleaved_table(m, v, group)
    total = m * v
    w = min(2 * (p - r - 1) + (v - 1) * group, total)
    steady = total - w

    def fwd(k: int) -> ScheduleOp:
        mb, c = table[k]
        return ScheduleOp("F", mb, c)

    def bwd(k: int) -> ScheduleOp:
        mb, c = table[k]
        return ScheduleOp("B", mb, v - 1 - c)

    ops = [fwd(k) for k in range(w)]
    for k in range(steady):
        ops.append(fwd(w + k))
        ops.append(bwd(k))
    ops.extend(bwd(k) for k in range(steady, total))
    return ops


MAX_OPS = MAX_WORK
"""Most forward/backward ops (2·p·v·M over all stages;
3·p·v·M with separate W passes) one iteration may have: simrun's work
budget (:mod:`sim.limits`; ~1.3 GB of schedule and minutes of simulation); realistic layouts
stay far below (p=128, v=8, M=4096 is 8.4 M). More is a mistyped ``--microbatches`` /
``--global-batch``, refused instead of exhausting memory."""


def schedule_table(
    name: str, p: int, m: int, v: int = 1, n: int | None = None
) -> list[list[ScheduleOp]]:
    """Per-stage op order for schedule ``name`` (one list per stage, stage 0 first)."""
    per = 3 if name in SPLIT_BACKWARD else 2
    if per * p * m * v > MAX_OPS:
        raise UsageError(f"{m} microbatches × {p} stages × {v} chunks = {per * p * m * v:,} "
                         f"forward/backward ops per iteration; simrun simulates at most "
                         f"{MAX_OPS:,} (fewer microbatches, or a larger micro-batch)",
                         field="--microbatches")
    if name == "gpipe" or name == "1f1b":
        if v != 1:
            raise UsageError(
                f"the {name} schedule runs one model chunk per stage; got a virtual pipeline "
                f"size of {v} (use --schedule interleaved or --vpp 1)",
                field="--schedule",
            )
        fn = gpipe if name == "gpipe" else one_f_one_b
        return [fn(p, r, m) for r in range(p)]
    if name == "interleaved":
        return [interleaved(p, r, m, v, n) for r in range(p)]
    if name == "zb-h1":
        if v != 1:
            raise UsageError(f"the zb-h1 schedule runs one model chunk per stage; got a virtual "
                             f"pipeline size of {v} (use --vpp 1)", field="--schedule")
        check_zero_bubble(p, m)
        return [zb_h1(p, r, m) for r in range(p)]
    raise UsageError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}",
                     field="--schedule")


def ideal_bubble_fraction(name: str, p: int, m: int, v: int = 1) -> float:
    """Bubble time / ideal time with equal stages and free communication.

    GPipe and 1F1B: ``(p−1)/M``; interleaved: ``(p−1)/(v·M)``; ZB-H1 with the paper's
    equal forward, input-gradient and weight-gradient times: ``(p−1)/(3M)`` (its bubble
    ``(p−1)(F+B−W)`` against ``M(F+B+W)``; docs/schedules.md).
    """
    if name == "zb-h1":
        return (p - 1) / (3 * m)
    return (p - 1) / (m * (v if name == "interleaved" else 1))

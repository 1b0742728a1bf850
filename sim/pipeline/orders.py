"""The 1F1B family's op orders as pure functions (Megatron-LM's schedules; docs/schedules.md):
GPipe, non-interleaved 1F1B and interleaved 1F1B.

Notation: ``p`` pipeline stages, ``r`` this stage (0 = first), ``M`` microbatches per
iteration, ``v`` model chunks per stage, ``N`` the interleaved schedule's microbatch group size
(default ``p``). Nothing here knows about time.
"""

from __future__ import annotations

from sim.errors import UsageError
from sim.pipeline.ops import ScheduleOp, check_args

_check = check_args


def gpipe(p: int, r: int, m: int) -> list[ScheduleOp]:
    """All M forwards, then all M backwards in FIFO order (Megatron style)."""
    _check(p, r, m)
    return [ScheduleOp("F", i) for i in range(m)] + [ScheduleOp("B", i) for i in range(m)]


def one_f_one_b(p: int, r: int, m: int, extra_warmup: int = 0) -> list[ScheduleOp]:
    """Non-interleaved 1F1B: warmup ``min(p−r−1, M)`` forwards (``extra_warmup`` more: see
    :meth:`~sim.pipeline.types.Schedule.combined_ops`), steady F/B pairs, cooldown."""
    _check(p, r, m)
    w = min(p - r - 1 + extra_warmup, m)
    steady = m - w
    ops = [ScheduleOp("F", i) for i in range(w)]
    for i in range(steady):
        ops.append(ScheduleOp("F", w + i))
        ops.append(ScheduleOp("B", i))
    ops.extend(ScheduleOp("B", i) for i in range(steady, m))
    return ops


def check_interleaved(p: int, m: int, v: int, n: int | None = None) -> int:
    """Megatron's constraints on the interleaved schedule; returns the group size N.

    Raises :class:`UsageError` naming the violated constraint.
    """
    if v < 2:
        raise UsageError(
            f"the interleaved schedule needs a virtual pipeline size ≥ 2 (got {v}); "
            "use --schedule 1f1b or set --vpp",
            field="vpp",
        )
    if p < 2:
        raise UsageError("the interleaved schedule needs ≥ 2 pipeline stages", field="pp")
    group = p if n is None else n
    if not p <= group <= m:
        raise UsageError(
            f"interleaved schedule: microbatch group size N={group} must lie in [p={p}, M={m}] "
            f"(Megatron needs at least as many microbatches as pipeline stages)",
            field="microbatches",
        )
    if m % group != 0 and m % group < p:
        raise UsageError(
            f"interleaved schedule: M mod N = {m} mod {group} = {m % group} must be 0 or ≥ p={p} "
            "(Megatron refuses this: dependency bubbles)",
            field="microbatches",
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


def interleaved(p: int, r: int, m: int, v: int, n: int | None = None,
                extra_warmup: int = 0) -> list[ScheduleOp]:
    """Interleaved 1F1B with ``v`` chunks per stage (virtual stage of chunk c = c·p + r);
    ``extra_warmup`` more warm-up forwards (:meth:`~sim.pipeline.types.Schedule.combined_ops`)."""
    _check(p, r, m)
    group = check_interleaved(p, m, v, n)
    table = interleaved_table(m, v, group)
    total = m * v
    w = min(2 * (p - r - 1) + (v - 1) * group + extra_warmup, total)
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

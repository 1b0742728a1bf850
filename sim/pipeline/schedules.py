"""Pipeline schedules by name: the functions the rest of simrun calls with a schedule's name,
each delegating to its :class:`~sim.pipeline.types.Schedule` (:mod:`sim.pipeline.registry`).

Exactly as Megatron-LM runs them (see docs/schedules.md). Notation: ``p`` pipeline stages,
``r`` this stage (0 = first), ``M`` microbatches per iteration, ``v`` model chunks per stage,
``N`` the interleaved schedule's microbatch group size (default ``p``). The op orders are pure
functions (:mod:`sim.pipeline.orders`, :mod:`sim.pipeline.zero_bubble`,
:mod:`sim.pipeline.dualpipe`); the engine times them; nothing here knows about time.
"""

from __future__ import annotations

from functools import lru_cache

from sim.errors import UsageError
from sim.limits import MAX_WORK
from sim.pipeline.ops import ScheduleOp, check_args
from sim.pipeline.orders import (
    check_interleaved,
    gpipe,
    interleaved,
    interleaved_table,
    one_f_one_b,
)
from sim.pipeline.registry import SCHEDULES, find_schedule, schedule_type

# the zero-bubble orders load on first use (module __getattr__ below)
_ZERO_BUBBLE = ("check_zb_h2", "check_zb_v", "check_zero_bubble", "zb_h1", "zb_h2", "zb_v")
__all__ = ["SCHEDULES", "ScheduleOp", "check_args", "check_interleaved", "gpipe", "interleaved",
           "interleaved_table", "one_f_one_b", *_ZERO_BUBBLE]


def __getattr__(name: str):
    """The zero-bubble orders (:mod:`sim.pipeline.zero_bubble`), loaded on first use."""
    if name in _ZERO_BUBBLE:
        from sim.pipeline import zero_bubble

        return getattr(zero_bubble, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def virtual_stage(name: str, p: int, stage: int, chunk: int) -> int:
    """The virtual stage (0 = the first layers) that ``chunk`` of pipeline ``stage`` runs under
    schedule ``name`` (:meth:`~sim.pipeline.types.Schedule.virtual_stage`)."""
    return schedule_type(name).virtual_stage(p, stage, chunk)


def default_vpp(name: str | None) -> int:
    """Model chunks per stage when the user gives none: 2 for ZB-V and DualPipe (one stage per
    direction), else 1 (also for no name or an unknown one, refused later)."""
    typ = find_schedule(name)
    return 1 if typ is None else typ.default_vpp


def virtual_stage_count(name: str, p: int, v: int) -> int:
    """How many parts the model's layers are split into: ``p·v``, or ``p`` for DualPipe (whose
    two chunks per rank are two stages of the same ``p``-stage split, one per direction)."""
    return schedule_type(name).virtual_stage_count(p, v)


def pipe_peers(name: str, p: int, v: int, stage: int, chunk: int) -> tuple[int | None, int | None]:
    """``(stage that sends chunk's forward input, stage its forward output goes to)``
    (:meth:`~sim.pipeline.types.Schedule.peers`)."""
    return schedule_type(name).peers(p, v, stage, chunk)


def stage_chunk(name: str, p: int, vs: int) -> tuple[int, int]:
    """``(stage, chunk)`` running virtual stage ``vs`` (inverse of :func:`virtual_stage`; not
    for DualPipe, where two ranks run each model stage)."""
    return schedule_type(name).stage_chunk(p, vs)


def combined_1f1b(name: str, p: int, r: int, m: int, v: int = 1,
                  n: int | None = None) -> list[ScheduleOp]:
    """Megatron-Core's order with ``--overlap-moe-expert-parallel-comm`` (megatron/core/
    pipeline_parallel/schedules.py ``get_pp_rank_microbatches``: one warm-up forward more than
    the interleaved schedule, "to ensure the forward and backward computations are independent
    in all 1f1b steps"; without pipelining, combined_1f1b.py: the first forward alone, then
    the backward of microbatch i with the forward of i + 1, then the last backward): each
    steady-state forward runs with the backward after it as one F&B op
    (:func:`~sim.pipeline.ops.pair_steady_state`). Megatron needs the interleaved schedule
    when ``p > 1``."""
    return schedule_type(name).combined_ops(p, r, m, v, n)


MAX_OPS = MAX_WORK
"""Most forward/backward ops (2·p·v·M over all stages;
3·p·v·M with separate W passes) one iteration may have: simrun's work
budget (:mod:`sim.limits`; ~1.3 GB of schedule and minutes of simulation); realistic layouts
stay far below (p=128, v=8, M=4096 is 8.4 M). More is a mistyped ``--microbatches`` /
``--global-batch``, refused instead of exhausting memory."""


def check_schedule(name: str, p: int, m: int, v: int = 1, n: int | None = None, *,
                   vpp_field: str = "schedule") -> None:
    """Every constraint schedule ``name`` puts on the layout (pipeline size ``p``, ``m``
    microbatches, ``v`` chunks per stage, interleaved group size ``n``); the one check that
    single runs, workload files and sweeps share. Raises :class:`UsageError` (``vpp_field``:
    the option named when a one-chunk schedule gets ``v > 1``)."""
    schedule_type(name).check(p, m, v, n, vpp_field=vpp_field)


def schedule_table(
    name: str, p: int, m: int, v: int = 1, n: int | None = None, ep_a2a_overlap: bool = False
) -> list[list[ScheduleOp]]:
    """Per-stage op order for schedule ``name`` (one list per stage, stage 0 first);
    ``ep_a2a_overlap``: Megatron-Core's combined 1F1B (:func:`combined_1f1b`)."""
    return [list(ops) for ops in schedule_tuples(name, p, m, v, n, ep_a2a_overlap)]


def schedule_tuples(
    name: str, p: int, m: int, v: int = 1, n: int | None = None, ep_a2a_overlap: bool = False
) -> tuple[tuple[ScheduleOp, ...], ...]:
    """:func:`schedule_table` as tuples, shared between calls with the same arguments (a
    sweep's layouts repeat a few schedules: read-only)."""
    typ = schedule_type(name)
    n_ops = typ.op_count(p, m, v)
    if n_ops > MAX_OPS:
        raise UsageError(f"{m} microbatches × {p} stages × {v} chunks = {n_ops:,} "
                         f"forward/backward ops per iteration; simrun simulates at most "
                         f"{MAX_OPS:,} (fewer microbatches, or a larger micro-batch)",
                         field="microbatches")
    typ.check(p, m, v, n)
    return _tuples(typ, p, m, v, n, ep_a2a_overlap)


@lru_cache(maxsize=16)
def _tuples(typ, p: int, m: int, v: int, n: int | None, combined: bool
            ) -> tuple[tuple[ScheduleOp, ...], ...]:
    if combined:
        return tuple(tuple(typ.combined_ops(p, r, m, v, n)) for r in range(p))
    return tuple(tuple(typ.ops(p, r, m, v, n)) for r in range(p))


def ideal_bubble_formula(name: str) -> str:
    """:func:`ideal_bubble_fraction` of schedule ``name`` as a formula (for reports)."""
    return schedule_type(name).bubble_formula


def ideal_bubble_fraction(name: str, p: int, m: int, v: int = 1) -> float:
    """Bubble time / ideal time with equal stages and free communication.

    GPipe and 1F1B: ``(p−1)/M``; interleaved: ``(p−1)/(v·M)``; ZB-H1 with the paper's
    equal forward, input-gradient and weight-gradient times: ``(p−1)/(3M)`` (its bubble
    ``(p−1)(F+B−W)`` against ``M(F+B+W)``; docs/schedules.md); ZB-V with equal per-chunk
    times: ``(p−1)/(6M)`` (the fill ``(p−1)F`` of one chunk against ``2M(F+B+W)``); ZB-H2 with
    equal times: ``(p−1)/(3M)``, the parallelogram's edge ``(p−1)F`` that simrun's synchronous
    optimizer step leaves (no bubble inside any stage; the paper's optimizer post-validation,
    not modelled, would overlap the edge with the next iteration); DualPipe with equal
    per-stage times: ``(p−2)/(3M)``, DeepSeek-V3's ``(p/2−1)(F&B + B − 3W)`` (``B`` the whole
    backward, ``F&B`` the overlapped chunk, ``F + B`` in simrun) against ``M(F+B)``.
    """
    return schedule_type(name).ideal_bubble(p, m, v)

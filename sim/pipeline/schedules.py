"""Pipeline schedules as pure functions: the per-rank order of forward/backward ops.

Exactly as Megatron-LM runs them (see docs/schedules.md). Notation: ``p`` pipeline stages,
``r`` this stage (0 = first), ``M`` microbatches per iteration, ``v`` model chunks per stage,
``N`` the interleaved schedule's microbatch group size (default ``p``).

The engine times these orders; nothing here knows about time.
"""

from __future__ import annotations

from sim.errors import UsageError
from sim.limits import MAX_WORK
from sim.pipeline.dualpipe import check_dualpipe, dualpipe, dualpipe_peers, dualpipe_stage
from sim.pipeline.ops import ScheduleOp, check_args, pair_steady_state

__all__ = ["ScheduleOp", "check_args"]  # the op type's home is sim.pipeline.ops

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipe")
SPLIT_BACKWARD = frozenset({"zb-h1", "zb-h2", "zb-v"})
"""Schedules whose ``B`` op is the input-gradient pass only, with a separate ``W`` op for the
weight-gradient pass (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024)."""
V_SHAPE = frozenset({"zb-v"})
"""Schedules with two chunks per stage in V placement: chunk 0 of stage ``r`` is virtual stage
``r``, chunk 1 is virtual stage ``2p−1−r`` (elsewhere chunk ``c`` is virtual stage ``c·p+r``)."""


def virtual_stage(name: str, p: int, stage: int, chunk: int) -> int:
    """The virtual stage (0 = the first layers) that ``chunk`` of pipeline ``stage`` runs under
    schedule ``name``: ``c·p + r`` (interleaved placement) or, for :data:`V_SHAPE`, ``r`` and
    ``2p−1−r``; for DualPipe, the model stage of the chunk's direction, ``r`` or ``p−1−r``
    (:func:`~sim.pipeline.dualpipe.dualpipe_stage`)."""
    if name == "dualpipe":
        return dualpipe_stage(p, stage, chunk)
    if name in V_SHAPE and chunk == 1:
        return 2 * p - 1 - stage
    return chunk * p + stage


def default_vpp(name: str | None) -> int:
    """Model chunks per stage when the user gives none: 2 for :data:`V_SHAPE` and DualPipe
    (one stage per direction), else 1."""
    return 2 if name in V_SHAPE or name == "dualpipe" else 1


def virtual_stage_count(name: str, p: int, v: int) -> int:
    """How many parts the model's layers are split into: ``p·v``, or ``p`` for DualPipe (whose
    two chunks per rank are two stages of the same ``p``-stage split, one per direction)."""
    return p if name == "dualpipe" else p * v


def pipe_peers(name: str, p: int, v: int, stage: int, chunk: int) -> tuple[int | None, int | None]:
    """``(stage that sends chunk's forward input, stage its forward output goes to)`` (the
    backward gradients travel the other way); ``None`` where there is no transfer: the ends
    of the pipeline, or the turn of a V, which stays on the stage."""
    if name == "dualpipe":
        return dualpipe_peers(p, stage, chunk)
    vs, last = virtual_stage(name, p, stage, chunk), p * v - 1
    prv = stage_chunk(name, p, vs - 1)[0] if vs > 0 else None
    nxt = stage_chunk(name, p, vs + 1)[0] if vs < last else None
    return (None if prv == stage else prv), (None if nxt == stage else nxt)


def stage_chunk(name: str, p: int, vs: int) -> tuple[int, int]:
    """``(stage, chunk)`` running virtual stage ``vs`` (inverse of :func:`virtual_stage`; not
    for DualPipe, where two ranks run each model stage)."""
    if name == "dualpipe":
        raise ValueError("dualpipe runs every model stage on two ranks")
    if name in V_SHAPE and vs >= p:
        return 2 * p - 1 - vs, 1
    return vs % p, vs // p


_check = check_args


def gpipe(p: int, r: int, m: int) -> list[ScheduleOp]:
    """All M forwards, then all M backwards in FIFO order (Megatron style)."""
    _check(p, r, m)
    return [ScheduleOp("F", i) for i in range(m)] + [ScheduleOp("B", i) for i in range(m)]


def one_f_one_b(p: int, r: int, m: int, extra_warmup: int = 0) -> list[ScheduleOp]:
    """Non-interleaved 1F1B: warmup ``min(p−r−1, M)`` forwards (``extra_warmup`` more: see
    :func:`combined_1f1b`), steady F/B pairs, cooldown."""
    _check(p, r, m)
    w = min(p - r - 1 + extra_warmup, m)
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


def check_zb_h2(p: int, m: int) -> None:
    """ZB-H2's constraint: ``M ≥ 2p−1`` microbatches (stage 0's warm-up runs ``2p−1``
    forwards to fill the time until the first input gradient comes back). Raises
    :class:`UsageError`."""
    if m < 2 * p - 1:
        raise UsageError(f"the zb-h2 schedule needs at least 2p−1 = {2 * p - 1} microbatches "
                         f"(got {m}); use --schedule zb-h1 or 1f1b", field="--microbatches")


def zb_h2(p: int, r: int, m: int) -> list[ScheduleOp]:
    """ZB-H2 (Qi et al., ICLR 2024, section 2.2 / arXiv:2401.10241 section 3.1): zero bubble at
    up to ``2p−1`` microbatches in flight. Stage ``r``: warm-up ``2(p−r)−1`` forwards; ``2r``
    pairs (B, F) with their ``W`` deferred; ``M−2p+1`` triples (B, W, F); ``2(p−r−1)`` pairs
    (B, W); the last B; then the ``2r+1`` deferred ``W``. ``W`` always takes the oldest
    microbatch whose ``B`` has run. With ``F = B = W`` every stage computes without a gap
    from its first forward (a parallelogram; docs/schedules.md). Needs ``M ≥ 2p−1``."""
    _check(p, r, m)
    check_zb_h2(p, m)
    nxt = dict.fromkeys("FBW", 0)
    ops: list[ScheduleOp] = []

    def put(*kinds: str) -> None:
        for kind in kinds:
            ops.append(ScheduleOp(kind, nxt[kind]))
            nxt[kind] += 1

    put(*"F" * (2 * (p - r) - 1))
    for _ in range(2 * r):
        put("B", "F")
    for _ in range(m - 2 * p + 1):
        put("B", "W", "F")
    for _ in range(2 * (p - r - 1)):
        put("B", "W")
    put("B", *"W" * (2 * r + 1))
    return ops


def check_zb_v(p: int, m: int, v: int) -> None:
    """ZB-V's constraints: exactly two chunks per stage (V placement) and ``M ≥ 2p−1``
    microbatches (stage 0's warm-up runs ``2p−1`` chunk-0 forwards before its first chunk-1
    forward). Raises :class:`UsageError`."""
    if v != 2:
        raise UsageError(f"the zb-v schedule runs two model chunks per stage in V placement; "
                         f"got a virtual pipeline size of {v} (use --vpp 2)", field="--vpp")
    if m < 2 * p - 1:
        raise UsageError(f"the zb-v schedule needs at least 2p−1 = {2 * p - 1} microbatches "
                         f"(got {m}); use --schedule zb-h1 or 1f1b", field="--microbatches")


def zb_v(p: int, r: int, m: int) -> list[ScheduleOp]:
    """ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv:2401.10241, the handcrafted
    V schedule of sail-sg/zero-bubble-pipeline-parallelism): two chunks per stage in V
    placement (:data:`V_SHAPE`). Warm-up: ``2(p−r)−1`` chunk-0 forwards, ``r`` pairs
    (chunk-1 forward, chunk-0 forward), ``p−r`` triples (F, B, W of chunk 1). Steady: chunk-0
    F (while any are left), B, W, then chunk-1 F, B, W. Cool-down: ``r`` pairs (B of chunk 0,
    B of chunk 1), ``p−r`` pairs (B, W of chunk 0), then the deferred W of chunk 1, then of
    chunk 0. ``W`` always takes the chunk's oldest pending microbatch. Needs ``M ≥ 2p−1``."""
    _check(p, r, m)
    check_zb_v(p, m, 2)
    nxt = {(k, c): 0 for k in "FBW" for c in (0, 1)}
    ops: list[ScheduleOp] = []

    def put(*items: tuple[str, int]) -> None:
        for kind, chunk in items:
            ops.append(ScheduleOp(kind, nxt[kind, chunk], chunk))
            nxt[kind, chunk] += 1

    put(*[("F", 0)] * (2 * (p - r) - 1))
    for _ in range(r):
        put(("F", 1), ("F", 0))
    for _ in range(p - r):
        put(("F", 1), ("B", 1), ("W", 1))
    while nxt["F", 1] < m:
        if nxt["F", 0] < m:
            put(("F", 0))
        put(("B", 0), ("W", 0), ("F", 1), ("B", 1), ("W", 1))
    for _ in range(r):
        put(("B", 0), ("B", 1))
    for _ in range(p - r):
        put(("B", 0), ("W", 0))
    put(*[("W", 1)] * (m - nxt["W", 1]), *[("W", 0)] * (m - nxt["W", 0]))
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


def interleaved(p: int, r: int, m: int, v: int, n: int | None = None,
                extra_warmup: int = 0) -> list[ScheduleOp]:
    """Interleaved 1F1B with ``v`` chunks per stage (virtual stage of chunk c = c·p + r);
    ``extra_warmup`` more warm-up forwards (:func:`combined_1f1b`)."""
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


def combined_1f1b(name: str, p: int, r: int, m: int, v: int = 1,
                  n: int | None = None) -> list[ScheduleOp]:
    """Megatron-Core's order with ``--overlap-moe-expert-parallel-comm`` (megatron/core/
    pipeline_parallel/schedules.py ``get_pp_rank_microbatches``: one warm-up forward more than
    the interleaved schedule, "to ensure the forward and backward computations are independent
    in all 1f1b steps"; without pipelining, combined_1f1b.py: the first forward alone, then
    the backward of microbatch i with the forward of i + 1, then the last backward): each
    steady-state forward runs with the backward after it as one F&B op (:func:`~sim.
    schedule_ops.pair_steady_state`). Megatron needs the interleaved schedule when ``p > 1``."""
    if name == "interleaved":
        ops = interleaved(p, r, m, v, n, extra_warmup=1)
    elif name == "1f1b" and p == 1:
        ops = one_f_one_b(p, r, m, extra_warmup=1)
    else:
        raise UsageError("with pipeline parallelism, Megatron-Core overlaps the expert-parallel "
                         "all-to-alls only in the interleaved schedule (set --vpp)",
                         field="--overlap-moe-expert-parallel-comm")
    return pair_steady_state(ops)


MAX_OPS = MAX_WORK
"""Most forward/backward ops (2·p·v·M over all stages;
3·p·v·M with separate W passes) one iteration may have: simrun's work
budget (:mod:`sim.limits`; ~1.3 GB of schedule and minutes of simulation); realistic layouts
stay far below (p=128, v=8, M=4096 is 8.4 M). More is a mistyped ``--microbatches`` /
``--global-batch``, refused instead of exhausting memory."""


def check_schedule(name: str, p: int, m: int, v: int = 1, n: int | None = None, *,
                   vpp_field: str = "--schedule") -> None:
    """Every constraint schedule ``name`` puts on the layout (pipeline size ``p``, ``m``
    microbatches, ``v`` chunks per stage, interleaved group size ``n``); the one check that
    single runs, workload files and sweeps share. Raises :class:`UsageError` (``vpp_field``:
    the flag named when a one-chunk schedule gets ``v > 1``)."""
    if name not in SCHEDULES:
        raise UsageError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}",
                         field="--schedule")
    if name == "interleaved":
        check_interleaved(p, m, v, n)
        return
    if n is not None:
        raise UsageError(f"only the interleaved schedule groups microbatches; this run uses "
                         f"{name} (virtual pipeline size {v})", field="--microbatch-group-size")
    if name in V_SHAPE:
        check_zb_v(p, m, v)
        return
    if name == "dualpipe":
        check_dualpipe(p, m, v)
        return
    if v != 1:
        hint = "--vpp 1" if name in SPLIT_BACKWARD else "--schedule interleaved or --vpp 1"
        raise UsageError(f"the {name} schedule runs one model chunk per stage; got a virtual "
                         f"pipeline size of {v} (use {hint})", field=vpp_field)
    if name == "zb-h1":
        check_zero_bubble(p, m)
    if name == "zb-h2":
        check_zb_h2(p, m)


def schedule_table(
    name: str, p: int, m: int, v: int = 1, n: int | None = None, ep_a2a_overlap: bool = False
) -> list[list[ScheduleOp]]:
    """Per-stage op order for schedule ``name`` (one list per stage, stage 0 first);
    ``ep_a2a_overlap``: Megatron-Core's combined 1F1B (:func:`combined_1f1b`)."""
    per = 3 if name in SPLIT_BACKWARD or name == "dualpipe" else 2
    n_ops = per * p * m * (1 if name == "dualpipe" else v)  # dualpipe: M/2 per chunk
    if n_ops > MAX_OPS:
        raise UsageError(f"{m} microbatches × {p} stages × {v} chunks = {n_ops:,} "
                         f"forward/backward ops per iteration; simrun simulates at most "
                         f"{MAX_OPS:,} (fewer microbatches, or a larger micro-batch)",
                         field="--microbatches")
    check_schedule(name, p, m, v, n)
    if ep_a2a_overlap:
        return [combined_1f1b(name, p, r, m, v, n) for r in range(p)]
    if name == "interleaved":
        return [interleaved(p, r, m, v, n) for r in range(p)]
    fn = {"gpipe": gpipe, "1f1b": one_f_one_b, "zb-h1": zb_h1, "zb-h2": zb_h2,
          "zb-v": zb_v, "dualpipe": dualpipe}[name]
    return [fn(p, r, m) for r in range(p)]


def ideal_bubble_formula(name: str) -> str:
    """:func:`ideal_bubble_fraction` of schedule ``name`` as a formula (for reports)."""
    return {"interleaved": "(p-1)/(v*M)", "zb-h1": "(p-1)/(3M) if F=B=W",
            "zb-h2": "(p-1)/(3M) if F=B=W (synchronous optimizer step)",
            "dualpipe": "(p-2)/(3M) if F=B=W: (p/2-1)(F&B+B-3W), F&B = F+B",
            "zb-v": "(p-1)/(6M) if F=B=W"}.get(name, "(p-1)/M")


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
    if name == "dualpipe":
        return (p - 2) / (3 * m)
    if name in ("zb-h1", "zb-h2"):
        return (p - 1) / (3 * m)
    if name == "zb-v":
        return (p - 1) / (6 * m)
    return (p - 1) / (m * (v if name == "interleaved" else 1))

"""The zero-bubble schedules' op orders as pure functions (Qi et al., "Zero Bubble Pipeline
Parallelism", ICLR 2024 / arXiv:2401.10241): ZB-H1, ZB-H2 and ZB-V, with their constraints.

Notation as in :mod:`sim.pipeline.orders`. ``B`` is the input-gradient pass only; ``W`` the
weight-gradient pass split off it.
"""

from __future__ import annotations

from sim.errors import UsageError
from sim.pipeline.ops import ScheduleOp, check_args

_check = check_args


def check_zero_bubble(p: int, m: int) -> None:
    """ZB-H1's constraint: at least as many microbatches as stages (its W deferral of up to
    ``p−1`` passes fills the cooldown of a pipeline in steady state; with ``M < p`` there is
    none, and 1F1B is the schedule to use). Raises :class:`UsageError`."""
    if m < p:
        raise UsageError(f"the zb-h1 schedule needs at least as many microbatches as pipeline "
                         f"stages (M={m} < p={p}); use --schedule 1f1b", field="microbatches")


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
                         f"(got {m}); use --schedule zb-h1 or 1f1b", field="microbatches")


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
                         f"got a virtual pipeline size of {v} (use --vpp 2)", field="vpp")
    if m < 2 * p - 1:
        raise UsageError(f"the zb-v schedule needs at least 2p−1 = {2 * p - 1} microbatches "
                         f"(got {m}); use --schedule zb-h1 or 1f1b", field="microbatches")


def zb_v(p: int, r: int, m: int) -> list[ScheduleOp]:
    """ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv:2401.10241, the handcrafted
    V schedule of sail-sg/zero-bubble-pipeline-parallelism): two chunks per stage in V
    placement (:attr:`~sim.pipeline.types.Schedule.v_shape`). Warm-up: ``2(p−r)−1`` chunk-0
    forwards, ``r`` pairs (chunk-1 forward, chunk-0 forward), ``p−r`` triples (F, B, W of
    chunk 1). Steady: chunk-0 F (while any are left), B, W, then chunk-1 F, B, W. Cool-down:
    ``r`` pairs (B of chunk 0, B of chunk 1), ``p−r`` pairs (B, W of chunk 0), then the
    deferred W of chunk 1, then of chunk 0. ``W`` always takes the chunk's oldest pending
    microbatch. Needs ``M ≥ 2p−1``."""
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

"""DualPipe (DeepSeek-V3 technical report, arXiv:2412.19437, §3.2.1; the order of
``DualPipe.step`` in deepseek-ai/DualPipe, ``dualpipe/dualpipe.py``) as a pure function: the
per-rank op order, and where its two pipelines run.

Notation: ``p`` pipeline ranks (even), ``M`` microbatches per iteration (even, ``≥ 2p``), half
fed at each end. simrun's chunk ``c`` is the direction: chunk 0 carries microbatches
``0..M/2−1`` entering at rank 0 (rank ``r`` runs stage ``r`` of the model), chunk 1 the other
half entering at rank ``p−1`` (rank ``r`` runs stage ``p−1−r``): every rank holds two stages,
the model's parameters twice over the pipeline. Microbatch numbers count within a direction.
"""

from __future__ import annotations

from collections import deque

from sim.errors import UsageError
from sim.pipeline.ops import ScheduleOp, check_args


def check_dualpipe(p: int, m: int, v: int) -> None:
    """DualPipe's constraints (``assert``s of ``DualPipe.step``): an even pipeline size, an even
    number of microbatches and at least ``2p`` of them; two chunks (directions) per rank.
    Raises :class:`UsageError`."""
    if v != 2:
        raise UsageError(f"the dualpipe schedule runs two model stages per rank (one per "
                         f"direction); got a virtual pipeline size of {v} (use --vpp 2)",
                         field="vpp")
    if p < 2 or p % 2:
        raise UsageError(f"the dualpipe schedule needs an even pipeline size ≥ 2 (got {p})",
                         field="pp")
    if m % 2 or m < 2 * p:
        raise UsageError(f"the dualpipe schedule needs an even number of microbatches, at least "
                         f"2p = {2 * p} (got {m}): half enter at each end of the pipeline",
                         field="microbatches")


def dualpipe_stage(p: int, rank: int, chunk: int) -> int:
    """The model stage that ``chunk`` (direction) of ``rank`` runs: ``r`` or ``p−1−r``."""
    return rank if chunk == 0 else p - 1 - rank


def dualpipe_peers(p: int, rank: int, chunk: int) -> tuple[int | None, int | None]:
    """``(rank that sends this chunk its activations, rank it sends its own to)``; ``None`` at
    the ends of the chunk's direction."""
    step = 1 if chunk == 0 else -1
    prv, nxt = rank - step, rank + step
    return (prv if 0 <= prv < p else None), (nxt if 0 <= nxt < p else None)


class _Order:
    """The op list of one rank while :func:`dualpipe` walks ``DualPipe.step``: ``phase`` 0 is
    the direction in which the rank is in the first half of the pipeline."""

    def __init__(self, second_half: bool) -> None:
        self.flip = int(second_half)
        self.nf = [0, 0]
        self.nb = [0, 0]
        self.deferred: deque[tuple[int, int]] = deque()  # (microbatch, chunk), FIFO
        self.ops: list[ScheduleOp] = []

    def _f(self, phase: int) -> ScheduleOp:
        c = phase ^ self.flip
        self.nf[c] += 1
        return ScheduleOp("F", self.nf[c] - 1, c)

    def _b(self, phase: int, zb: bool) -> ScheduleOp:
        c = phase ^ self.flip
        self.nb[c] += 1
        if zb:
            self.deferred.append((self.nb[c] - 1, c))
        return ScheduleOp("B", self.nb[c] - 1, c, weights=not zb)

    def f(self, phase: int) -> None:
        self.ops.append(self._f(phase))

    def b(self, phase: int, zb: bool = False) -> None:
        self.ops.append(self._b(phase, zb))

    def w(self) -> None:
        mb, c = self.deferred.popleft()
        self.ops.append(ScheduleOp("W", mb, c))

    def fb(self, phase0: int, phase1: int) -> None:
        fwd = self._f(phase0)
        self.ops.append(ScheduleOp("F", fwd.microbatch, fwd.chunk, paired=self._b(phase1, False)))


def dualpipe(p: int, r: int, m: int) -> list[ScheduleOp]:
    """The op order of rank ``r`` (``DualPipe.step``'s eight steps, with ``h = p/2``, the
    half-rank ``k = min(r, p−1−r)`` and ``M/2`` microbatches per direction; phase 0 is chunk 0
    on the first half of the ranks and chunk 1 on the second):

    1. ``2(h−k−1)`` forwards of phase 0;
    2. ``k+1`` pairs (F phase 0, F phase 1);
    3. ``h−k−1`` triples (input-gradient B of phase 1, the oldest deferred W, F phase 1);
    4. ``M/2−p+k+1`` pairs of overlapped chunks (F phase 0 & B phase 1, F phase 1 & B phase 0);
       on the two middle ranks the first F & B is run as F, then B (the code does not overlap
       them, "to further reduce bubble size");
    5. ``h−k−1`` pairs (B phase 1, F phase 1 & B phase 0);
    6. ``k+1`` pairs (B phase 1, B phase 0), from about the middle of which the backwards are
       input-gradient passes with their W deferred;
    7. ``h−k−1`` pairs (W, input-gradient B of phase 0);
    8. ``k+1`` W.

    ``B`` is a whole backward unless marked input-gradient only (``weights=False``); ``W``
    take the deferred passes in FIFO order; an overlapped chunk is an ``F`` op with its
    ``B`` in :attr:`~sim.pipeline.ops.ScheduleOp.paired`."""
    check_args(p, r, m)
    check_dualpipe(p, m, 2)
    h, k, half_m = p // 2, min(r, p - 1 - r), m // 2
    o = _Order(r >= h)
    middle = k == h - 1
    for _ in range(2 * (h - k - 1)):
        o.f(0)
    for _ in range(k + 1):
        o.f(0)
        o.f(1)
    for _ in range(h - k - 1):
        o.b(1, zb=True)
        o.w()
        o.f(1)
    for i in range(half_m - p + k + 1):
        if i == 0 and middle:
            o.f(0)
            o.b(1)
        else:
            o.fb(0, 1)
        o.fb(1, 0)
    for _ in range(h - k - 1):
        o.b(1)
        o.fb(1, 0)
    zb = False
    for i in range(k + 1):
        if i == (k + 1) // 2 and k % 2 == 1:
            zb = True
        o.b(1, zb)
        if i == (k + 1) // 2 and k % 2 == 0:
            zb = True
        o.b(0, zb)
    for _ in range(h - k - 1):
        o.w()
        o.b(0, zb=True)
    for _ in range(k + 1):
        o.w()
    if o.deferred:  # pragma: no cover - the order above always drains the W queue
        raise AssertionError("dualpipe order left weight passes undone")
    return o.ops


def describe(p: int, m: int) -> str:
    """The report's assumption line for a DualPipe run (docs/schedules.md)."""
    return (f"dualpipe (DeepSeek-V3 report §3.2.1; deepseek-ai/DualPipe DualPipe.step): {m // 2} "
            f"microbatches enter at each end of the pipeline; rank r runs stage r of the first "
            f"direction and stage {p}−1−r of the second, so it holds two stages' parameters, "
            "gradients and optimizer state; an overlapped F&B chunk (the forward of one "
            "microbatch and the whole backward of another) runs their compute back to back with "
            "their TP/EP collectives beside it on the overlap stream, ending when both are done "
            "(the dependency of a layer on its own collective inside the chunk is not enforced: "
            "the hiding DualPipe's rearrangement buys); pipeline sends leave when an op ends; "
            "the sum of the two copies' gradients between ranks r and p−1−r (after the step in "
            "DualPipe's example) is not modelled")

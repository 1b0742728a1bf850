"""The critical path of a simulated iteration: the chain of work and waits that set its length.

Walk back from the rank that finished last: it was working since its last wait ended; that wait
ended because another rank sent it data (a pipeline transfer), arrived last at a collective, or
the network finished a transfer; continue on that rank at the time it did so, until time 0.
The result names which ranks and stages, and which communication, made the iteration as long
as it is.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import NamedTuple


class Wait(NamedTuple):
    """A wait of one rank that another rank or the network ended: from ``start_ns`` to
    ``end_ns`` on communication of ``group`` (a group kind's value, ``"PP"`` for pipeline
    transfers); ``cause_rank`` arrived last at the collective or sent the data, at
    ``cause_ns``."""

    start_ns: int
    end_ns: int
    group: str
    cause_rank: int
    cause_ns: int


@dataclass(frozen=True, slots=True)
class PathSegment:
    """``rank`` worked (``kind == "work"``) or waited for communication of group ``kind`` from
    ``start_ns`` to ``end_ns``; ``peer`` is the rank whose send or arrival ended the wait."""

    rank: int
    start_ns: int
    end_ns: int
    kind: str
    peer: int = -1


def critical_path(deps: dict[int, list[Wait]], end_rank: int, end_ns: int,
                  limit: int = 1_000_000) -> list[PathSegment]:
    """Segments from time 0 to ``end_ns`` (in time order). ``deps[r]``: the waits of rank r,
    in time order."""
    ends = {r: [d[1] for d in lst] for r, lst in deps.items()}
    out: list[PathSegment] = []
    r, t = end_rank, end_ns
    # The ranks visited at time t. t never grows and each step depends only on (rank, t), so a
    # rank visited twice at one t is a cycle of ranks waiting on each other at t (DualPipe's two
    # directions): the walk would go round it, adding nothing, until the limit.
    seen: set[int] = set()
    for _ in range(limit):
        if r in seen:
            break
        seen.add(r)
        i = bisect_right(ends.get(r, []), t) - 1
        if i < 0:
            if t > 0:
                out.append(PathSegment(r, 0, t, "work"))
            break
        t0, t1, kind, cause_rank, cause_t = deps[r][i]
        if t > t1:
            out.append(PathSegment(r, t1, t, "work"))
        ct = min(cause_t, t1)
        if t1 > ct:
            out.append(PathSegment(r, ct, t1, kind, cause_rank))
        if (cause_rank, ct) == (r, t):
            break  # no progress (cannot happen with positive durations)
        if ct != t:
            seen.clear()
        r, t = cause_rank, ct
        if t <= 0:
            break
    out.reverse()
    return out


@dataclass(frozen=True)
class CriticalTotals:
    """What a report needs of a critical path: work per rank and waits per group (ns), the
    number of segments and the rank it ends on (-1: no path)."""

    work_ns: dict[int, int]
    comm_ns: dict[str, int]
    segments: int
    last_rank: int


def totals(path: list[PathSegment]) -> CriticalTotals:
    """The :class:`CriticalTotals` of ``path``."""
    work: dict[int, int] = {}
    comm: dict[str, int] = {}
    for seg in path:
        d = seg.end_ns - seg.start_ns
        if seg.kind == "work":
            work[seg.rank] = work.get(seg.rank, 0) + d
        else:
            comm[seg.kind] = comm.get(seg.kind, 0) + d
    return CriticalTotals(work, comm, len(path), path[-1].rank if path else -1)


def summarize(path: list[PathSegment] | CriticalTotals, stage_of) -> dict:
    """Totals of a critical path (or of its :class:`CriticalTotals`): work per (rank, stage)
    and communication per group (s)."""
    t = path if isinstance(path, CriticalTotals) else totals(path)
    ranks = sorted(t.work_ns.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "work_s_by_rank": [{"rank": r, "stage": stage_of(r), "work_s": ns * 1e-9}
                           for r, ns in ranks],
        "comm_s": {g: t.comm_ns[g] * 1e-9 for g in sorted(t.comm_ns)},
        "segments": t.segments,
    }

"""Collective times calibrated by message size from the user's nccl-tests (``simrun calibrate
--nccl-tests``; docs/calibration.md, "nccl-tests by size").

A :class:`TimeCurve` holds, for one collective measured on ``ranks`` ranks, the factor by which
the measured time of each message size differs from simrun's prediction at that size (after the
fitted bus-bandwidth factor): ``factor = measured / predicted``, both without the launch
overhead that back-to-back nccl-tests iterations hide (:mod:`sim.network.predict`). A request
of that collective is then timed as ``launch + factor(size) · (its modelled time − launch)``:
the flow model scales every part of the transfer (wire bytes, per-step latencies, NCCL's
pipeline ramp) by the factor, so a request alone takes the measured time and contended requests
keep their modelled shares of each link.

Between measured sizes the factor is interpolated linearly in log2(size); outside them it is
held at the nearest end and the report says how many requests were so extrapolated, as it does
for groups whose size differs from the measured rank count (the factor is used as measured).
Point-to-point transfers (``sendrecv``) are not calibrated by size (pipeline messages run on
one link pair; their bus-bandwidth factor applies).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from sim.assumption import Assumption

#: the collectives a curve may calibrate (``simrun collective --op`` names)
CURVE_OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
#: bounds of a size's factor: a measured time 4× off the model is a measurement of something
#: else (another algorithm, a broken link) rather than a calibration of this one
FACTOR_BOUNDS = (0.25, 4.0)


@dataclass(frozen=True)
class TimeCurve:
    """Measured over predicted time of ``op`` on ``ranks`` ranks at each of ``sizes`` (bytes,
    ascending); ``source``: the measurement (file and line range)."""

    op: str
    ranks: int
    sizes: tuple[int, ...]
    factors: tuple[float, ...]
    source: str = ""

    def factor(self, size: int) -> tuple[float, bool]:
        """The factor at ``size`` bytes and whether ``size`` lies outside the measured ones."""
        s, f = self.sizes, self.factors
        if size <= s[0]:
            return f[0], size < s[0]
        if size >= s[-1]:
            return f[-1], size > s[-1]
        i = bisect.bisect_right(s, size)
        lo, hi = s[i - 1], s[i]
        w = (math.log2(size) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return f[i - 1] + w * (f[i] - f[i - 1]), False

    def describe(self) -> str:
        lo, hi = min(self.factors), max(self.factors)
        return (f"{self.op} on {self.ranks} ranks: measured / modelled time {lo:.3f}..{hi:.3f} "
                f"over {self.sizes[0]}..{self.sizes[-1]} B ({len(self.sizes)} sizes, "
                f"interpolated in log size; {self.source})")


def curve_for(curves: tuple[TimeCurve, ...], op: str, nranks: int) -> TimeCurve | None:
    """The curve of ``op`` measured on the rank count nearest ``nranks`` (in log ratio; ties:
    the smaller count), or ``None``."""
    mine = [c for c in curves if c.op == op]
    if not mine:
        return None
    return min(mine, key=lambda c: (abs(math.log2(c.ranks / nranks)), c.ranks))


class CurveUse:
    """Counts of calibrated requests per collective: all, outside the measured sizes, on
    another rank count than measured (for the report's lines)."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}

    def add(self, op: str, outside: bool, other_ranks: bool) -> None:
        c = self.counts.setdefault(op, [0, 0, 0])
        c[0] += 1
        c[1] += outside
        c[2] += other_ranks

    def lines(self, curves: tuple[TimeCurve, ...]) -> list[str]:
        """One report line per curve: what it calibrates and how this run used it (a
        WARNING, always shown, when some request was extrapolated)."""
        out: list[str] = []
        for c in curves:
            n = self.counts.get(c.op)
            used = (f"; this run's distinct {c.op} requests: {n[0]}, {n[1]} of them outside "
                    f"the measured sizes (held at the nearest measured factor), {n[2]} on "
                    f"another rank count than {c.ranks} (factor used as measured)"
                    if n else f"; this run has no {c.op} request")
            warn = bool(n and (n[1] or n[2]))
            out.append(Assumption(f"{'WARNING: ' if warn else ''}collective times calibrated "
                                  f"by size (nccl-tests): {c.describe()}{used}",
                                  "calibration-curve", departs=warn))
        return out

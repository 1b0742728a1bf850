"""Seeded run-to-run variability of kernel and transfer times (``--jitter CV``).

Every compute kernel (a part of a compiled step, a task's compute) is multiplied by a factor
drawn from a lognormal distribution with mean 1 and coefficient of variation ``cv``
(``σ² = ln(1 + cv²)``, ``μ = −σ²/2``): clocks, power and memory contention vary a kernel both
ways around its typical time. Every transfer (a collective, a pipeline send) is multiplied by
a factor from the same distribution truncated below at 1: the network model's time is already
the uncontended best case (contention is modelled), so noise can only make it longer.

Draws are independent of the order in which events happen: each factor is a function of
``(seed, sample, what)`` only — ``what`` names the kernel (rank, microbatch, chunk, pass, step,
part) or the transfer (group and sequence number, or the pipeline message) — through a BLAKE2b
hash mapped to a uniform number and the inverse normal CDF. A collective's factor is the same
for all its members (keyed by the group, not the rank).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.engine.segments import Fused

_N01 = None  # the standard normal, made on the first draw (statistics loads only with --jitter)


@dataclass(frozen=True)
class Jitter:
    """Lognormal factors with mean 1 and coefficient of variation ``cv`` (> 0), drawn for
    sample ``sample`` of seed ``seed``."""

    cv: float
    seed: int = 0
    sample: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.cv <= 10:
            raise ValueError(f"jitter CV must be in (0, 10], got {self.cv}")

    def factor(self, *what: object) -> float:
        """The kernel factor for ``what`` (a tuple of ints and strings)."""
        global _N01
        if _N01 is None:
            from statistics import NormalDist

            _N01 = NormalDist()
        import hashlib

        text = repr((self.seed, self.sample) + what).encode()
        h = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
        u = (h + 0.5) / 2.0**64
        s2 = math.log1p(self.cv * self.cv)
        return math.exp(-s2 / 2 + math.sqrt(s2) * _N01.inv_cdf(u))

    def kernel_ns(self, ns: int, *what: object) -> int:
        """``ns`` of compute jittered (whole ns)."""
        return round(ns * self.factor("kernel", *what)) if ns else 0

    def transfer_extra_ns(self, ns: int, *what: object) -> int:
        """Extra ns a transfer of ``ns`` takes (its factor truncated below at 1)."""
        f = self.factor("transfer", *what)
        return math.ceil(ns * (f - 1.0)) if f > 1.0 and ns > 0 else 0

    def fused(self, step: Fused, *what: object) -> Fused:
        """``step`` with every part jittered (compute parts as kernels, fused blocking comm
        parts as transfers) and the offsets and sums recomputed."""
        parts, t, compute, comm = [], 0, 0, {}
        for i, p in enumerate(step.parts):
            if p.group is None:
                d = self.kernel_ns(p.duration_ns, *what, i)
                compute += d
            else:
                d = p.duration_ns + self.transfer_extra_ns(p.duration_ns, *what, i)
                comm[p.group] = comm.get(p.group, 0) + d
            parts.append(replace(p, offset_ns=t, duration_ns=d))
            t += d
        return Fused(t, compute, tuple(sorted(comm.items(), key=lambda kv: kv[0].value)),
                     tuple(parts))

    def describe(self) -> str:
        return (f"jitter: every kernel × a lognormal factor (mean 1, CV {self.cv:g}), every "
                "transfer × the same distribution truncated below at 1 (the network model's "
                "time is the uncontended best case), drawn per (seed, sample, kernel or "
                f"transfer) independently of event order; seed {self.seed}")

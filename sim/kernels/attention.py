"""Fused attention kernel time as it runs: a tile-scheduling model fitted to measured kernels.

FlashAttention-2 and cuDNN's fused attention split each (batch, head) into tiles of
``BLOCK = 128`` query rows (forward) or key/value rows (backward); a tile walks over 128-wide
blocks of the other side, ``j + 1`` of them for forward tile ``j`` under a causal mask (all
``n = ceil(s/128)`` without one) and ``n - j`` for backward tile ``j``. The GPU runs one tile per
SM at a time (``slots`` = SM count) and hands the next tile to the first SM that frees, in launch
order (heads one after another). A call whose keys are not its queries (``s_kv ≠ s``, the
non-causal half-size calls of context-parallel ring attention, :mod:`sim.models.features.context`)
has ``ceil(s/128)`` forward tiles of ``ceil(s_kv/128)`` blocks each and ``ceil(s_kv/128)`` backward
tiles of ``ceil(s/128)`` blocks each. A tile costs ``c0 + blocks · cb`` µs, so the kernel takes::

    t = t_launch + makespan(tiles, slots)

``cb`` (one 128×128 block, µs) and ``c0`` (per-tile prologue/epilogue, µs) depend on the head
dimension ``d`` (fitted per measured ``d``; between measured ``d`` linear in ``d``; beyond,
``cb`` scales with ``d`` as the matrix work does and ``c0`` is the nearest one's);
``t_launch`` is shared. The shape effects follow from this: few heads per call leave SMs idle
in the last wave, short sequences pay ``c0`` more often, the causal triangle makes tiles uneven.
Key/value heads (GQA) do not enter (the FLOPs are those of the query heads). The shipped H100
table has three MHA twins of its GQA rows (same b, s, hq, d; 2026-11-28, same-run ratios): GQA
with 8 KV heads runs 0.93-0.99 of MHA's time on cuDNN and 0.98-1.00 on FlashAttention-2, a
dependence within the fit's spread; a measured shape answers with its own KV heads. Rows
without the causal mask (four shapes, 2026-11-28) are in the fit too: before them the model,
fitted on causal rows alone, put the unmasked calls of those shapes at −12% to +17% of their
measured times (docs/kernel-tables.md).

Fit (:func:`fit`): for every combination of ratios ``c0/cb`` on a fixed grid (one per ``d``)
the model is linear in ``t_launch`` and the ``cb``; weighted least squares on relative error,
the combination with the smallest squared relative error wins (``t_launch ≥ 0``, ``cb > 0``).
Deterministic; numpy only.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

BLOCK = 128
RATIO_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)


@dataclass(frozen=True)
class AttnShape:
    """One attention call: batch ``b``, query heads ``hq``, query length ``s``, head dim ``d``;
    ``s_kv``: key/value length when not ``s`` (0: ``s``; only without the causal mask);
    ``hkv``: key/value heads (0: not given), matched against measured rows only."""

    b: int
    hq: int
    s: int
    d: int
    causal: bool = True
    bwd: bool = False
    s_kv: int = 0
    hkv: int = 0

    def __post_init__(self) -> None:
        if self.causal and self.s_kv not in (0, self.s):
            raise ValueError("a causal attention call has as many keys as queries")

    @property
    def kv_len(self) -> int:
        """Key/value sequence length (tokens)."""
        return self.s_kv or self.s


@dataclass(frozen=True)
class AttnFit:
    """Fitted tile model of one kernel kind: ``per_d`` = ((d, c0_us, cb_us), ...) sorted by d."""

    launch_us: float
    per_d: tuple[tuple[int, float, float], ...]
    slots: int
    points: int

    def params(self, d: int) -> tuple[float, float]:
        """``(c0, cb)`` in µs for head dimension ``d`` (see the module docstring)."""
        ds = [p[0] for p in self.per_d]
        if d <= ds[0] or d >= ds[-1]:
            near = self.per_d[0] if d <= ds[0] else self.per_d[-1]
            return near[1], near[2] * d / near[0]
        for (d0, c00, cb0), (d1, c01, cb1) in itertools.pairwise(self.per_d):
            if d0 <= d <= d1:
                w = (d - d0) / (d1 - d0)
                return c00 + w * (c01 - c00), cb0 + w * (cb1 - cb0)
        raise AssertionError("unreachable")

    def time_us(self, sh: AttnShape) -> float:
        c0, cb = self.params(sh.d)
        return self.launch_us + unit_makespan(sh.s, sh.b * sh.hq, sh.bwd, sh.causal,
                                              self.slots, c0 / cb, sh.kv_len) * cb


@lru_cache(maxsize=4096)
def unit_makespan(s: int, heads: int, bwd: bool, causal: bool, slots: int, ratio: float,
                  s_kv: int = 0) -> float:
    """Makespan of the tiles of ``heads`` (batch × query heads) sequences of ``s`` queries (and
    ``s_kv`` keys, 0: ``s``; non-causal only) on ``slots`` SMs, in units of one block
    (``cb = 1``, ``c0 = ratio``), greedy in launch order."""
    n = -(-s // BLOCK)
    if causal:
        costs = [ratio + (n - j if bwd else j + 1) for j in range(n)]
    else:
        nk = -(-(s_kv or s) // BLOCK)
        tiles, walk = (nk, n) if bwd else (n, nk)
        costs = [ratio + walk] * tiles
    if heads * len(costs) <= slots:
        return max(costs)
    free = [0.0] * slots
    for _ in range(heads):
        for c in costs:
            heapq.heapreplace(free, free[0] + c)
    return max(free)


def fit(shapes: list[AttnShape], times_us: list[float], slots: int) -> AttnFit | None:
    """Fit the tile model to measured ``times_us`` (one kernel kind); ``None`` when there are
    fewer measured shapes than parameters."""
    ds = sorted({sh.d for sh in shapes})
    if len(shapes) < len(ds) + 1:
        return None
    y = np.array(times_us, dtype=float)
    best: tuple[float, AttnFit] | None = None
    for ratios in itertools.product(RATIO_GRID, repeat=len(ds)):
        rd = dict(zip(ds, ratios, strict=True))
        a = np.zeros((len(shapes), len(ds) + 1))
        a[:, 0] = 1.0
        for i, sh in enumerate(shapes):
            a[i, 1 + ds.index(sh.d)] = unit_makespan(sh.s, sh.b * sh.hq, sh.bwd, sh.causal,
                                                     slots, rd[sh.d])
        found = _solve(a / y[:, None], np.ones_like(y))
        if found is None:
            continue
        x, err = found
        if best is None or err < best[0] - 1e-12:
            per_d = tuple((d, rd[d] * x[1 + k], x[1 + k]) for k, d in enumerate(ds))
            best = (err, AttnFit(float(x[0]), per_d, slots, len(shapes)))
    return best[1] if best else None


def _solve(a: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Least squares with ``x[0] ≥ 0`` (dropped to 0 when negative) and ``x[1:] > 0``."""
    x, *_ = np.linalg.lstsq(a, y, rcond=None)
    if x[0] < 0:
        x1, *_ = np.linalg.lstsq(a[:, 1:], y, rcond=None)
        x = np.concatenate([[0.0], x1])
    if np.any(x[1:] <= 0):
        return None
    return x, float(np.sum((a @ x - y) ** 2))

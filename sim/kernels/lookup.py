"""Operator times looked up in a kernel table (see docs/kernel-tables.md for the method).

* **GEMM** ``(m, k, n)`` in dtype ``dt`` (rows ``gemm_<dt>``; fp16 uses bf16 rows when the table
  has none: same tensor-core peak): (1) a measured ``(m, k, n)``, or its transpose
  ``(n, k, m)`` (the same product computed as ``Cᵀ = Bᵀ·Aᵀ``) → the measured time; (2) measured
  GEMMs with the same ``k`` and one of the two outer sizes (a "column"): when two of them
  bracket the query's other outer size, achieved FLOP/s piecewise-linear in log-FLOPs between
  the two nearest; when the query lies above the column, the largest one's FLOP/s held (a
  bracketing column is preferred, then the shortest step); (3) else the
  table's efficiency curve: measured GEMMs grouped into octaves of FLOPs (median log-FLOPs and
  median FLOP/s per octave), piecewise-linear in log-FLOPs between octaves. Below the smallest
  measured GEMM nothing is taken from the table (the roofline times it); above the largest, the
  largest octave's FLOP/s is held (the roofline at the nearest measured efficiency).
* **Attention** (rows ``attn_<backend>_<fwd|bwd>``): the measured shape (batch, query heads,
  sequence, head dim, mask; the rows are square: as many keys as queries) — with other
  key/value heads than measured it still answers, labelled :data:`OTHER_KV` (the table shows
  no dependence on them, :mod:`sim.kernels.attention`) — else the tile model of
  :mod:`sim.kernels.attention` fitted to the table's rows of that kind.
* **Memory-bound kernels** (norms, GeLU, add, dropout-add, AdamW): the measured ``(tokens, h)``
  (or parameter count), else the achieved bandwidth piecewise-linear in log-bytes between the
  two nearest measured sizes of that kind (bytes counted per :data:`BYTES_PER_ELEMENT`), held at
  the largest above the range; below the smallest the roofline times it. Kinds no table
  measures (FP8 and NVFP4 quantisation) take the bandwidth curve of a measured streaming kind
  (:data:`STREAMING_PROXY`) at their own bytes.

What the table lacks (other kinds, unfused attention's batched matmuls, the cross entropy of
Megatron's vocab-parallel loss, embeddings) is timed by the roofline.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

from sim.kernels.attention import AttnFit, AttnShape, fit
from sim.kernels.table import KernelRow, KernelTable

#: bytes moved per element (per parameter for AdamW) as counted in the measurements
BYTES_PER_ELEMENT = {"layernorm_fwd": 4, "layernorm_bwd": 6, "rmsnorm_fwd": 4, "rmsnorm_bwd": 6,
                     "gelu_fwd": 4, "gelu_bwd": 6, "swiglu_fwd": 6, "swiglu_bwd": 10, "add": 6,
                     "dropout_add": 7, "adamw_fused_fp32": 28,
                     "fp8_cast": 3, "fp8_cast_transpose": 4, "fp8_transpose": 2, "fp8_amax": 2,
                     "fp8_mxfp8_quantize": 65 / 16,
                     # NVFP4 (sim.models.features.nvfp4, nvfp4_params): bytes per element
                     "nvfp4_rht_amax": 2, "nvfp4_amax": 2, "nvfp4_quantize_rht": 50 / 16,
                     "nvfp4_quantize_2d": 50 / 16, "nvfp4_transpose": 18 / 16,
                     "nvfp4_param_amax": 2, "nvfp4_param_cast": 40 / 16,
                     "cp_copy": 4, "cp_out_correction": 6, "cp_lse_correction": 12}
#: memory-bound kernels no table measures, timed at the achieved bandwidth of a measured
#: streaming kernel at the same bytes: Transformer Engine's FP8 casts (sim.models.features.fp8)
# stream their bytes as the element-wise add does
#: and so do the element-wise kernels of context-parallel ring attention
# (sim.models.features.context:
#: bf16 copies, the LSE-scaled output merge; the fp32 LSE merge, counted per query row and head)
STREAMING_PROXY = {"fp8_cast": "add", "fp8_cast_transpose": "add", "fp8_transpose": "add",
                   "fp8_amax": "add", "fp8_mxfp8_quantize": "add", "cp_copy": "add",
                   "cp_out_correction": "add", "cp_lse_correction": "add",
                   **dict.fromkeys(("nvfp4_rht_amax", "nvfp4_amax", "nvfp4_quantize_rht",
                                    "nvfp4_quantize_2d", "nvfp4_transpose", "nvfp4_param_amax",
                                    "nvfp4_param_cast"), "add")}

EXACT, INTERPOLATED, HELD = "measured shape", "interpolated", "held beyond the measured range"
OTHER_KV = "measured shape but its KV heads"


@dataclass(frozen=True)
class Hit:
    """A table answer: ``time_ns`` and how it was obtained (:data:`EXACT` ...)."""

    time_ns: float
    how: str


def _interp(x: float, xs: list[float], ys: list[float]) -> tuple[float, str] | None:
    """Piecewise-linear ``y(x)`` through sorted ``xs``; ``None`` below the range, held above."""
    if not xs or x < xs[0] - 1e-12:
        return None
    if x >= xs[-1]:
        return ys[-1], (EXACT if abs(x - xs[-1]) < 1e-12 else HELD)
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    w = (x - x0) / (x1 - x0) if x1 > x0 else 0.0
    return y0 + w * (y1 - y0), INTERPOLATED


@dataclass
class TableLookup:
    """Answers per-op time queries from one :class:`KernelTable` (``slots``: SMs of its GPU,
    for the attention tile model)."""

    table: KernelTable
    slots: int
    _gemm: dict[str, dict[tuple[int, int, int], float]] = field(default_factory=dict)
    _curves: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    _attn: dict[str, AttnFit | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for r in self.table.rows:
            if r.kind.startswith("gemm_"):
                self._gemm.setdefault(r.kind, {})[(r.get("m"), r.get("k"), r.get("n"))] = (
                    r.time_ms * 1e6)

    # GEMMs -------------------------------------------------------------------------------
    def has(self, kind: str) -> bool:
        """Whether the table measured any GEMM row of ``kind`` (``gemm_...``)."""
        return kind in self._gemm

    def gemm_ns(self, dtype: str, m: int, k: int, n: int, kind: str = "") -> Hit | None:
        """``kind``: a GEMM kind of ``dtype`` other than ``gemm_<dtype>`` (fast-accumulation
        forward, fp32 main-grad weight gradient); the ``gemm_<dtype>`` rows answer when the
        table has none of it (the caller reports that)."""
        if kind not in self._gemm:
            kind = f"gemm_{dtype}"
        if kind not in self._gemm and dtype == "fp16":
            kind = "gemm_bf16"
        pts = self._gemm.get(kind)
        if not pts:
            return None
        for key in ((m, k, n), (n, k, m)):
            if key in pts:
                return Hit(pts[key], EXACT)
        flops = 2.0 * m * k * n
        col = self._column(pts, m, k, n)
        if col is not None:
            return Hit(flops / col[0], col[1])
        xs, ys = self._curve(kind, pts)
        got = _interp(math.log(flops), xs, ys)
        if got is None:
            return None
        return Hit(flops / got[0], INTERPOLATED if got[1] == EXACT else got[1])

    @staticmethod
    def _column(pts: dict, m: int, k: int, n: int) -> tuple[float, str] | None:
        """FLOP/s along a measured column sharing ``k`` and one outer size: interpolated when
        measured sizes bracket the other outer size, the largest one's held above them."""
        best = None
        for fixed, free in ((m, n), (n, m)):
            col = sorted({(o, t) for (a, kk, b), t in pts.items() if kk == k
                          for o in ((b,) if a == fixed else ()) + ((a,) if b == fixed else ())})
            lo = [(o, t) for o, t in col if o < free]
            hi = [(o, t) for o, t in col if o > free]
            if not lo:
                continue
            (o0, t0) = lo[-1]
            r0 = 2.0 * fixed * k * o0 / t0
            if not hi:
                cand = ((1, free / o0), r0, HELD)
            else:
                (o1, t1) = hi[0]
                r1 = 2.0 * fixed * k * o1 / t1
                w = (math.log(free) - math.log(o0)) / (math.log(o1) - math.log(o0))
                cand = ((0, o1 / o0), r0 + w * (r1 - r0), INTERPOLATED)
            if best is None or cand[0] < best[0]:
                best = cand
        return (best[1], best[2]) if best else None

    def _curve(self, kind: str, pts: dict) -> tuple[list[float], list[float]]:
        if kind not in self._curves:
            octaves: dict[int, list[tuple[float, float]]] = {}
            for (m, k, n), t in sorted(pts.items()):
                f = 2.0 * m * k * n
                octaves.setdefault(math.floor(math.log2(f)), []).append((math.log(f), f / t))
            xs = [statistics.median(x for x, _ in v) for _, v in sorted(octaves.items())]
            ys = [statistics.median(y for _, y in v) for _, v in sorted(octaves.items())]
            self._curves[kind] = (xs, ys)
        return self._curves[kind]

    # attention ---------------------------------------------------------------------------
    def attention_ns(self, backend: str, sh: AttnShape) -> Hit | None:
        kind = f"attn_{backend}_{'bwd' if sh.bwd else 'fwd'}"
        rows = self.table.of_kind(kind)
        same = [r for r in rows if sh.kv_len == sh.s and (
            r.get("b"), r.get("hq"), r.get("s"), r.get("d"), r.get("causal")) == (
                sh.b, sh.hq, sh.s, sh.d, int(sh.causal))]
        for r in same:
            if not sh.hkv or r.get("hkv") == sh.hkv:
                return Hit(r.time_ms * 1e6, EXACT)
        if same:  # no dependence on KV heads can be read from the table (sim.kernels.attention)
            return Hit(same[0].time_ms * 1e6, OTHER_KV)
        model = self.attention_model(kind)
        if model is None:
            return None
        return Hit(model.time_us(sh) * 1e3, INTERPOLATED)

    def attention_model(self, kind: str) -> AttnFit | None:
        """The tile model fitted to the table's ``kind`` rows (cached; ``None``: too few)."""
        if kind not in self._attn:
            rows = self.table.of_kind(kind)
            shapes = [_attn_shape(r) for r in rows]
            self._attn[kind] = fit(shapes, [r.time_ms * 1e3 for r in rows], self.slots)
        return self._attn[kind]

    # memory-bound kernels ----------------------------------------------------------------
    def memory_ns(self, kind: str, elements: int, shape: tuple[int, ...] = ()) -> Hit | None:
        """A memory-bound kernel over ``elements`` (tokens·h, or parameters for AdamW);
        ``shape`` ``(tokens, h)``: a row measured at exactly that shape answers first."""
        proxy = STREAMING_PROXY.get(kind)
        rows = self.table.of_kind(proxy or kind)
        if not rows or kind not in BYTES_PER_ELEMENT:
            return None
        if len(shape) == 2 and proxy is None:
            same = [r.time_ms * 1e6 for r in rows if (r.get("tokens"), r.get("h")) == shape]
            if same:
                return Hit(statistics.median(same), EXACT)
        per, measured_per = BYTES_PER_ELEMENT[kind], BYTES_PER_ELEMENT[proxy or kind]
        by_size: dict[int, list[float]] = {}
        for r in rows:
            by_size.setdefault(_elements(r), []).append(r.time_ms * 1e6)
        if elements in by_size and proxy is None:
            return Hit(statistics.median(by_size[elements]), EXACT)
        sizes = sorted(by_size)
        xs = [math.log(measured_per * e) for e in sizes]
        ys = [measured_per * e / statistics.median(by_size[e]) for e in sizes]  # bytes per ns
        got = _interp(math.log(per * elements), xs, ys)
        if got is None:
            return None
        return Hit(per * elements / got[0], f"measured {proxy} bandwidth" if proxy else got[1])


def _elements(r: KernelRow) -> int:
    return r.get("params") if r.kind == "adamw_fused_fp32" else r.get("tokens") * r.get("h")


def _attn_shape(r: KernelRow) -> AttnShape:
    return AttnShape(r.get("b"), r.get("hq"), r.get("s"), r.get("d"), bool(r.get("causal")),
                     r.kind.endswith("_bwd"), hkv=r.get("hkv"))

"""Roofline efficiencies re-derived from a kernel table (how the H100 set in
:mod:`sim.models.compute` was obtained; tests/test_kernels_derive.py checks they agree).

* ``gemm_efficiency`` / ``fp8_gemm_efficiency``: over the table's GEMMs of at least
  ``LARGE_FLOPS`` (1 TFLOP), the achieved fraction of the dense peak that is off by the least
  relative error from the slowest and the fastest of them: ``sqrt(min · max)`` (so the roofline
  is within ``sqrt(max/min)`` of every large measured GEMM);
* ``gemm_overhead_ns``: median over GEMMs below ``SMALL_FLOPS`` (20 GFLOP) of the measured time
  minus ``F / (gemm_efficiency · peak)`` (bf16);
* ``flash_fwd_efficiency`` / ``flash_bwd_efficiency``: median achieved fraction of peak of the
  FlashAttention-2 rows, counting the causal half of the scores where the row is causal
  (backward: 2.5× forward FLOPs);
* ``memory_efficiency``: median achieved fraction of HBM bandwidth of the pure streaming
  kernels (``add``, ``gelu_fwd``).
"""

from __future__ import annotations

import statistics

from sim.kernels.lookup import BYTES_PER_ELEMENT
from sim.kernels.table import KernelTable

LARGE_FLOPS = 1e12
SMALL_FLOPS = 2e10


def gemm_points(table: KernelTable, kind: str) -> list[tuple[tuple[int, int, int], float, float]]:
    """``((m, k, n), flops, seconds)`` of every ``kind`` row."""
    out = []
    for r in table.of_kind(kind):
        m, k, n = r.get("m"), r.get("k"), r.get("n")
        out.append(((m, k, n), 2.0 * m * k * n, r.time_ms * 1e-3))
    return out


def derive(table: KernelTable, peaks_tflops: dict, hbm_GBps: float) -> dict[str, float]:
    """The efficiencies listed in the module docstring (only those the table supports)."""
    out: dict[str, float] = {}
    for kind, key, dt in (("gemm_bf16", "gemm_efficiency", "bf16"),
                          ("gemm_fp8", "fp8_gemm_efficiency", "fp8")):
        pts = [p for p in gemm_points(table, kind) if p[1] >= LARGE_FLOPS]
        if pts and dt in peaks_tflops:
            peak = peaks_tflops[dt] * 1e12
            effs = [f / t / peak for _, f, t in pts]
            out[key] = (min(effs) * max(effs)) ** 0.5
    if "gemm_efficiency" in out:
        peak = peaks_tflops["bf16"] * 1e12 * out["gemm_efficiency"]
        small = [(t - f / peak) * 1e9 for _, f, t in gemm_points(table, "gemm_bf16")
                 if f < SMALL_FLOPS]
        if small:
            out["gemm_overhead_ns"] = statistics.median(small)
    for kind, key, mult in (("attn_flash_fwd", "flash_fwd_efficiency", 1.0),
                            ("attn_flash_bwd", "flash_bwd_efficiency", 2.5)):
        effs = [(0.5 if r.get("causal") else 1.0) * mult * 4 * r.get("b") * r.get("hq")
                * r.get("s") ** 2 * r.get("d") / (r.time_ms * 1e-3) / (peaks_tflops["bf16"] * 1e12)
                for r in table.of_kind(kind)]
        if effs:
            out[key] = statistics.median(effs)
    bw = [BYTES_PER_ELEMENT[r.kind] * r.get("tokens") * r.get("h") / (r.time_ms * 1e-3)
          / (hbm_GBps * 1e9) for r in table.rows if r.kind in ("add", "gelu_fwd")]
    if bw:
        out["memory_efficiency"] = statistics.median(bw)
    return out

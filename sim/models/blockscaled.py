"""Block-scaled GEMM rates of the transfer rule (:mod:`sim.models.compute_transfer`): MXFP8
and NVFP4 GEMMs against the per-tensor FP8 GEMM, from one measurement on one B300.

``sim/data/blockscaled_gemm.csv`` (its header names the source: NVIDIA/TransformerEngine
d0067d0da6cb, docs/examples/gemm_profiling/gemm_profiling.rst lines 144-148, the
``--pre-quantize`` per-layer GEMM times of ``benchmarks/gemm/benchmark_gemm.py`` on "NVIDIA
B300 SXM6 AC": GEMM kernels only, quantised operands, CUDA events) holds per-layer times, ms,
of the same 12 GEMMs in four precisions. Two ratios of the per-layer totals are used:

* :data:`MXFP8_TIME` ``= t_MXFP8 / t_FP8-current`` (7.161 / 6.812 = 1.0512): an MXFP8 GEMM
  takes that multiple of a per-tensor FP8 GEMM's time (its rate divided by it);
* :data:`NVFP4_EFFICIENCY` ``= (t_MXFP8 / t_NVFP4) / (peak_fp4 / peak_fp8)``
  (7.161 / 3.764 / 3 = 0.634): the fraction of the MXFP8 rate scaled by the fp4/fp8 peak
  ratio that NVFP4 reaches (the peaks of the catalogue row the csv names: GB300, Blackwell
  Ultra, fp4 3 × fp8).

The totals, not the passes: the three passes' ratios (NVFP4 0.530 / 0.544 / 0.502; MXFP8
1.096 / 1.029 / 1.032) differ by the shapes' aspect ratios (the rst: dgrad's swapped K and N
change the kernel chosen), which H100's table already carries per shape; the total weighs
the 12 shapes by time, as a layer does. Assumed: the ratios hold on every data-center
Blackwell GPU and at every shape.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from sim.errors import InputError
from sim.files.inputs import positive_field

FILE = "sim/data/blockscaled_gemm.csv"
_FIELDS = ("gpu", "peaks_of", "precision", "fprop_ms", "dgrad_ms", "wgrad_ms", "total_ms")
_NEEDED = ("fp8_current", "mxfp8", "nvfp4")


@dataclass(frozen=True)
class BlockScaled:
    """The two measured ratios (dimensionless) and what they rest on: ``mxfp8_time``
    (MXFP8 GEMM time over the per-tensor FP8 GEMM's), ``nvfp4_efficiency`` (NVFP4's rate
    over the MXFP8 rate × the fp4/fp8 peak ratio), ``peak_ratio`` (the measuring GPU's fp4 /
    fp8 dense peak), ``totals`` (per-layer ms by precision), ``gpu`` (the measuring GPU)."""

    mxfp8_time: float
    nvfp4_efficiency: float
    peak_ratio: float
    totals: dict
    gpu: str

    def text(self) -> str:
        """The source and the numbers, for the rule printed in a report."""
        t = self.totals
        return (f"one measurement on one {self.gpu} (NVIDIA/TransformerEngine d0067d0da6cb, "
                "docs/examples/gemm_profiling/gemm_profiling.rst lines 144-148: "
                "benchmark_gemm.py --pre-quantize per-layer GEMM totals, kernels only, "
                f"{FILE}): MXFP8 {t['mxfp8']:g} ms / FP8 current {t['fp8_current']:g} ms = "
                f"{self.mxfp8_time:.4f}; NVFP4 {t['nvfp4']:g} ms, {t['mxfp8'] / t['nvfp4']:.3f}x "
                f"the MXFP8 rate against fp4/fp8 peaks {self.peak_ratio:g}: "
                f"{self.nvfp4_efficiency:.3f}")


@lru_cache(maxsize=1)
def measured() -> BlockScaled:
    """The ratios from :data:`FILE`."""
    return parse((resources.files("sim") / "data" / "blockscaled_gemm.csv").read_text("utf-8"))


def parse(text: str) -> BlockScaled:
    """The ratios from the text of :data:`FILE` (an :class:`InputError` naming line and field
    if it is malformed)."""
    from sim.kernels.gpus import find

    lines = text.splitlines()
    start = next(i for i, s in enumerate(lines) if not s.startswith("#"))
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    if tuple(reader.fieldnames or ()) != _FIELDS:
        raise InputError(f"columns must be {','.join(_FIELDS)}", file=FILE, line=start + 1)
    totals, gpu, peaks_of = {}, "", ""
    for n, r in enumerate(reader, start=start + 2):
        totals[r["precision"]] = positive_field(r, "total_ms", file=FILE, line=n)
        gpu, peaks_of = r["gpu"], r["peaks_of"]
    missing = [p for p in _NEEDED if p not in totals]
    if missing:
        raise InputError(f"no row for {', '.join(missing)}", file=FILE, field="precision")
    row = find(peaks_of)
    if row is None or not row.peak_tflops.get("fp4") or not row.peak_tflops.get("fp8"):
        raise InputError(f"{peaks_of!r} is not a catalogue GPU with fp4 and fp8 peaks",
                         file=FILE, field="peaks_of")
    peak_ratio = row.peak_tflops["fp4"] / row.peak_tflops["fp8"]
    return BlockScaled(mxfp8_time=totals["mxfp8"] / totals["fp8_current"],
                       nvfp4_efficiency=totals["mxfp8"] / totals["nvfp4"] / peak_ratio,
                       peak_ratio=peak_ratio, totals=totals, gpu=gpu)

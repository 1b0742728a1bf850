"""Compute on a catalogue GPU without a measured kernel table: the transfer rule.

A GPU of the catalogue (``sim/data/gpus.csv``) whose status is ``datasheet-only`` and whose
family is not A100 (A100 keeps its calibrated roofline; :mod:`sim.models.compute`) is timed
from the nearest measured GPU, H100 SXM (:data:`~sim.models.compute.TRANSFER_SOURCE`):

1. each operator is timed as an H100 run times it: H100's measured kernel table
   (``sim/data/kernels/h100-sxm.csv``) through the same :class:`~sim.kernels.lookup.TableLookup`
   path (:meth:`sim.models.compute.Timer.op_ns`: exact shape, interpolation, GEMM kinds);
   an NVFP4 GEMM, which H100 cannot run, is looked up as H100's FP8 GEMM of its shape and role;
2. the table's time ``t_H100`` of one kernel is rescaled by the ratio ``r`` of the two GPUs'
   rates for what bounds that kernel. Compute-bound kernels (GEMMs, batched matmuls,
   attention's tensor-core part), in the operator's precision: ``r = MAMF_H100 / MAMF_GPU``,
   the two GPUs' maximum achievable matmul rates (:class:`Mamf`, ``mamf_bf16`` / ``mamf_fp8``
   of ``sim/data/gpus.csv``: stas00/ml-engineering 744d01e1, compute/accelerator/README.md,
   "Maximum Achievable Matmul FLOPS comparison table": per GPU the best over a search of GEMM
   shapes of the mean of 100 iterations), where both GPUs have one in that precision, else
   ``r = peak_H100 / peak_GPU`` (datasheet peaks: tf32, fp32, fp8 on MI300X, any precision on
   H100 PCIe). H100's table ran at H100's achieved fraction of its peak; the peak ratio
   assumed the GPU reaches the same fraction, the measured rates replace that assumption
   (bf16: H100 80.3% of its peak, B200 77.6%, GB200 72.9%, MI300X 51.4%). Assumed instead: a
   kernel of the table's shapes reaches the same fraction of its GPU's achievable rate on
   both GPUs. Which rate: bf16 GEMMs by the bf16 rates, fp16 at the bf16 rate's fraction of
   the fp16 peak (the same tensor-core path, equal peaks); fp8 GEMMs by the fp8 rates,
   measured with per-tensor scales (``torch._scaled_mm``); block-scaled GEMMs by that rate
   and two ratios measured on one B300 (:mod:`sim.models.blockscaled`, assumed to hold on
   every data-center Blackwell GPU): an MXFP8 GEMM at the per-tensor rate / 1.0512 (its
   ratio × 1.0512), an NVFP4 GEMM at the MXFP8 rate × the GPU's fp4 / fp8 peak × 0.634
   (H100's table looked up as FP8: its ratio × 1.0512 / (peak_fp4 / peak_fp8 × 0.634));
   attention and batched matmuls by the bf16 rates (fp16 for an fp16 run), as Transformer
   Engine runs them in 16 bits under fp8 and NVFP4 recipes. A GPU's rate is kept as its
   fraction of the catalogue's peak, so a run that sets another peak
   (``--set node.gpu.peak_tflops``) gets that fraction of it. Memory-bound kernels
   (element-wise, norms, optimizer, FP8/NVFP4 casts and quantisation):
   ``r = HBM_H100 / HBM_GPU``.
   A fused attention kernel (``FLASH_FWD`` / ``FLASH_BWD``) on a GPU whose catalogue entry has
   an exponential rate (``exp_tera_per_s``: B200, GB200, GB300) is two resources, its ratio
   ``r = (1 − f) · r_mma + f · exp_H100 / exp_GPU`` (``r_mma``: the bf16 ratio above): the
   softmax exponentials run on the special-function units (MUFU.EX2), whose throughput did
   not grow with the tensor cores. ``f`` (:meth:`Transfer.exp_share`) is H100's share of the
   kernel's time on them, from the rates: per score, ``m·d`` matrix FLOPs (``m = 4`` forward:
   QKᵀ and PV; ``m = 10`` backward: 2.5× the forward's, P recomputed) against one exponential
   (forward; backward: P's recomputation), ``f = 1 / (1 + m·d·exp_H100 / peak_H100)`` — 1/3
   forward and 1/6 backward at d = 128. Assumed: the kernel's time is the two parts added
   (no more overlap of MMA and exponential on the GPU than H100's measurement contains). A
   GPU without a published rate (H200, MI300X, H100 PCIe) keeps ``r_mma`` alone;
3. a fixed per-kernel part is kept unscaled (launch gap, prologue, the last partial wave do not
   shrink with the peak): ``o = min(t_H100, o_H100)``, with ``o_H100`` H100's fitted
   per-kernel overhead (:data:`sim.models.compute.H100`: 6 µs for GEMMs and attention, 2 µs for
   memory-bound kernels), so ``t = o + (t_H100 − o) · r`` per kernel (a kernel shorter than
   ``o_H100`` is all fixed cost and keeps H100's time);
4. the table's sustained-load factors (``sustained_slowdown_<dtype>``) were measured at H100's
   clocks under its power limit and are not carried over
   (:meth:`sim.models.compute_setup.ComputeSetup.sustained`);
5. where H100's table has no answer, the roofline at H100's efficiencies on the GPU's own
   peaks and bandwidth (:func:`sim.models.compute.family_model`) — H100's roofline time with
   each of its two terms rescaled by its own ratio of datasheet figures (not the achievable
   rates of step 2), the per-kernel overhead unscaled; MXFP8 and NVFP4 GEMMs there at H100's
   FP8 GEMM efficiency (on the fp8 and fp4 peaks: the B300 block-scaled ratios of step 2 are
   not applied to the roofline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.models.blockscaled import measured
from sim.models.compute import (
    H100,
    TRANSFER_SOURCE,
    ComputeModel,
    peak_flops,
)
from sim.models.vocab.ops import Op, OpKind
from sim.topology.gpu import GpuSpec

if TYPE_CHECKING:
    from sim.kernels.gpus import CatalogGpu

_MEMORY_KINDS = (OpKind.ELEMENTWISE, OpKind.OPTIMIZER)
#: matrix FLOPs per attention score per unit of head dim: forward QKᵀ and PV (2 + 2); backward
#: 2.5× that (dV, dP, dQ, dK and the recomputed QKᵀ: 5 × 2), one exponential per score in each
_MMA_FLOPS_PER_SCORE = {OpKind.FLASH_FWD: 4, OpKind.FLASH_BWD: 10}
#: the measured rate an operator's precision is timed by: fp16 by bf16's (the same tensor-core
#: path), NVFP4 by fp8's (then :meth:`Transfer.block_scaled`); others have none (the peak ratio)
_MEASURED_AS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp8"}
#: a GPU whose fp8 rate is not measured (MI300X) runs fp8 (and fp4) at its bf16 fraction
_FALLBACK = {"fp8": "bf16"}
#: where the achievable rates come from (sim/data/gpus.csv header, docs/hardware.md)
MAMF_SOURCE = ("stas00/ml-engineering 744d01e1, compute/accelerator/README.md 'Maximum "
               "Achievable Matmul FLOPS comparison table' (mamf-finder.py: per GPU the best "
               "over a search of GEMM shapes of the mean of 100 iterations after 50 warm-up)")


@dataclass(frozen=True)
class Mamf:
    """One GPU's maximum achievable matmul rates (``mamf_bf16`` / ``mamf_fp8`` of
    sim/data/gpus.csv): ``rates`` ``((precision, rate TFLOP/s, catalogue peak TFLOP/s), ...)``
    and ``source`` (the row's ``mamf_from``: which measurement, or what stands for it)."""

    rates: tuple[tuple[str, float, float], ...] = ()
    source: str = ""

    @classmethod
    def of(cls, g: CatalogGpu) -> Mamf:
        """The rates of catalogue entry ``g`` (none where its row has none)."""
        return cls(tuple((d, v, g.peak_tflops[d]) for d, v in g.mamf_tflops.items()
                         if g.peak_tflops.get(d)), g.mamf_from)

    def fraction(self, dtype: str) -> float | None:
        """Measured rate over the catalogue peak (0..1) by which an operator in ``dtype`` is
        timed (fp16 by the bf16 rate, fp4 by the fp8 rate; fp8 and fp4 by the bf16 fraction
        where no fp8 rate is measured), ``None`` when none is measured."""
        key = _MEASURED_AS.get(dtype)
        for k in (key, _FALLBACK.get(key)):
            frac = next((v / peak for d, v, peak in self.rates if d == k), None)
            if frac is not None:
                return frac
        return None

    def measured(self, dtype: str) -> bool:
        """Whether ``dtype``'s own rate (not a fallback) is in the catalogue."""
        return any(d == dtype for d, _, _ in self.rates)

    def text(self) -> str:
        """``"bf16 794.5, fp8 1402.6"`` (TFLOP/s)."""
        return ", ".join(f"{d} {v:g}" for d, v, _ in self.rates)


def block_scaled_rule() -> str:
    """The block-scaled part of :func:`rule`: what an MXFP8 and an NVFP4 GEMM's ratio is, with
    the measurement it rests on (:mod:`sim.models.blockscaled`)."""
    b = measured()
    return (f"block-scaled GEMMs from the per-tensor fp8 ratio r_fp8 above: MXFP8 (--fp8-recipe "
            f"mxfp8) r_fp8 x {b.mxfp8_time:.4f}, NVFP4 r_fp8 x {b.mxfp8_time:.4f} / (peak_fp4 / "
            f"peak_fp8 x {b.nvfp4_efficiency:.3f}), i.e. at the MXFP8 rate x this GPU's fp4/fp8 "
            f"peak ratio x {b.nvfp4_efficiency:.3f} ({b.text()}; assumed for every data-center "
            "Blackwell GPU and every shape; per-tensor fp8 recipes unchanged)")


def rule(cm: ComputeModel = H100, roofline: str = "at H100's efficiencies",
         exp_rates: tuple[float, float] | None = None,
         mamf: tuple[str, Mamf, Mamf] | None = None) -> str:
    """The rule as printed in every report of a transferred run (``cm``: the source's roofline
    set, whose per-kernel overheads are kept; ``roofline``: which efficiencies time what the
    table does not answer; ``exp_rates``: H100's and the GPU's exponential rates, 1e12/s, or
    ``None`` when the GPU has none in the catalogue; ``mamf``: the GPU's name, H100's and the
    GPU's achievable matmul rates, or ``None`` when the GPU has none)."""
    exp = ("fused attention is not split by exponential throughput (no published rate for this "
           "GPU in sim/data/gpus.csv): its tensor-core ratio alone" if exp_rates is None else
           "fused attention as two parts, r = (1 - f) x r_mma (its tensor-core ratio above) + "
           f"f x exp_H100 / exp_GPU with exp {exp_rates[0]:g} / {exp_rates[1]:g} 1e12 "
           "exponentials/s (special-function units), f = 1 / (1 + m d exp_H100 / peak_H100) "
           "H100's share of the kernel on exponentials (m = 4 forward, 10 backward; d the head "
           "dim), the parts added (no overlap beyond H100's)")
    if mamf is None:
        compute = ("x peak_H100 / peak_GPU for GEMMs, batched matmuls and attention (fp8 GEMMs "
                   "by the fp8 peaks, attention by the bf16 peaks; no achievable matmul rate "
                   "for this GPU in sim/data/gpus.csv: the datasheet peaks)")
    else:
        name, src, gpu = mamf
        compute = (
            "x MAMF_H100 / MAMF_GPU for GEMMs, batched matmuls and attention: the maximum "
            f"achievable matmul rates, TFLOP/s ({MAMF_SOURCE}; sim/data/gpus.csv mamf_bf16, "
            f"mamf_fp8), H100 SXM {src.text()}, {name} {gpu.text()} ({gpu.source}), in the "
            "operator's precision: fp16 at the bf16 rate's fraction of the fp16 peak, fp8 GEMMs "
            "by the fp8 rates (measured with per-tensor scales), attention and batched matmuls "
            "by the bf16 rates"
            + ("" if gpu.measured("fp8") else "; no fp8 rate measured on this GPU: its fp8 and "
               "NVFP4 GEMMs at its bf16 rate's fraction of those peaks (assumed)")
            + "; a precision without a rate on both GPUs (tf32, fp32) x peak_H100 / peak_GPU; "
            "a peak set for the run keeps the GPU's measured fraction of its catalogue peak")
    return (
        "no kernel table measured on this GPU: each operator is timed as on H100 SXM (its "
        "measured kernel table sim/data/kernels/h100-sxm.csv, same lookup and interpolation as "
        "an H100 run; an NVFP4 GEMM as H100's FP8 GEMM of that shape), then rescaled per "
        f"kernel: t = o + (t_H100 - o) {compute}; {block_scaled_rule()}; and x HBM_H100 / "
        "HBM_GPU for memory-bound "
        "kernels (element-wise, norms, optimizer, casts and quantisation), with o = min(t_H100, "
        f"H100's fitted per-kernel overhead: {cm.gemm_overhead_ns / 1e3:g} µs GEMMs and "
        f"attention, {cm.elementwise_overhead_ns / 1e3:g} µs memory-bound) kept unscaled; {exp}; "
        "the table's sustained-load factors (H100's clocks) are not carried over; where H100's "
        f"table has no answer, the roofline {roofline} on this GPU's datasheet peaks and "
        "bandwidth")


ROOFLINE_RULE = (
    "no kernel table measured on this GPU and H100's is not transferred (--kernel-table none "
    "or a path): where no table answers, the roofline at H100 SXM's efficiencies (derived "
    "from its measured table by sim/kernels/derive.py) on this GPU's datasheet peaks and HBM "
    "bandwidth")


@dataclass(frozen=True)
class Transfer:
    """Rescales the source GPU's kernel-table times to a GPU without its own table (module
    docstring). ``source``: the measured GPU's datasheet peaks and bandwidth; ``cm``: its
    roofline set, whose per-kernel overheads (ns) are the fixed part kept unscaled;
    ``source_exp`` / ``gpu_exp``: the two GPUs' exponential rates (1e12 exponentials/s,
    ``exp_tera_per_s`` of sim/data/gpus.csv) that split fused attention in two;
    ``source_mamf`` / ``gpu_mamf``: their achievable matmul rates (module docstring, step 2;
    none: the peak ratio); ``mxfp8``: the run's fp8 GEMMs are MXFP8 (``--fp8-recipe mxfp8``:
    :meth:`block_scaled`)."""

    source: GpuSpec
    cm: ComputeModel = H100
    source_exp: float | None = None  # the source's exponential rate, 1e12/s (gpus.csv)
    gpu_exp: float | None = None  # the target GPU's (None: attention by the peaks alone)
    source_mamf: Mamf = Mamf()
    gpu_mamf: Mamf = Mamf()
    mxfp8: bool = False  # fp8 GEMMs block-scaled (MXFP8) rather than per-tensor scaled

    @property
    def mamf(self) -> tuple[Mamf, Mamf] | None:
        """(source, GPU) achievable matmul rates when the GPU has any, else ``None``."""
        return (self.source_mamf, self.gpu_mamf) if self.gpu_mamf.rates else None

    @property
    def exp_rates(self) -> tuple[float, float] | None:
        """(source, GPU) exponential rates, 1e12/s, when both are published, else ``None``."""
        return (self.source_exp, self.gpu_exp) if self.source_exp and self.gpu_exp else None

    @staticmethod
    def source_dtype(dtype: str) -> str:
        """The precision the source's table is looked up in for an operator in ``dtype``: an
        NVFP4 GEMM as an FP8 one (the lowest precision measured on H100)."""
        return "fp8" if dtype == "fp4" else dtype

    def ratio(self, op: Op, dtype: str, gpu: GpuSpec) -> float:
        """``MAMF_source / MAMF_gpu`` (compute-bound kinds, in ``op``'s precision, both rates
        measured; else ``peak_source / peak_gpu``) or ``HBM_source / HBM_gpu`` (memory-bound
        kinds) for ``op`` run in ``dtype`` on ``gpu``; fused attention with both exponential
        rates known: ``(1 − f)`` of that ratio plus ``f`` of ``exp_source / exp_gpu`` (``f``:
        :meth:`exp_share`). The GPU's rate is its measured fraction of its catalogue peak
        times ``gpu``'s peak (a peak set for the run keeps that fraction)."""
        if op.kind in _MEMORY_KINDS:
            if gpu.hbm_GBps <= 0:
                raise ValueError(f"GPU {gpu.name} has no HBM bandwidth (hbm_GBps)")
            return self.source.hbm_GBps / gpu.hbm_GBps
        if op.kind is OpKind.GEMM:
            mine = dtype
        else:  # attention and its batched matmuls run in 16 bits under fp8 and NVFP4 recipes
            mine = "bf16" if dtype in ("fp8", "fp4") else dtype
        src = self.source_dtype(mine)
        r = peak_flops(self.source, src) / peak_flops(gpu, mine)
        frac_src, frac_gpu = self.source_mamf.fraction(src), self.gpu_mamf.fraction(mine)
        if frac_src and frac_gpu:
            r *= frac_src / frac_gpu
        if op.kind is OpKind.GEMM:
            r *= self.block_scaled(mine)
        f = self.exp_share(op, mine)
        return r if f == 0.0 else (1.0 - f) * r + f * self.source_exp / self.gpu_exp

    def block_scaled(self, dtype: str) -> float:
        """Factor (dimensionless) on a GEMM's ratio in ``dtype`` for its block scaling
        (:mod:`sim.models.blockscaled`): ``mxfp8_time`` for an MXFP8 GEMM (``dtype`` fp8 with
        :attr:`mxfp8`); ``mxfp8_time / nvfp4_efficiency`` for an NVFP4 one (``dtype`` fp4,
        whose ratio already runs at the fp8 fraction of the fp4 peak: the product is the
        per-tensor fp8 ratio × ``mxfp8_time / (peak_fp4 / peak_fp8 · nvfp4_efficiency)``);
        1 otherwise."""
        if dtype == "fp4":
            return measured().mxfp8_time / measured().nvfp4_efficiency
        return measured().mxfp8_time if dtype == "fp8" and self.mxfp8 else 1.0

    def exp_share(self, op: Op, dtype: str) -> float:
        """H100's share (0..1) of fused attention kernel ``op``'s time spent on exponentials,
        from the rates: ``1 / (1 + m·d·exp_source / peak_source)`` (module docstring, step 2);
        0 for other kinds, or when either GPU has no exponential rate. ``dtype``: the
        attention's 16-bit precision (its tensor-core peak)."""
        m = _MMA_FLOPS_PER_SCORE.get(op.kind)
        if m is None or self.exp_rates is None or len(op.shape) < 5:
            return 0.0
        mma_per_exp = m * op.shape[4] * self.source_exp * 1e12 / peak_flops(self.source, dtype)
        return 1.0 / (1.0 + mma_per_exp)

    def kernel_ns(self, op: Op, dtype: str, gpu: GpuSpec, t_source_ns: float) -> float:
        """One kernel's time (ns) on ``gpu`` from its time ``t_source_ns`` on the source:
        ``o + (t_source − o) · r``, ``o = min(t_source, the source's per-kernel overhead)``."""
        o_src = (self.cm.elementwise_overhead_ns if op.kind in _MEMORY_KINDS
                 else self.cm.gemm_overhead_ns)
        fixed = min(t_source_ns, o_src)
        return fixed + (t_source_ns - fixed) * self.ratio(op, dtype, gpu)


def source_transfer(gpu: CatalogGpu) -> tuple[Transfer, str]:
    """The transfer from :data:`~sim.models.compute.TRANSFER_SOURCE`'s catalogue entry to
    catalogue GPU ``gpu`` (its exponential and achievable matmul rates, where it has them) and
    the name of the source's shipped kernel table."""
    from sim.kernels.gpus import catalog

    src = next(g for g in catalog() if g.family == TRANSFER_SOURCE and g.status == "measured")
    spec = GpuSpec(src.name, dict(src.peak_tflops), src.hbm_GB, src.hbm_GBps)
    return Transfer(spec, source_exp=src.exp_tera_per_s, gpu_exp=gpu.exp_tera_per_s,
                    source_mamf=Mamf.of(src), gpu_mamf=Mamf.of(gpu)), src.kernel_table

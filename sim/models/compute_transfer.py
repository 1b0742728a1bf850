"""Compute on a catalogue GPU without a measured kernel table: the transfer rule.

A GPU of the catalogue (``sim/data/gpus.csv``) whose status is ``datasheet-only`` and whose
family is not A100 (A100 keeps its calibrated roofline; :mod:`sim.models.compute`) is timed
from the nearest measured GPU, H100 SXM (:data:`~sim.models.compute.TRANSFER_SOURCE`):

1. each operator is timed as an H100 run times it: H100's measured kernel table
   (``sim/data/kernels/h100-sxm.csv``) through the same :class:`~sim.kernels.lookup.TableLookup`
   path (:meth:`sim.models.compute.Timer.op_ns`: exact shape, interpolation, GEMM kinds);
   an NVFP4 GEMM, which H100 cannot run, is looked up as H100's FP8 GEMM of its shape and role;
2. the table's time ``t_H100`` of one kernel is rescaled by the ratio of the two GPUs' datasheet
   rates for what bounds that kernel: ``r = peak_H100 / peak_GPU`` for GEMMs, batched matmuls
   and attention (in the operator's precision: fp8 GEMMs by the fp8 peaks; NVFP4 GEMMs by
   H100's fp8 peak over the GPU's fp4 peak; attention and batched matmuls in bf16 — in fp16
   for an fp16 run — as Transformer Engine runs them), ``r = HBM_H100 / HBM_GPU`` for
   memory-bound kernels (element-wise, norms, optimizer, FP8/NVFP4 casts and quantisation);
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
   each of its two terms rescaled by its own ratio, the per-kernel overhead unscaled.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.models.compute import (
    H100,
    TRANSFER_SOURCE,
    ComputeModel,
    peak_flops,
)
from sim.models.vocab.ops import Op, OpKind
from sim.topology.gpu import GpuSpec

_MEMORY_KINDS = (OpKind.ELEMENTWISE, OpKind.OPTIMIZER)


def rule(cm: ComputeModel = H100, roofline: str = "at H100's efficiencies") -> str:
    """The rule as printed in every report of a transferred run (``cm``: the source's roofline
    set, whose per-kernel overheads are kept; ``roofline``: which efficiencies time what the
    table does not answer)."""
    return (
        "no kernel table measured on this GPU: each operator is timed as on H100 SXM (its "
        "measured kernel table sim/data/kernels/h100-sxm.csv, same lookup and interpolation as "
        "an H100 run; an NVFP4 GEMM as H100's FP8 GEMM of that shape), then rescaled per "
        "kernel: t = o + (t_H100 - o) x peak_H100 / peak_GPU for GEMMs, batched matmuls and "
        "attention (fp8 GEMMs by the fp8 peaks, NVFP4 GEMMs by H100's fp8 peak over the fp4 "
        "peak, attention by the bf16 peaks) and x HBM_H100 / HBM_GPU for memory-bound kernels "
        "(element-wise, norms, optimizer, casts and quantisation), with o = min(t_H100, H100's "
        f"fitted per-kernel overhead: {cm.gemm_overhead_ns / 1e3:g} µs GEMMs and attention, "
        f"{cm.elementwise_overhead_ns / 1e3:g} µs memory-bound) kept unscaled; the table's "
        "sustained-load factors (H100's clocks) are not carried over; where H100's table has "
        f"no answer, the roofline {roofline} on this GPU's peaks and bandwidth")


ROOFLINE_RULE = (
    "no kernel table measured on this GPU and H100's is not transferred (--kernel-table none "
    "or a path): where no table answers, the roofline at H100 SXM's efficiencies (derived "
    "from its measured table by sim/kernels/derive.py) on this GPU's datasheet peaks and HBM "
    "bandwidth")


@dataclass(frozen=True)
class Transfer:
    """Rescales the source GPU's kernel-table times to a GPU without its own table (module
    docstring). ``source``: the measured GPU's datasheet peaks and bandwidth; ``cm``: its
    roofline set, whose per-kernel overheads (ns) are the fixed part kept unscaled."""

    source: GpuSpec
    cm: ComputeModel = H100

    @staticmethod
    def source_dtype(dtype: str) -> str:
        """The precision the source's table is looked up in for an operator in ``dtype``: an
        NVFP4 GEMM as an FP8 one (the lowest precision measured on H100)."""
        return "fp8" if dtype == "fp4" else dtype

    def ratio(self, op: Op, dtype: str, gpu: GpuSpec) -> float:
        """``peak_source / peak_gpu`` (compute-bound kinds, in ``op``'s precision) or
        ``HBM_source / HBM_gpu`` (memory-bound kinds) for ``op`` run in ``dtype`` on ``gpu``."""
        if op.kind in _MEMORY_KINDS:
            if gpu.hbm_GBps <= 0:
                raise ValueError(f"GPU {gpu.name} has no HBM bandwidth (hbm_GBps)")
            return self.source.hbm_GBps / gpu.hbm_GBps
        if op.kind is OpKind.GEMM:
            mine = dtype
        else:  # attention and its batched matmuls run in 16 bits under fp8 and NVFP4 recipes
            mine = "bf16" if dtype in ("fp8", "fp4") else dtype
        return peak_flops(self.source, self.source_dtype(mine)) / peak_flops(gpu, mine)

    def kernel_ns(self, op: Op, dtype: str, gpu: GpuSpec, t_source_ns: float) -> float:
        """One kernel's time (ns) on ``gpu`` from its time ``t_source_ns`` on the source:
        ``o + (t_source − o) · r``, ``o = min(t_source, the source's per-kernel overhead)``."""
        o_src = (self.cm.elementwise_overhead_ns if op.kind in _MEMORY_KINDS
                 else self.cm.gemm_overhead_ns)
        fixed = min(t_source_ns, o_src)
        return fixed + (t_source_ns - fixed) * self.ratio(op, dtype, gpu)


def source_transfer() -> tuple[Transfer, str]:
    """The transfer from :data:`~sim.models.compute.TRANSFER_SOURCE`'s catalogue entry and the
    name of its shipped kernel table."""
    from sim.kernels.gpus import catalog

    src = next(g for g in catalog() if g.family == TRANSFER_SOURCE and g.status == "measured")
    spec = GpuSpec(src.name, dict(src.peak_tflops), src.hbm_GB, src.hbm_GBps)
    return Transfer(spec), src.kernel_table

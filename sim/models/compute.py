"""Roofline compute-time model of one operator on a GPU.

For an operator of ``F`` matrix FLOPs moving ``Q`` HBM bytes on a GPU with dense peak ``P``
(training dtype) and HBM bandwidth ``W``::

    GEMM / BMM:    t = max(F / (η_gemm · P), Q / (η_mem · W)) + o_gemm
    flash attn:    t = c · F / (η_flash · P) + o_gemm        (c = 0.5: causal mask skips half)
    element-wise:  t = Q / (η_mem · W) + o_elem               (norms, softmax, dropout, loss,
                                                              optimizer)

The fixed per-kernel cost ``o`` (launch gap, prologue, partial last wave) makes the effective
GEMM efficiency rise with size: ``η_eff(F) = η_gemm · t_c / (t_c + o_gemm)`` with
``t_c = F/(η_gemm·P)`` — half of ``η_gemm`` at ``F = η_gemm·P·o_gemm`` (≈ 0.86 GFLOP on A100:
a 1024³ GEMM runs at ≈ 49% of peak, a 4096³ at ≈ 69%, the large-GEMM value). Small-``k`` GEMMs
(attention batched matmuls with ``k = head_dim``) become memory-bound through the roofline.

Efficiencies per GPU family are physical (achievable fractions of datasheet peaks, not per-case
fudge factors); the A100 large-GEMM efficiency is fitted to the per-layer times of Korthikanti
et al. (22B, Table 4) by ``scripts/calibrate_a100.py`` (:mod:`sim.validation.table4`) and the
H100 values come from its measured kernel table. An op with ``count > 1`` is ``count`` equal
kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from sim.assumption import Assumption
from sim.kernels.attention import AttnShape
from sim.kernels.lookup import EXACT, Hit, TableLookup
from sim.models.vocab.ops import FPROP, WGRAD, Op, OpKind
from sim.topology.gpu import GpuSpec


@dataclass(frozen=True)
class ComputeModel:
    """Kernel efficiencies of one GPU family (fractions of peak) and per-kernel overheads (ns)."""

    family: str
    gemm_efficiency: float  # large dense GEMMs: fraction of dense tensor-core peak
    bmm_efficiency: float  # batched attention matmuls (unfused attention)
    flash_fwd_efficiency: float
    flash_bwd_efficiency: float
    memory_efficiency: float  # streaming kernels: fraction of HBM bandwidth
    gemm_overhead_ns: float
    elementwise_overhead_ns: float
    fp8_gemm_efficiency: float = 0.0  # fp8 GEMMs (0: no fp8 tensor cores)
    causal_fraction: float = 0.5  # share of the s×s scores a causal flash kernel computes

    def describe(self) -> str:
        return (
            f"compute model ({self.family}): roofline per operator; GEMM efficiency "
            f"{self.gemm_efficiency:.0%} of peak + {self.gemm_overhead_ns / 1e3:g} µs per "
            f"kernel, attention batched matmuls {self.bmm_efficiency:.0%}, flash attention "
            f"{self.flash_fwd_efficiency:.0%} fwd / {self.flash_bwd_efficiency:.0%} bwd "
            f"(causal: {self.causal_fraction:g} of the scores), element-wise kernels "
            f"{self.memory_efficiency:.0%} of HBM bandwidth + "
            f"{self.elementwise_overhead_ns / 1e3:g} µs per kernel"
        )


# A100 SXM: large-GEMM efficiency 0.69 fitted by scripts/calibrate_a100.py (sim/validation/
# table4.py) to Korthikanti et al. (arXiv:2205.05198) Table 4, one 22B layer at TP 8 on DGX
# A100 (ten forward/backward times, least squared relative error, 0.6903 rounded; residuals
# −2.1%…+1.5%), simulated as the 2022 Megatron-LM ran it (unfused attention, asynchronous TP
# backward, the NCCL per-size network model). Below the best published A100 bf16 matmul
# (271.2 of 312 TFLOP/s = 86.9%, stas00/ml-engineering compute/accelerator/README.md at
# 744d01e1): Megatron's shapes under sustained clocks. Not fitted, kept as first set: streaming
# kernels ~80% of HBM bandwidth; FlashAttention-2 ~70% forward, ~55% backward (Dao 2023);
# attention batched matmuls 60%; 4 µs / 2 µs per GEMM / element-wise kernel.
A100 = ComputeModel("A100", gemm_efficiency=0.69, bmm_efficiency=0.60,
                    flash_fwd_efficiency=0.65, flash_bwd_efficiency=0.50,
                    memory_efficiency=0.80, gemm_overhead_ns=4000.0,
                    elementwise_overhead_ns=2000.0)
# H100 SXM: re-derived from the kernel table measured on one H100 SXM on 2026-11-22
# (sim/data/kernels/h100-sxm.csv; method in sim/kernels/derive.py): large bf16 GEMMs (≥ 1 TFLOP)
# run at 64-76% of 989.4 → 69% (the minimax value, within ±9% of each), fp8 at 56-67% of 1979
# → 61%; GEMMs below 20 GFLOP take 6 µs more than that rate (median); FlashAttention-2 (causal
# half counted where masked) 28% forward, 24% backward (median of its 18 shapes, with the MHA
# and unmasked rows of 2026-11-28; 23% and 19% over the 11 causal GQA/MHA rows before);
# streaming kernels (add, GeLU) 80% of 3.35 TB/s.
H100 = ComputeModel("H100", gemm_efficiency=0.69, bmm_efficiency=0.50,
                    flash_fwd_efficiency=0.28, flash_bwd_efficiency=0.24,
                    memory_efficiency=0.80, gemm_overhead_ns=6000.0,
                    elementwise_overhead_ns=2000.0, fp8_gemm_efficiency=0.61)
# A GPU declared in its topology file or given --compute-efficiency: the same fractions of its
# datasheet peaks as a typical large-GEMM library reaches (75%), stated as an assumption in every
# report that uses them.
GENERIC = ComputeModel("generic", gemm_efficiency=0.75, bmm_efficiency=0.55,
                       flash_fwd_efficiency=0.55, flash_bwd_efficiency=0.45,
                       memory_efficiency=0.80, gemm_overhead_ns=4000.0,
                       elementwise_overhead_ns=2000.0)
_FAMILIES = {"A100": A100, "H100": H100}
TRANSFER_SOURCE = "H100"  # the measured GPU the catalogue's other GPUs are timed from


def family_model(family: str) -> ComputeModel:
    """The roofline efficiency set of a catalogue family: its own where measured (A100
    calibrated, H100 from its kernel table), else H100's (the roofline part of the transfer
    rule, :mod:`sim.models.compute_transfer`)."""
    if family in _FAMILIES:
        return _FAMILIES[family]
    return replace(_FAMILIES[TRANSFER_SOURCE],
                   family=f"{family}: transferred from {TRANSFER_SOURCE}'s measured efficiencies, "
                          "not measured on it")


def peak_flops(gpu: GpuSpec, dtype: str) -> float:
    """Dense peak in FLOP/s for ``dtype`` (``fp32_matmul`` work uses ``fp32``, else ``tf32``)."""
    return gpu.tflops(dtype) * 1e12


def fp32_peak_flops(gpu: GpuSpec) -> tuple[float, str]:
    """Peak FLOP/s for fp32 matrix work and a note on where it came from."""
    for key in ("fp32", "tf32"):
        if key in gpu.peak_tflops:
            return gpu.peak_tflops[key] * 1e12, f"{key} peak of {gpu.name}"
    bf16 = gpu.peak_tflops.get("bf16", 0.0)
    return bf16 * 1e12 / 16, f"{gpu.name} has no fp32/tf32 peak; assumed bf16 peak / 16"


def op_time_ns(op: Op, gpu: GpuSpec, cm: ComputeModel, dtype: str) -> float:
    """Time of ``op`` in nanoseconds (float) under the roofline model above (in ``op.dtype``
    when the op names one)."""
    dtype = op.dtype or dtype
    bw = gpu.hbm_GBps * 1e9 * cm.memory_efficiency  # bytes/s
    if bw <= 0:
        raise ValueError(f"GPU {gpu.name} has no HBM bandwidth (hbm_GBps)")
    count = op.count
    if op.kind in (OpKind.ELEMENTWISE, OpKind.OPTIMIZER):
        if op.bytes == 0:
            return 0.0
        return (op.bytes / bw) * 1e9 + count * cm.elementwise_overhead_ns
    if op.flops == 0 and op.bytes == 0:
        return 0.0
    if op.kind is OpKind.FP32_MATMUL:
        peak, _ = fp32_peak_flops(gpu)
        return op.flops / (peak * cm.gemm_efficiency) * 1e9 + count * cm.gemm_overhead_ns
    # fp8 applies to the linear layers' GEMMs; attention runs in bf16 (Transformer Engine).
    peak = peak_flops(gpu, "bf16" if dtype == "fp8" and op.kind is not OpKind.GEMM else dtype)
    if op.kind is OpKind.FLASH_FWD or op.kind is OpKind.FLASH_BWD:
        eff = cm.flash_fwd_efficiency if op.kind is OpKind.FLASH_FWD else cm.flash_bwd_efficiency
        t_s = cm.causal_fraction * op.flops / (peak * eff)
        return t_s * 1e9 + count * cm.gemm_overhead_ns
    if op.kind is OpKind.GEMM:
        # NVFP4 GEMMs (sim.models.features.nvfp4): no FP4 GEMM is measured; where no table
        # answers they keep the fraction of the (fp4) peak that H100's measured FP8 GEMMs
        # reach, the lowest precision measured (the roofline part of
        # sim.models.compute_transfer, on datasheet peaks)
        eff = cm.fp8_gemm_efficiency if dtype in ("fp8", "fp4") else cm.gemm_efficiency
        if eff <= 0:
            raise ValueError(f"compute model {cm.family} has no {dtype} GEMM efficiency")
    else:
        eff = cm.bmm_efficiency
    t_s = max(op.flops / (peak * eff), op.bytes / bw)
    return t_s * 1e9 + count * cm.gemm_overhead_ns


def ops_time_ns(ops, gpu: GpuSpec, cm: ComputeModel, dtype: str) -> int:
    """Total time of ``ops`` run back to back, rounded up to whole nanoseconds."""
    total = math.fsum(op_time_ns(op, gpu, cm, dtype) for op in ops)
    return math.ceil(total - 1e-6) if total > 0 else 0


def gemm_efficiency(flops: float, gpu: GpuSpec, cm: ComputeModel, dtype: str) -> float:
    """Effective fraction of peak of a compute-bound GEMM of ``flops`` FLOPs (the curve above)."""
    peak = peak_flops(gpu, dtype)
    t_c = flops / (peak * cm.gemm_efficiency)
    return flops / (peak * (t_c + cm.gemm_overhead_ns * 1e-9))


@dataclass
class Timer:
    """Times operators from a kernel table where it has them, else by the roofline above, and
    tallies how much time came from each (``weight``: how many times the ops run).

    ``lookup``: a :class:`~sim.kernels.lookup.TableLookup` or ``None`` (roofline only);
    ``backend``: the attention backend (``flash``/``fused``/``unfused``) whose kernels the
    table's ``attn_flash_*`` / ``attn_cudnn_*`` rows time; ``main_grad_fp32``: weight
    gradients accumulate into fp32 main-grad buffers (:func:`gemm_table_kind`);
    ``sustained``: factor on every table time (kernels measured in bursts, run under the
    sustained load of training: :mod:`sim.models.compute_setup`); ``knobs``: a calibration's
    :class:`~sim.calibration.knobs.Knobs` applied to every time (``None``: uncalibrated);
    ``transfer``: a :class:`~sim.models.compute_transfer.Transfer` when ``lookup`` is another
    GPU's table (each table time rescaled to this GPU; ``None``: the table is this GPU's).
    ``missing``: GEMM kinds the table lacked, answered by its ``gemm_<dtype>`` rows.
    """

    gpu: GpuSpec
    cm: ComputeModel
    lookup: TableLookup | None = None
    backend: str = "flash"
    main_grad_fp32: bool = True
    sustained: float = 1.0
    knobs: Any = None
    transfer: Any = None
    table_ns: float = 0.0
    roofline_ns: float = 0.0
    hows: dict[str, float] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    # op_ns answers by (op, dtype): a model's layers repeat the same operators, and the answer
    # depends only on them and on this timer's fixed fields (the tallies are kept by ops_ns)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def op_ns(self, op: Op, dtype: str) -> tuple[float, str]:
        """Time of ``op`` (ns) and its source: ``"roofline"`` or how the table answered."""
        got = self._memo.get((op, dtype))
        if got is None:
            got = self._memo[op, dtype] = self._op_ns(op, dtype)
        return got

    def cached(self, key: tuple, make):
        """``make()``, computed once per ``key`` for this timer (what depends only on the
        operators and this timer: :func:`sim.models.launches.phase_launches`)."""
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = make()
        return got

    def _op_ns(self, op: Op, dtype: str) -> tuple[float, str]:
        dtype = op.dtype or dtype
        tr = self.transfer
        hit = self._hit(op, tr.source_dtype(dtype) if tr else dtype) if self.lookup else None
        if hit is None:
            t, how = op_time_ns(op, self.gpu, self.cm, dtype), "roofline"
        else:
            t1 = hit.time_ns if tr is None else tr.kernel_ns(op, dtype, self.gpu, hit.time_ns)
            t, how = t1 * op.count * self.sustained, hit.how
        return (t if self.knobs is None else self.knobs.op_ns(op, t)), how

    def _hit(self, op: Op, dtype: str):
        if op.kernel == "gemm" and op.shape:
            gd = dtype if op.kind is OpKind.GEMM else "bf16"
            kind = gemm_table_kind(op, gd, self.main_grad_fp32)
            if kind != f"gemm_{gd}" and not self.lookup.has(kind):
                self.missing.add(kind)
            return self.lookup.gemm_ns(gd, *op.shape, kind=kind)
        return _table_hit(self.lookup, op, self.backend)

    def ops_ns(self, ops, dtype: str, weight: int = 1) -> int:
        """Total time of ``ops`` back to back (whole ns, as :func:`ops_time_ns`); tallies
        each op's time × ``weight`` by source, op by op."""
        got = self._ops_times(ops, dtype)
        roofline, table, hows = self.roofline_ns, self.table_ns, self.hows
        for t, how in got[1]:
            if how == "roofline":
                roofline += t * weight
            else:
                table += t * weight
                hows[how] = hows.get(how, 0.0) + t * weight
        self.roofline_ns, self.table_ns = roofline, table
        return got[2]

    def tallies(self, ops: tuple, dtype: str, weight: int = 1) -> tuple[tuple[float, str], ...]:
        """What :meth:`ops_ns` ``(ops, dtype, weight)`` adds to the tallies, op by op:
        ``(time × weight, source)``, for :meth:`tally`."""
        return tuple((t * weight, how) for t, how in self._ops_times(ops, dtype)[1])

    def tally(self, parts: tuple[tuple[float, str], ...]) -> None:
        """Add ``parts`` (:meth:`tallies`) to the tallies, in order: the same additions as the
        :meth:`ops_ns` calls they came from."""
        roofline, table, hows = self.roofline_ns, self.table_ns, self.hows
        for t, how in parts:
            if how == "roofline":
                roofline += t
            else:
                table += t
                hows[how] = hows.get(how, 0.0) + t
        self.roofline_ns, self.table_ns = roofline, table

    def _ops_times(self, ops, dtype: str) -> tuple[Any, tuple[tuple[float, str], ...], int]:
        """``(ops, each op's (time, source), the whole-ns total)``; kept per tuple object (a
        model's layers share their rows' operator tuples: found by identity, not by hashing
        every operator; the tuple is held, so its id is not reused), a list computed anew."""
        key = ("ops", id(ops), dtype)
        got = self._memo.get(key)
        if got is None or got[0] is not ops:  # the tuple, or another tuple with its old id
            parts = tuple(self.op_ns(op, dtype) for op in ops)
            total = math.fsum(t for t, _ in parts)
            got = (ops, parts, math.ceil(total - 1e-6) if total > 0 else 0)
            if isinstance(ops, tuple):
                self._memo[key] = got
        return got

    def cached_for(self, ops: tuple, tag: str, dtype: str, make):
        """``make()`` for the operator tuple ``ops`` (:meth:`cached` by the tuple's identity,
        which it holds: what depends only on the operators and this timer)."""
        key = (tag, id(ops), dtype)
        got = self._memo.get(key)
        if got is None or got[0] is not ops:
            got = self._memo[key] = (ops, make())
        return got[1]

    def summary(self) -> str:
        """One line: compute time per iteration (summed over stages) by source, the larger
        source first. When the kernel table timed most of it, the line comes before the
        compute model's roofline line among those that explain compute (the summary shows it)."""
        total = self.table_ns + self.roofline_ns
        if total <= 0:
            return Assumption("compute time: none", "compute-time")
        ways = ", ".join(f"{how} {t / total:.1%}" for how, t in sorted(self.hows.items()))
        whose = ("" if self.transfer is None else
                 f" of {self.transfer.source.name}, transferred to {self.gpu.name} (rule above)")
        table = (f"{self.table_ns / total:.1%} from the kernel table{whose} "
                 f"({self.table_ns / 1e6:.3f} ms: {ways or 'none'})")
        roof = (f"{self.roofline_ns / total:.1%} from the roofline "
                f"({self.roofline_ns / 1e6:.3f} ms, the compute model's efficiencies)")
        mostly_table = self.table_ns >= self.roofline_ns
        parts = (table, roof) if mostly_table else (roof, table)
        return Assumption(
            f"compute time per iteration summed over stages: {parts[0]}, {parts[1]}",
            "compute-time", explains={"compute": -1} if mostly_table else None)


_TABLE_BACKEND = {"flash": "flash", "fused": "cudnn"}
#: attention kernels (sim.models.vocab.ops.Op): ``*_ring`` is a context-parallel half step, shape
#: ``(b, hq, hkv, s, d, 0, s_kv)``, timed as the slower of ``s × s_kv`` and ``s_kv × s``
#: (sim.models.features.context: the ring's ranks run both at once)
_ATTN_KERNELS = ("attn_fwd", "attn_bwd", "attn_bwd_part", "attn_fwd_ring", "attn_bwd_ring")


def gemm_table_kind(op: Op, dtype: str, main_grad_fp32: bool) -> str:
    """The kernel-table kind of GEMM ``op`` run in ``dtype`` (docs/kernel-tables.md):
    ``gemm_<dtype>_acc32`` for a weight gradient written into an fp32 main-grad buffer
    (Megatron's gradient-accumulation fusion: ``wgrad_gemm_accum_fp32`` for bf16, Transformer
    Engine's ``fuse_wgrad_accumulation`` for fp8); ``gemm_fp8_fastacc`` for an FP8 forward
    GEMM (Transformer Engine ``module/base.py``: ``_2X_ACC_FPROP = False``, where dgrad and
    wgrad use the split accumulator); else ``gemm_<dtype>``."""
    if op.role == WGRAD and main_grad_fp32 and dtype in ("bf16", "fp8"):
        return f"gemm_{dtype}_acc32"
    if op.role == FPROP and dtype == "fp8":
        return "gemm_fp8_fastacc"
    return f"gemm_{dtype}"


def _table_hit(lookup, op: Op, backend: str):
    """The kernel table's answer for non-GEMM ``op`` or ``None`` (:mod:`sim.kernels.lookup`)."""
    k, sh = op.kernel, op.shape
    if not k or not sh or k == "gemm":
        return None
    if k in _ATTN_KERNELS:
        tb = _TABLE_BACKEND.get(backend)
        if tb is None:
            return None
        b, hq, hkv, s, d, causal, *kv = sh
        s_kv, bwd = (kv[0] if kv else 0), not k.startswith("attn_fwd")
        calls = [AttnShape(b, hq, s, d, bool(causal), bwd, s_kv, hkv)]
        if k.endswith("_ring"):  # a ring-attention half step: the slower of its two calls
            calls.append(AttnShape(b, hq, s_kv, d, False, bwd, s, hkv))
        hits = [lookup.attention_ns(tb, c) for c in calls]
        if None in hits:
            return None
        hit = max(hits, key=lambda h: h.time_ns)
        if k == "attn_bwd_part":
            return Hit(0.0, EXACT if hit.how == EXACT else hit.how)  # in the backward kernel
        return hit
    if k == "adamw_fused_fp32":
        return lookup.memory_ns(k, sh[0])
    return lookup.memory_ns(k, sh[0] * sh[1], shape=sh)

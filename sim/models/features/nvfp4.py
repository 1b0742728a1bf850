"""Transformer Engine's NVFP4 training (Megatron-Core ``--fp4-format e2m1 --fp4-recipe
nvfp4``, TE recipe ``NVFP4BlockScaling``, Megatron-Bridge's ``bf16_with_nvfp4_mixed``): which
GEMMs run in FP4, the quantisation kernels around them, and which GPUs run it.

Read in NVIDIA/TransformerEngine at d0067d0da6cb01811b8072a7d304f0e00344ce2b:

* **format** (``transformer_engine/common/recipe/__init__.py`` ``NVFP4BlockScaling``; TE docs
  ``docs/features/low_precision_training/nvfp4/nvfp4.rst``): E2M1 values (0.5 B), one E4M3
  scale per 16 consecutive values (1/16 B) and one FP32 scale per tensor from the tensor's
  global amax. The row-wise and the column-wise copy (stored transposed: NVFP4 GEMMs take only
  the TN layout) are both quantised from the bf16 tensor.
* **which GEMMs**: the recipe's quantisers cover the forward input and weight
  (``fp4_quant_fwd_inp``, ``fp4_quant_fwd_weight``) and the output gradient
  (``fp4_quant_bwd_grad``); with ``backward_override`` unset (its default) the backward keeps
  the quantised operands, so fprop (X·W), dgrad (dY·W) and wgrad (Xᵀ·dY) of every TE linear
  all run on NVFP4 operands. Attention is not quantised (``fp8_dpa = fp8_mha = False``: "Not
  applying quantization to attention for now"); norms, activations, the router and
  Megatron-Core's output layer (a ``ColumnParallelLinear`` outside TE) stay bf16.
* **inputs and output gradients** (``pytorch/csrc/quantizer.cpp``
  ``NVFP4Quantizer::quantize_impl``): the random Hadamard transform (RHT, 16 × 16) applies to
  their column-wise copy (the wgrad operands); with it the amax comes from
  ``nvte_hadamard_transform_amax`` — one read of the bf16 tensor (2 B/element) giving the
  row-wise amax of x and the column-wise amax of RHT(xᵀ); then, for a gathered tensor, the
  amax all-reduce (``reduce_amaxes``: ``allreduce_coalesced`` MAX of the row- and column-wise
  fp32 amaxes, 8 B, in the TP group, ``wait()`` on the compute stream); then
  ``nvte_quantize_with_hadamard_transform``, one kernel that writes the row-wise copy and the
  RHT'd column-wise copy (bf16 inputs whose rows are a multiple of 64 and columns of 128,
  ``is_eligible_for_rht_cast_fusion``: every transformer GEMM operand here): read 2 B, write
  0.5 + 0.5 B and 2 × 1/16 B of scales = **25/8 B per element**. Stochastic rounding
  (gradients only) is a hardware instruction of that kernel (TE docs "Stochastic Rounding"):
  no bytes of its own. Behind a TE LayerNormLinear the norm writes bf16 and this quantiser
  runs (``extensions/normalization.cpp``: ``UNFUSED`` for an NVFP4 quantiser with RHT).
* **weights**: no RHT, 16 × 16 (2D) block scales: the amax pass (``nvte_compute_amax``,
  2 B/element) then ``nvte_quantize_v2`` writing both copies (the same 25/8 B/element), once
  per iteration in the first microbatch's forward (TE's ``is_first_microbatch`` caching).
  Weights are quantised per TP shard: no amax reduction.
* **sequence parallelism** (``module/linear.py``: ``set_quantizer_amax_reduction_group`` with
  the TP group for the input of a column-parallel and the output gradient of a row-parallel
  linear under sequence parallelism): the local ``rows / t`` are quantised (both usages) and
  gathered in NVFP4 (``distributed.py`` ``_all_gather_nvfp4``: data and E4M3 scales of each
  usage the quantiser asks for, the per-tensor amax copied, not gathered): the forward input
  and the backward re-gather one usage (1/2 + 1/16 = 9/16 B per element), the output gradient
  of proj/fc2 both (9/8 B): :mod:`sim.models.features.quant_gather`.
* **hardware**: training on SM 10.0 / 10.3 only (nvfp4.rst "Supported devices"): the same
  data-center Blackwell family as MXFP8 (:data:`sim.models.features.mxfp8.FAMILIES`).

Megatron-LM (NVIDIA/Megatron-LM d98e8a64dd, ``megatron/training/arguments.py`` lines
1101-1109; ``megatron/core/transformer/transformer_config.py``): ``--fp4-format`` only
``e2m1``, ``--fp4-recipe`` ``nvfp4`` (default) or ``custom`` (a user quantizer factory:
refused here), never together with ``--fp8-format``. The parameters stay bf16 (``--bf16``):
simrun's ``--dtype`` stays ``bf16`` and names the parameters' and the untouched layers'
precision; the TE linears' GEMMs run on the GPU's dense ``fp4`` tensor cores, timed by the
transfer rule as H100's measured FP8 GEMM of the same shape (the lowest precision measured)
rescaled to the GPU's MXFP8 rate × its fp4 / fp8 peak ratio × 0.634, the fraction NVFP4
reached of that on one B300, kernel-only (:mod:`sim.models.blockscaled`,
:mod:`sim.models.compute_transfer` step 2; the roofline at H100's FP8 GEMM efficiency on the
fp4 peak where the table has no answer, :func:`sim.models.compute.op_time_ns`);
their operand bytes in the roofline's memory bound stay
the bf16 count (every transformer GEMM here is compute-bound either way).
"""

from __future__ import annotations

from dataclasses import replace

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import UsageError
from sim.models.features import mxfp8
from sim.models.vocab.ops import Op, OpKind, elementwise
from sim.models.vocab.rows import Block, Row

#: Megatron-Core's only FP4 format and the recipe simrun models (``custom`` is refused)
FORMAT, RECIPE = "e2m1", "nvfp4"
#: kernel kinds → bytes per element in sixteenths of a byte
RHT_AMAX, AMAX = "nvfp4_rht_amax", "nvfp4_amax"  # one bf16 read: 2 B
QUANTIZE_RHT, QUANTIZE_2D = "nvfp4_quantize_rht", "nvfp4_quantize_2d"  # 2 + 2·(1/2 + 1/16)
#: one E2M1 value (1/2 B) per element and one E4M3 scale (1 B) per :data:`BLOCK` values
VALUE_SIXTEENTHS, SCALE_BYTES, BLOCK = 8, 1, 16
_QUANTIZE = 32 + 2 * (VALUE_SIXTEENTHS + 16 * SCALE_BYTES // BLOCK)  # 2 + 2·(1/2 + 1/16)
BYTES = {RHT_AMAX: 32, AMAX: 32, QUANTIZE_RHT: _QUANTIZE, QUANTIZE_2D: _QUANTIZE}
#: the FP4 weights' transpose after their all-gather, per parameter in sixteenths of a byte
TRANSPOSE_BYTES = 18
#: the row- and column-wise fp32 amaxes of a gathered tensor, all-reduced together
AMAX_REDUCTION_BYTES = 8
#: simrun block of a TE linear → its parallel mode (under sequence parallelism a column-parallel
#: linear gathers its input, a row-parallel one its output gradient)
LINEARS = {"attn_qkv": "column", "attn_proj": "row", "mlp_fc1": "column", "mlp_fc2": "row"}


def check(par) -> None:
    """Megatron-LM's and simrun's refusals of ``--fp4-format`` (``par``: a
    :class:`~sim.parallel.config.ParallelConfig`)."""
    if not par.fp4:
        if par.fp4_param_gather:
            raise UsageError("applies to --fp4-format e2m1 runs (Megatron-Core: fp4_param "
                             "needs fp4)", field="fp4_param_gather")
        return
    if par.dtype == "fp8":
        raise UsageError("--fp4-format and --fp8-format are mutually exclusive (Megatron-LM "
                         "arguments.py); NVFP4 runs keep --dtype bf16", field="fp4_format")
    if par.dtype != "bf16":
        raise UsageError(f"NVFP4 is modelled with --dtype bf16 (Megatron-Bridge's "
                         f"bf16_with_nvfp4_mixed), got {par.dtype}", field="fp4_format")
    if par.fp4_recipe != RECIPE:
        raise UsageError(f"--fp4-recipe {par.fp4_recipe} is not modelled (use nvfp4)",
                         field="fp4_recipe")
    if par.fp4_param_gather:
        if par.fsdp or par.zero >= 1:
            raise UsageError("FP4 parameters with FSDP / ZeRO are not modelled; use it with "
                             "--distributed-optimizer", field="fp4_param_gather")
        if not par.distributed_optimizer:
            raise UsageError("needs --distributed-optimizer (the FP4 parameters are "
                             "all-gathered by the distributed optimizer)",
                             field="fp4_param_gather")


def check_model(moe: bool) -> None:
    """MoE layers under NVFP4 (TE's GroupedLinear) are not modelled."""
    if moe:
        raise UsageError("NVFP4 with MoE layers (TE GroupedLinear in FP4) is not modelled",
                         field="fp4_format")


def check_gpu(gpu_name: str, family: str, peaks: dict) -> None:
    """Refuse NVFP4 on a GPU without NVFP4 tensor cores or without a dense fp4 peak."""
    if family not in mxfp8.FAMILIES:
        raise UsageError(f"NVFP4 needs data-center Blackwell tensor cores (compute capability "
                         f"10.x: B200, GB200, GB300); GPU {gpu_name} (family "
                         f"{family or 'not in the catalogue'}) has no NVFP4 path",
                         field="fp4_format")
    if "fp4" not in peaks:
        raise UsageError(f"GPU {gpu_name} has no fp4 peak (node.gpu.peak_tflops keys: "
                         f"{', '.join(sorted(peaks))})", field="fp4_format")


def kernel(name: str, kind: str, rows: int, cols: int) -> Op:
    """One NVFP4 kernel over ``rows × cols`` elements (:data:`BYTES` per element)."""
    return elementwise(name, BYTES[kind] * rows * cols // 16, kind, (rows, cols))


def operand_ops(name: str, rows: int, cols: int) -> tuple[Op, Op]:
    """The RHT amax pass and the fused quantisation of ``rows × cols`` of a bf16 GEMM operand
    (for a gathered operand: this rank's sequence-parallel rows)."""
    return (kernel(f"{name}_nvfp4_rht_amax", RHT_AMAX, rows, cols),
            kernel(f"{name}_nvfp4_quantize", QUANTIZE_RHT, rows, cols))


def weight_ops(name: str, k: int, n: int) -> tuple[Op, ...]:
    """A ``k × n`` weight's amax pass and 2D quantisation (first microbatch)."""
    return (kernel(f"{name}_weight_nvfp4_amax", AMAX, k, n),
            kernel(f"{name}_weight_nvfp4_quantize", QUANTIZE_2D, k, n))


def transpose_op(name: str, params: int) -> Op:
    """TE's ``_nvfp4_2d_multi_tensor_transpose`` of gathered FP4 weights
    (``post_all_gather_processing``): reads the row-wise data and scales, writes the
    column-wise ones (0.5 + 1/16 B each way per parameter)."""
    return elementwise(f"{name}_nvfp4_transpose", TRANSPOSE_BYTES * params // 16,
                       "nvfp4_transpose", (1, params))


def _fp4(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    return tuple(replace(o, dtype="fp4") if o.kind is OpKind.GEMM else o for o in ops)


def _before(ops: tuple[Op, ...], extra: tuple[Op, ...]) -> tuple[Op, ...]:
    """``extra`` before the first GEMM of ``ops``."""
    i = next((j for j, o in enumerate(ops) if o.kind is OpKind.GEMM), 0)
    return ops[:i] + extra + ops[i:]


def add_quantize(items: list, sp: bool, t: int, weights: str = "cast") -> int:
    """The TE linears among ``items`` (one layer's blocks, in place): GEMMs in fp4, the
    quantisation kernels before the fprop and dgrad GEMMs. ``weights``: ``cast`` — bf16
    weights quantised in the first forward; with ``--fp4-param-gather`` the weights are FP4
    parameters (counted in the rows' ``fp8_params``, quantised after the optimizer step:
    :mod:`sim.models.features.nvfp4_params`): ``transpose`` — their column-wise copy made in
    the first forward (``--overlap-param-gather``), ``none`` — in the optimizer step. A
    gathered operand's amax pass is left to :func:`reduction_rows`. Returns how many linears
    changed."""
    done = 0
    for it in items:
        if not isinstance(it, Block) or it.name not in LINEARS:
            continue
        gemm = it.fprop_gemm()
        if gemm is None:
            continue
        m, k, n = gemm.shape
        mode = LINEARS[it.name]
        gx, gdy = sp and mode == "column", sp and mode == "row"
        amax, quant = operand_ops(f"{it.name}_input", m // t if gx else m, k)
        it.fwd = _before(_fp4(it.fwd), (quant,) if gx else (amax, quant))
        amax, quant = operand_ops(f"{it.name}_grad_output", m // t if gdy else m, n)
        it.ig = _before(_fp4(it.ig), (quant,) if gdy else (amax, quant))
        it.wg = _fp4(it.wg)
        if weights == "cast":
            it.first_fwd = it.first_fwd + weight_ops(it.name, k, n)
        else:
            it.fp8_params = k * n
            if weights == "transpose":
                it.first_fwd = it.first_fwd + (transpose_op(f"{it.name}_weight", k * n),)
        done += 1
    return done


def tp_amax_reduction() -> Comm:
    """The blocking MAX all-reduce of a gathered tensor's two fp32 amaxes in the TP group."""
    return Comm(CollKind.ALLREDUCE, GroupKind.TP, AMAX_REDUCTION_BYTES, blocking=True)


def reduction_rows(rows: list[Row], items: list, sp: bool, t: int) -> list[Row]:
    """``rows`` (one layer, built from ``items`` after :func:`add_quantize`) with, under
    sequence parallelism (TP size ``t`` > 1), a row before each column-parallel linear
    (forward: the input's RHT amax pass on the local rows, then the TP amax all-reduce) and
    one after each row-parallel linear (its input-gradient phase runs just before the
    linear's dgrad: the output gradient's amax pass and all-reduce)."""
    if not sp or t == 1:
        return rows
    amax: dict[str, Op] = {}
    for it in items:
        if isinstance(it, Block) and it.name in LINEARS:
            gemm = it.fprop_gemm()
            if gemm is not None:
                m, k, n = gemm.shape
                col = LINEARS[it.name] == "column"
                what = "input" if col else "grad_output"
                amax[it.name] = kernel(f"{it.name}_{what}_nvfp4_rht_amax", RHT_AMAX, m // t,
                                       k if col else n)
    out: list[Row] = []
    for r in rows:
        op = amax.get(r.name)
        if op is None:
            out.append(r)
        elif LINEARS[r.name] == "column":
            out += [Row(f"{r.name}_input_amax_reduction", fwd=(op,),
                        fwd_comm=tp_amax_reduction()), r]
        else:
            out += [r, Row(f"{r.name}_grad_output_amax_reduction", ig=(op,),
                           ig_comm=tp_amax_reduction())]
    return out


def describe(par) -> str:
    """The assumption line of an NVFP4 run."""
    sp = par.sp
    return (
        "--fp4-format e2m1 --fp4-recipe nvfp4 (Transformer Engine NVFP4BlockScaling: E2M1 "
        "values, an E4M3 scale per 16 values, an FP32 scale per tensor): the TE linears' "
        "fprop, dgrad and wgrad GEMMs (qkv, proj, fc1, fc2) on the GPU's fp4 tensor cores, "
        "timed as H100's measured FP8 GEMMs rescaled to the GPU's MXFP8 rate x its fp4/fp8 "
        "peak ratio x 0.634 (measured kernel-only on one B300: the transfer rule's "
        "block-scaled part; where the roofline times them, H100's FP8 GEMM efficiency on the "
        "fp4 peak); per linear "
        "and microbatch the input (before the GEMM) and the output gradient (before the dgrad "
        "GEMM) each get an RHT amax pass (2 B/element read) and one quantise kernel writing "
        "the row-wise and the Hadamard-transformed column-wise FP4 copies with their scales "
        "(2 B read, 0.5 + 0.5 + 2/16 B written: 3.125 B/element; stochastic rounding of the "
        "gradients inside it, no bytes of its own), timed at the kernel table's streaming "
        "bandwidth for their bytes; " + (
            "weights FP4 parameters (--fp4-param-gather line)" if par.fp4_param_gather else
            "weights: an amax pass and a 16x16-block quantisation (2 + 3.125 B/element) once "
            "per iteration in the first microbatch's forward") + (
            "; with sequence parallelism the gathered operands (qkv/fc1 inputs, proj/fc2 "
            "output gradients) are quantised on the local rows after a blocking TP "
            "all-reduce of their two fp32 amaxes (8 B); the qkv/fc1 input all-gathers and "
            "their backward re-gathers carry one NVFP4 copy (1/2 + 1/16 B per element), the "
            "proj/fc2 output-gradient all-gathers both (9/8 B)" if sp else "")
        + "; --dtype bf16: parameters, attention, norms, activations and the output layer "
        "stay bf16; MFU against the fp4 peak")

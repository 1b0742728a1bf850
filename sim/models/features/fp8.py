"""Transformer Engine's FP8 execution around the GEMMs of Megatron-Core's TE linears: the
memory-bound kernels that quantise each GEMM operand, per FP8 recipe (``--fp8-recipe``).

An FP8 GEMM on Hopper reads both operands in FP8, and the weight-gradient GEMM reads them
transposed, so Transformer Engine keeps two FP8 copies of every activation operand: row-wise
(forward / dgrad GEMM) and column-wise (the transpose, for the wgrad GEMM). Per linear
(``transformer_engine/pytorch/module/linear.py``, ``layernorm_linear.py``; ``base.py``
``grad_output_preprocess``; TransformerEngine main, 2.x) and per microbatch:

* **input activation** ``X`` (rows × k as the GEMM reads it): ``cast_transpose`` — reads the
  bf16 tensor (2 B/element), writes the FP8 copy and its transpose (1 + 1): 4 B/element.
  In a ``LayerNormLinear`` (Megatron-Core's ``TELayerNormColumnParallelLinear``: ``linear_qkv``
  and the dense ``linear_fc1``) with delayed scaling the norm kernel writes FP8 itself
  (``normalization.cpp``: ``FULLY_FUSED`` for ``Float8Quantizer``) and only the FP8 transpose
  runs (``ln_api.cpp``: ``nvte_transpose``; 1 + 1 B/element). With current scaling the norm
  writes bf16 and its amax (``FUSED_NORM_AMAX_FP8``), then a cast follows. The row-parallel
  linears (``linear_proj``, ``linear_fc2``, after core attention and the activation function
  that Megatron-Core runs in bf16) always cast. With sequence parallelism a column-parallel
  input is cast on this rank's ``rows/t`` and gathered in FP8; its transpose (of the gathered
  tensor) is made in backward before the wgrad GEMM (``update_usage(columnwise_usage=True)``).
* **output gradient** ``dY`` (rows × n): ``cast_transpose`` before the dgrad GEMM (TE fuses the
  bias gradient, ``bgrad_quantize``). A row-parallel linear with sequence parallelism gathers
  ``dY``: cast of the local ``rows/t``, FP8 all-gather, transpose in backward.
* **weights** (k × n on this GPU): ``cast_transpose`` (4 B/parameter) once per iteration and
  model chunk — Megatron-Core's TE wrappers pass ``is_first_microbatch`` (True on the first
  microbatch, then False: TE reuses its cached FP8 weight), so the cast runs in the first
  microbatch's forward only (``Layer.first_forward_ns``).
* **recipe** (Megatron-Core ``--fp8-recipe``, default ``delayed``: ``megatron/training/
  arguments.py``): ``delayed`` — scales from the amax history; every cast records its amax
  as it writes; at the exit of each ``fp8_autocast`` region (Megatron-Core's
  ``TransformerBlock.forward`` opens one around all its layers for the delayed recipe,
  ``use_outer_fp8_context``: per model chunk and microbatch) and at the end of its backward,
  TE all-reduces (MAX, blocking) the region's amaxes in the amax-reduction group and runs
  one fused amax/scale update kernel (``quantization.py``
  ``reduce_and_update_fp8_tensors``). ``tensorwise`` (current scaling, Bridge's "FP8-CS") —
  the scale comes from the tensor itself: an extra amax pass reads every operand before its
  cast (2 B/element; fused into the norm kernel for the LayerNormLinear inputs), each
  quantisation adds two single-thread kernels (amax zeroing, scale) and, for the operands
  gathered under sequence parallelism, a blocking TP all-reduce of the amax
  (:mod:`sim.models.features.fp8_current`); no amax history and no region reduction.
  ``mxfp8`` (MXFP8 block scaling, TE ``MXFP8BlockScaling``, Bridge's "FP8-MX"; data-center
  Blackwell only): see :mod:`sim.models.features.mxfp8`.

Every kernel is a memory-bound :func:`~sim.models.vocab.ops.elementwise` op whose time the kernel
table gives at the measured streaming bandwidth of the same bytes (:mod:`sim.kernels.lookup`),
else the roofline.
"""

from __future__ import annotations

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import UsageError
from sim.models.features import fp8_current, mxfp8
from sim.models.vocab.ops import Op, elementwise
from sim.models.vocab.rows import Block, Row
from sim.parallel.config import Training

#: Megatron-Core ``--fp8-recipe`` values simrun models; ``delayed`` is Megatron-Core's default
RECIPES = ("delayed", "tensorwise", mxfp8.RECIPE)
#: Megatron-Core's other recipe (DeepSeek-style 128-element block scaling): refused
NOT_MODELLED = ("blockwise",)
DEFAULT_RECIPE = Training.fp8_recipe  # Megatron-Core's default, written once (Training)
#: bytes read + written per element by each kernel (bf16 in, FP8 out)
BYTES = {"fp8_cast": 3, "fp8_cast_transpose": 4, "fp8_transpose": 2, "fp8_amax": 2}
#: Megatron-Core's TE linears of a transformer layer: simrun block → (parallel mode, norm fused
#: into the input cast: TELayerNormColumnParallelLinear). The MoE shared expert's fc1 follows a
#: separate norm (TEColumnParallelLinear).
LINEARS = {"attn_qkv": ("column", True), "attn_proj": ("row", False),
           "mlp_fc1": ("column", True), "mlp_fc2": ("row", False),
           "shared_mlp_fc1": ("column", False), "shared_mlp_fc2": ("row", False),
           "moe_fc1": ("column", False), "moe_fc2": ("row", False)}
#: the routed experts' TE ``GroupedLinear`` (transformer_engine/pytorch/module/
#: grouped_linear.py, v2.9: ``tex.split_quantize`` of the input over the experts' token
#: splits, row- and column-wise, in forward; of the output gradient in backward; each expert's
#: weight cached with ``is_first_microbatch``): the same bytes as a linear over all the
#: token copies, one kernel per operand (a multi-tensor quantize); the tokens arrive from the
#: dispatcher in bf16, so nothing is gathered in FP8 (no sequence-parallel split)
GROUPED = frozenset({"moe_fc1", "moe_fc2"})
#: FP8 scaling-factor meta tensors TE keeps per GEMM: forward (input, weight, output) and
#: backward (output gradient, input gradient); one fp32 amax each is reduced
FWD_METAS, BWD_METAS = 3, 2
AMAX_BYTES = 4


def check_recipe(recipe: str) -> None:
    """Refuse a recipe simrun does not model (field ``--fp8-recipe``)."""
    if recipe in RECIPES:
        return
    if recipe in NOT_MODELLED:
        raise UsageError(f"{recipe} (block scaling) is a Megatron-Core recipe simrun does not "
                         f"model; use one of {', '.join(RECIPES)}", field="fp8_recipe")
    raise UsageError(f"unknown recipe {recipe!r} (one of {', '.join(RECIPES)})",
                     field="fp8_recipe")


def kernel(name: str, kind: str, rows: int, cols: int) -> Op:
    """One cast/transpose/amax kernel over a ``rows × cols`` bf16 (or FP8) tensor (MXFP8
    kind: :data:`mxfp8.BYTES` counts sixteenths of a byte per element, for the E8M0 scales)."""
    if kind in mxfp8.BYTES:
        return elementwise(name, mxfp8.BYTES[kind] * rows * cols // 16, kind, (rows, cols))
    return elementwise(name, BYTES[kind] * rows * cols, kind, (rows, cols))


def operand_casts(name: str, rows: int, cols: int, recipe: str, *, norm_fused: bool = False,
                  gathered: bool = False, t: int = 1,
                  tensors: int = 1) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """Kernels that quantise one bf16 GEMM operand of ``rows × cols`` (as the GEMM reads it):
    ``(before the GEMM, before the wgrad GEMM)``. ``norm_fused``: produced by a TE
    LayerNormLinear's norm; ``gathered``: sequence-parallel, cast on ``rows / t`` rows and
    all-gathered in FP8 (transposed after the gather); ``tensors``: how many tensors TE
    quantises one by one (a grouped linear's experts: their current-scaling kernels)."""
    local = rows // t if gathered else rows
    if recipe == mxfp8.RECIPE:  # one quantise kernel, both usages, on the local rows
        return (kernel(f"{name}_mxfp8_quantize", mxfp8.QUANTIZE, local, cols),), ()
    fused = norm_fused and recipe == "delayed"  # the norm writes FP8 itself
    before: list[Op] = []
    if recipe == fp8_current.RECIPE:  # zero the amax, amax pass (unless the norm computes
        before.append(fp8_current.zero_op(name, tensors))  # it), then the scale kernel
        if not norm_fused:
            before.append(kernel(f"{name}_amax", "fp8_amax", local, cols))
        before.append(fp8_current.scale_op(name, tensors))
    if gathered:
        if not fused:
            before.append(kernel(f"{name}_cast", "fp8_cast", local, cols))
        return tuple(before), (kernel(f"{name}_transpose", "fp8_transpose", rows, cols),)
    kind = "fp8_transpose" if fused else "fp8_cast_transpose"
    before.append(kernel(f"{name}_{kind[4:]}", kind, rows, cols))
    return tuple(before), ()


def weight_casts(name: str, k: int, n: int, recipe: str, tensors: int = 1) -> tuple[Op, ...]:
    """The once-per-iteration quantisation of a ``k × n`` weight (first microbatch; ``tensors``
    weights of ``k / tensors`` rows for a grouped linear); current scaling: amax zeroing,
    amax pass and scale kernel first (no reduction: per TP shard)."""
    w = f"{name}_weight"
    if recipe == mxfp8.RECIPE:
        return (kernel(f"{w}_mxfp8_quantize", mxfp8.QUANTIZE, k, n),)
    amax = ((fp8_current.zero_op(w, tensors), kernel(f"{w}_amax", "fp8_amax", k, n),
             fp8_current.scale_op(w, tensors)) if recipe == fp8_current.RECIPE else ())
    return amax + (kernel(f"{w}_cast_transpose", "fp8_cast_transpose", k, n),)


def _insert_before(ops: tuple[Op, ...], name: str, extra: tuple[Op, ...]) -> tuple[Op, ...]:
    """``ops`` with ``extra`` just before the op called ``name`` (at the start if absent)."""
    i = next((j for j, op in enumerate(ops) if op.name == name), 0)
    return ops[:i] + extra + ops[i:]


def add_casts(items: list, recipe: str, sp: bool, t: int, weights: str = "cast") -> int:
    """Add TE's FP8 quantisation kernels to the TE linears among ``items`` (one transformer
    layer's blocks and operators, in place); returns how many linears got them. ``sp``:
    sequence parallelism in effect; ``t``: TP size. ``weights``: ``cast`` — bf16 weights, cast
    once per iteration in the first forward; with ``--fp8-param-gather`` the weights are FP8
    parameters (counted in the blocks' ``fp8_params`` / ``fp8_expert_params``;
    :mod:`sim.models.features.fp8_params`): ``transpose`` — their FP8 transpose after the all-gather
    runs in the first forward; ``none`` — it runs in the optimizer step."""
    done = 0
    for it in items:
        if not isinstance(it, Block) or it.name not in LINEARS:
            continue
        gemm = it.fprop_gemm()
        if gemm is None:
            continue
        mode, norm = LINEARS[it.name]
        m, k, n = gemm.shape
        gsp = sp and it.name not in GROUPED
        each = gemm.count if it.name in GROUPED else 1  # tensors quantised one by one
        x_fwd, x_wg = operand_casts(f"{it.name}_input", m, k, recipe, norm_fused=norm,
                                    gathered=gsp and mode == "column", t=t, tensors=each)
        dy_ig, dy_wg = operand_casts(f"{it.name}_grad_output", m, n, recipe,
                                     gathered=gsp and mode == "row", t=t, tensors=each)
        it.fwd = _insert_before(it.fwd, gemm.name, x_fwd)
        it.ig = _insert_before(it.ig, f"{gemm.name}_dgrad", dy_ig)
        it.wg = x_wg + dy_wg + it.wg
        # a grouped linear's weights: one k × n per local expert
        if weights == "cast":
            it.first_fwd = it.first_fwd + weight_casts(it.name, k * gemm.count, n, recipe,
                                                       each)
        else:
            if it.name in GROUPED:
                it.fp8_expert_params = k * gemm.count * n
            else:
                it.fp8_params = k * n
            if weights == "transpose":
                it.first_fwd = it.first_fwd + (
                    kernel(f"{it.name}_weight_transpose", "fp8_transpose", k * gemm.count, n),)
        done += 1
    return done


def amax_group(tp: int, dp_cp: int) -> GroupKind | None:
    """The group simrun times the delayed-scaling amax all-reduce in: Megatron-Core's amax
    reduction group is the tensor+data(+context)-parallel group (``parallel_state.
    get_amax_reduction_group``); a small all-reduce costs its latency, set by the ranks across
    nodes — the DP group where DP > 1, else the TP group, ``None`` on one GPU."""
    if dp_cp > 1:
        return GroupKind.DP
    return GroupKind.TP if tp > 1 else None


def autocast_rows(layer_rows: list[Row], par) -> list[Row]:
    """:func:`region_rows` for one model chunk's rows under ``par`` (a ParallelConfig): its
    recipe, the linears that carry weight casts, the amax group."""
    return region_rows(layer_rows, par.fp8_recipe, sum(1 for r in layer_rows if r.first_fwd),
                       amax_group(par.tp, par.dp_cp))


def region_rows(layer_rows: list[Row], recipe: str, linears: int,
                group: GroupKind | None) -> list[Row]:
    """Delayed scaling: ``layer_rows`` (one model chunk's transformer layers, one
    ``fp8_autocast`` region) between the rows of the region's amax reductions — the forward
    one after its last layer, the backward one after its first layer's backward (placed before
    it: rows run in reverse in backward). Each is a blocking MAX all-reduce of the region's
    amaxes (``linears`` × metas × 4 B) in ``group`` (``None``: a single GPU, no reduction)
    and one fused update kernel reading and writing them. Other recipes, or no linears:
    ``layer_rows`` unchanged."""
    if recipe != "delayed" or not linears or not layer_rows:
        return layer_rows
    first, last = layer_rows[0].tags.get("layer", 0), layer_rows[-1].tags.get("layer", 0)
    out = []
    for fwd, metas, index in ((False, BWD_METAS, first), (True, FWD_METAS, last)):
        size = linears * metas * AMAX_BYTES
        comm = None if group is None else Comm(CollKind.ALLREDUCE, group, size, blocking=True)
        update = (elementwise("fp8_amax_scale_update", 2 * size),)
        which = "fwd" if fwd else "bwd"
        row = (Row(f"layer{index}_fp8_amax_reduction_{which}", fwd=update, fwd_comm=comm) if fwd
               else Row(f"layer{index}_fp8_amax_reduction_{which}", ig=update, ig_comm=comm))
        row.tags["layer"] = index
        out.append(row)
    return [out[0], *layer_rows, out[1]]


def describe(recipe: str, sp: bool, fp8_weights: bool = False) -> str:
    """The assumption line of an FP8 run (``fp8_weights``: ``--fp8-param-gather``, whose line
    says what happens to the weights)."""
    how = f"--fp8-recipe {recipe}" + (" (Megatron-Core's default)"
                                      if recipe == DEFAULT_RECIPE else "")
    if recipe == mxfp8.RECIPE:
        return (f"{how}: Transformer Engine quantisation per TE linear (qkv, proj, fc1, fc2) "
                "and microbatch of the input activation (before the GEMM) and the output "
                "gradient (before the dgrad GEMM), timed at the kernel table's streaming "
                f"bandwidth for their bytes; {mxfp8.describe(sp)}; {_BF16_REST}")
    common = ("Transformer Engine FP8 casts per TE linear (qkv, proj, fc1, fc2) and microbatch, "
              "timed at the kernel table's streaming bandwidth for their bytes: input "
              "activation cast+transpose (2 B read, 1+1 B written per element), output "
              "gradient cast+transpose before the dgrad GEMM, " + (
                  "weights FP8 parameters (--fp8-param-gather line)" if fp8_weights else
                  "weights cast+transpose once per iteration in the first microbatch's forward "
                  "(is_first_microbatch caching)"))
    if sp:
        common += ("; with sequence parallelism the gathered operands are cast on the local "
                   "shard (3 B/element) and transposed after the gather (2 B/element) before "
                   "the wgrad GEMM; the all-gathers (qkv/fc1 inputs and their backward "
                   "re-gathers, proj/fc2 output gradients) carry the FP8 data, 1 B/element")
    if recipe == "delayed":
        rec = ("delayed scaling: qkv/fc1 inputs written in FP8 by the fused LayerNorm (only "
               "the FP8 transpose runs; the norm is timed as its bf16-output kernel), amaxes "
               "recorded by the casts; per model chunk and microbatch one blocking amax "
               "all-reduce after the forward and one after the backward (4 B per FP8 tensor; "
               "Megatron-Core's tensor+data-parallel amax group, timed in the DP group) and "
               "a fused amax/scale update kernel")
    else:
        rec = ("current (per-tensor) scaling: an amax pass (2 B/element) reads each operand "
               "before its cast (fused into the norm for qkv/fc1, which then writes bf16 and "
               "is cast)" + ("" if fp8_weights else ", and each weight before its cast")
               + ", each quantisation with TE's two single-thread kernels (amax zeroing, "
               "scale from the amax; 4 and 8 B); no amax history or region reduction" + (
                   "; with sequence parallelism the qkv/fc1 inputs and the proj/fc2 output "
                   "gradients, quantised on the local rows before their FP8 all-gather, "
                   "all-reduce their 4-byte amax in the TP group (blocking the compute "
                   "stream) between the amax and the cast" if sp else ""))
    return f"{how}: {common}; {rec}; {_BF16_REST}"


_BF16_REST = ("the output layer (Megatron-Core ColumnParallelLinear, outside TE), attention, "
              "norms and activations stay bf16; MoE: the routed experts' TE GroupedLinear "
              "(fc1, fc2) casts its input and output gradient over all token copies "
              "(split_quantize; the tokens arrive in bf16, nothing gathered in FP8) and each "
              "local expert's weight once; the router GEMM has no casts")

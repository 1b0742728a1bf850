"""Transformer Engine's FP8 current scaling (Megatron-Core ``--fp8-recipe tensorwise``,
Megatron-Bridge's "FP8-CS"): what one quantisation runs besides the cast, and the TP
all-reduce of the amax of sequence-parallel operands.

Read in NVIDIA/TransformerEngine v2.9 (70f536662ae10a62a54f4ed1ba92e3314c5cfd69, the release
Megatron-Bridge r0.2.0 pins: ``transformer-engine[pytorch]>=2.9.0a0,<2.10.0``):

* **one quantisation** (``pytorch/csrc/quantizer.cpp``
  ``Float8CurrentScalingQuantizer::quantize_impl``): ``nvte_compute_amax`` — a
  single-thread ``zero_amax_kernel<<<1, 1>>>`` (writes the fp32 amax, 4 B) then the amax
  kernel, one read of the bf16 tensor (``common/recipe/current_scaling.cu``
  ``launch_amax_kernel``); if ``with_amax_reduction``, a MAX all-reduce of the 4-byte amax in
  ``amax_reduction_group`` whose ``wait()`` holds the compute stream; then
  ``compute_scale_from_amax_kernel<<<1, 1>>>`` (reads the amax, writes the scale: 8 B); then
  the cast (``nvte_quantize_v2``), a second read of the tensor. Two reads of the input where
  delayed scaling's cast reads it once. Behind a TE ``LayerNormLinear`` the norm computes the
  amax itself (``csrc/extensions/normalization.cpp`` ``FUSED_NORM_AMAX_FP8``, taken unless
  ``NVTE_NORM_FWD_USE_CUDNN`` is set): ``create_unquantized_tensor_with_amax`` zeroes the
  amax (``amax.zero_()``, 4 B) before the norm, and ``quantize_with_amax`` runs the
  reduction, the scale kernel and the cast — no amax pass.
* **which quantisers reduce** (``module/linear.py``, ``layernorm_linear.py``
  ``_customize_quantizers_float8_current_scaling``): with sequence parallelism, the input
  quantiser of a column-parallel linear (``linear_qkv``, ``linear_fc1``: the local rows are
  quantised, then all-gathered in FP8, ``gather_along_first_dim(..., quantizer=...)`` or the
  userbuffers copy) and the output-gradient quantiser of a row-parallel one
  (``linear_proj``, ``linear_fc2``: ``base.py`` ``grad_output_preprocess`` quantises the local
  ``dY`` before its all-gather), both with ``amax_reduction_group = tp_group``: every TP rank
  must scale the gathered tensor alike. No other quantiser reduces: the column-parallel
  output gradients and the row-parallel inputs are not gathered, and weights are quantised
  per TP shard (``GEMM1_WEIGHT`` gets no reduction group; FP8 parameters reduce their amaxes
  in the optimizer's data-parallel group instead, :mod:`sim.models.features.fp8_params`).
* **routed experts** (``module/grouped_linear.py`` → ``tex.split_quantize``,
  ``csrc/extensions/cast.cpp`` ``multi_tensor_quantize_impl``): the fused multi-tensor
  cast-transpose serves only delayed scaling (``IsFloat8Quantizers``); current-scaling
  quantisers run one by one, so every local expert's split (and weight) gets its own
  zeroing and scale kernels (``count``). simrun still times the splits' amax passes and
  casts as one kernel over all token copies (the bytes are exact; the extra launches of
  those two kernels are not counted).

simrun places the casts of a gathered operand after its all-gather, just before the GEMM
(:func:`sim.models.features.fp8.operand_casts`); the reduction row sits right before the cast — the
order of the stream's waits changes, not their sum (with ``--tp-comm-overlap`` the gather
moves into the GEMM and the order is TE's).
"""

from __future__ import annotations

from dataclasses import replace

from sim.comm import CollKind, Comm, GroupKind
from sim.models.vocab.ops import Op, elementwise
from sim.models.vocab.rows import Row

RECIPE = "tensorwise"
#: bytes of the two single-thread kernels of one quantisation: zeroing the fp32 amax (write
#: 4 B) and the scale from the amax (read 4 B, write 4 B)
ZERO_BYTES, SCALE_BYTES = 4, 8
#: bytes of the amax all-reduced in the TP group (one fp32)
AMAX_BYTES = 4
#: the TE linears whose sequence-parallel operand is reduced: name → the operand
REDUCED = {"attn_qkv": "input", "mlp_fc1": "input", "shared_mlp_fc1": "input",
           "attn_proj": "grad_output", "mlp_fc2": "grad_output",
           "shared_mlp_fc2": "grad_output"}


def zero_op(name: str, count: int = 1) -> Op:
    """``zero_amax_kernel`` / ``amax.zero_()`` before an amax is computed (4 B written), for
    ``count`` tensors (one kernel each)."""
    return replace(elementwise(f"{name}_amax_zero", ZERO_BYTES * count, "fp8_amax_zero"),
                   count=count)


def scale_op(name: str, count: int = 1) -> Op:
    """``compute_scale_from_amax_kernel`` before the cast (reads the amax, writes the scale),
    for ``count`` tensors (one kernel each)."""
    return replace(elementwise(f"{name}_scale", SCALE_BYTES * count, "fp8_scale"), count=count)


def tp_amax_reduction() -> Comm:
    """The blocking MAX all-reduce of one fp32 amax in the TP group."""
    return Comm(CollKind.ALLREDUCE, GroupKind.TP, AMAX_BYTES, blocking=True)


def _take(row: Row, phase: str, operand: str) -> tuple[Op, ...]:
    """Remove from ``row``'s ``phase`` the ops that precede the reduction of ``operand``
    (its amax zeroing and amax pass) and return them; ``()`` when the row has no scale
    kernel for it (no FP8 casts were added)."""
    ops = getattr(row, phase)
    if not any(o.name == f"{operand}_scale" for o in ops):
        return ()
    pre = {f"{operand}_amax_zero", f"{operand}_amax"}
    setattr(row, phase, tuple(o for o in ops if o.name not in pre))
    return tuple(o for o in ops if o.name in pre)


def reduction_rows(rows: list[Row], recipe: str, sp: bool, t: int) -> list[Row]:
    """``rows`` (one layer, names not yet prefixed) with the TP amax reductions of current
    scaling under sequence parallelism (``sp``, TP size ``t`` > 1): a row before each
    column-parallel linear whose forward runs the input's amax zeroing (and amax pass when
    no norm computes it), then the all-reduce; a row after each row-parallel linear whose
    input-gradient phase does the same for the output gradient (rows run in reverse in
    backward: it runs just before the linear's dgrad). Other recipes, no SP or TP 1:
    ``rows`` unchanged."""
    if recipe != RECIPE or not sp or t == 1:
        return rows
    out: list[Row] = []
    for r in rows:
        operand = REDUCED.get(r.name)
        if operand == "input":
            pre = _take(r, "fwd", f"{r.name}_input")
            if pre:
                out.append(Row(f"{r.name}_input_amax_reduction", fwd=pre,
                               fwd_comm=tp_amax_reduction()))
        out.append(r)
        if operand == "grad_output":
            pre = _take(r, "ig", f"{r.name}_grad_output")
            if pre:
                out.append(Row(f"{r.name}_grad_output_amax_reduction", ig=pre,
                               ig_comm=tp_amax_reduction()))
    return out

"""Bytes per element of the sequence-parallel tensor-parallel all-gathers of the TE linears
(qkv, proj, fc1, fc2) for the run's precision.

Read in NVIDIA/TransformerEngine at d0067d0da6cb01811b8072a7d304f0e00344ce2b:

* **forward input of a column-parallel linear** (qkv, fc1; ``module/layernorm_linear.py``
  ``_LayerNormLinear.forward`` lines 283-314, ``module/layernorm_mlp.py`` 457-490,
  ``module/linear.py`` ``_linear_forward_impl`` 378-410): the local norm output is quantised
  (row-wise and, for the backward, column-wise usage) and the quantiser is set to
  ``rowwise=True, columnwise=False`` before ``gather_along_first_dim(..., quantizer=...)``:
  one quantised copy is gathered.
* **backward re-gather of that input for the wgrad GEMM** (``layernorm_linear.py`` 773-793,
  ``linear.py`` 984-1000, ``layernorm_mlp.py`` 1182-1196): the saved local quantised input,
  gathered with ``set_quantizer_usage_for_wgrad_all_gather`` (``module/_common.py`` 35-55):
  per-tensor FP8 gathers its row-wise data (and transposes after), block-scaled formats
  their column-wise copy: one copy.
* **backward output-gradient all-gather of a row-parallel linear** (proj, fc2;
  ``module/base.py`` ``grad_output_preprocess`` 1719-1751, quantiser usage set to row- and
  column-wise by ``linear.py`` 905-906): ``gather_along_first_dim`` with the quantiser.
  ``_all_gather_fp8`` (``distributed.py`` 989-1060) quantises row-wise only and gathers the
  FP8 data (the fp32 scale is the same on every rank, not gathered); ``_all_gather_mxfp8``
  (1527-1666) and ``_all_gather_nvfp4`` (1332-1526) gather data and scales of every usage the
  quantiser holds: both copies. With Userbuffers (``--tp-comm-overlap``) the same copies travel
  (``fill_userbuffers_buffer_for_all_gather`` with the quantiser; for MXFP8 the column-wise
  copy in a second all-gather beside the dgrad GEMM, ``linear.py`` 1185).
* reduce-scatters carry the bf16 outputs (and input gradients): unchanged.

Per copy: FP8 (delayed, tensorwise) 1 B per element; MXFP8 1 B + one E8M0 byte per 32
(:data:`sim.models.features.mxfp8.BLOCK`); NVFP4 1/2 B + one E4M3 byte per 16
(:data:`sim.models.features.nvfp4.BLOCK`; the fp32 per-tensor amax is copied, not gathered).
Megatron-Core's output layer (not a TE module) and the MoE expert paths keep bf16's 2 B.
"""

from __future__ import annotations

from fractions import Fraction

from sim.models.features import mxfp8, nvfp4
from sim.models.vocab.ops import ACT_BYTES


def copy_bytes(par) -> Fraction:
    """Bytes per element of one gathered copy of a TE linear's operand in this run (bf16's
    ``ACT_BYTES`` when its GEMMs are not quantised)."""
    if par.fp4:
        return Fraction(nvfp4.VALUE_SIXTEENTHS, 16) + Fraction(nvfp4.SCALE_BYTES, nvfp4.BLOCK)
    if par.dtype != "fp8":
        return Fraction(ACT_BYTES)
    if par.fp8_recipe == mxfp8.RECIPE:
        return mxfp8.VALUE_BYTES + Fraction(mxfp8.SCALE_BYTES, mxfp8.BLOCK)
    return Fraction(1)  # per-tensor FP8: the E4M3/E5M2 data, scale not gathered


def gathered_bytes(par) -> tuple[Fraction, Fraction]:
    """Bytes per element of (the qkv/fc1 input all-gather and its backward re-gather, the
    proj/fc2 output-gradient all-gather): block-scaled formats (MXFP8, NVFP4) gather both
    copies of the output gradient, per-tensor FP8 and bf16 one."""
    one = copy_bytes(par)
    block_scaled = bool(par.fp4) or (par.dtype == "fp8" and par.fp8_recipe == mxfp8.RECIPE)
    return one, 2 * one if block_scaled else one

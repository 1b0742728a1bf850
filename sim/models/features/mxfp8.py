"""Transformer Engine's MXFP8 block scaling (Megatron-Core ``--fp8-recipe mxfp8``, TE recipe
``MXFP8BlockScaling``, Megatron-Bridge's "FP8-MX"): what one quantisation costs and which
GPUs run it.

Read in NVIDIA/TransformerEngine at d0067d0da6cb01811b8072a7d304f0e00344ce2b (main, 2026) and
NVIDIA/Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553:

* **format**: E4M3 values with one E8M0 (1-byte power-of-two) scale per 32 consecutive values
  (TE user guide "MXFP8"; ``transformer_engine/common/recipe/__init__.py``
  ``MXFP8BlockScaling``). A GEMM reads its operands with the scales blocked along the
  reduction dimension, so the wgrad GEMM cannot use a transpose of the row-wise copy: TE
  quantises each operand twice, row-wise (blocks along the rows' 32 elements) and
  column-wise (blocks down 32 rows), in one kernel (``MXFP8Quantizer`` with both usages;
  ``common/cast/mxfp8``). Per element: read the bf16 value (2 B), write two FP8 copies
  (1 + 1 B) and two scale bytes per 32 elements (2 / 32 B): **65/16 = 4.0625 B**. The scales
  come from each block's own amax inside that kernel: no amax pass, no amax history, no
  scale kernels, no amax reduction (nothing is all-reduced in TP or DP).
* **norms** (``pytorch/csrc/extensions/normalization.cpp``): for an MXFP8 quantiser the norm
  is fused with the quantisation only through cuDNN (``NVTE_NORM_FWD_USE_CUDNN`` set and
  rows a multiple of 128); by default (``UNFUSED``) the norm writes bf16 and the quantise
  kernel follows, as for any other linear input.
* **sequence parallelism** (``module/linear.py`` ``_linear_forward_impl``: for a quantiser
  other than ``Float8Quantizer`` / ``Float8CurrentScalingQuantizer`` the local input is
  quantised with column-wise usage too, before the all-gather; ``_linear_backward`` gathers
  the column-wise data for the wgrad GEMM, ``set_quantizer_usage_for_wgrad_all_gather``):
  the gathered operand is quantised once on this rank's ``rows / t`` rows, both ways, and no
  transpose runs after the gather. The gathers carry the quantised data
  (``distributed.py`` ``_all_gather_mxfp8``: the E4M3 data and the E8M0 scales of each usage
  the quantiser asks for): the forward input and the backward re-gather one usage each
  (1 + 1/32 B per element), the output gradient of proj/fc2 both (2 · (1 + 1/32) B):
  :mod:`sim.models.features.quant_gather`.
* **weights**: quantised like an activation, both ways, once per iteration (TE's
  ``is_first_microbatch`` caching). Megatron-Bridge's MXFP8 precision
  (``bf16_with_mxfp8_mixed``, ``src/megatron/bridge/training/mixed_precision.py``) sets
  ``fp8_param_gather`` with ``reuse_grad_buf_for_mxfp8_param_ag``: the distributed
  optimizer all-gathers the bf16 weights into the gradient buffer (2 B per parameter) and
  ``_post_param_sync`` quantises them into the MXFP8 parameters
  (``megatron/core/distributed/param_and_grad_buffer.py``: ``copy_tensors_to_quantized_params``),
  where the forward pre-hook waits for the bucket: the same bytes and the same place as the
  bf16 weights' once-per-iteration quantisation, so simrun runs ``--fp8-param-gather`` with
  mxfp8 as that path (the assumption line says so).
* **GEMM rate**: MXFP8 GEMMs run on Blackwell's FP8 tensor cores (TE user guide "MXFP8":
  hardware-native block scaling of the 5th-generation tensor cores), timed by the transfer
  rule's per-tensor fp8 ratio × 1.0512, the MXFP8 / FP8-current per-layer GEMM time measured
  kernel-only on one B300 (:mod:`sim.models.blockscaled`; applied through
  :func:`sim.models.compute_setup.timer_for`, :mod:`sim.models.compute_transfer`).
* **hardware**: MXFP8 (and NVFP4) run only on data-center Blackwell, compute capability
  10.0 / 10.3 (TE "Datatype and hardware support matrix",
  nvidia.github.io/TransformerEngine/support_matrix.html); Hopper has no MXFP8 tensor-core
  path: refused on any GPU outside :data:`FAMILIES`.
"""

from __future__ import annotations

from sim.errors import UsageError

RECIPE = "mxfp8"
#: the quantise kernel's kind and its bytes per element in sixteenths of a byte: read 2 B,
#: write 1 + 1 B and 2 E8M0 scale bytes per 32 elements (65 / 16 B)
QUANTIZE = "fp8_mxfp8_quantize"
#: one E4M3 value (1 B) per element and one E8M0 scale (1 B) per :data:`BLOCK` values
VALUE_BYTES, SCALE_BYTES, BLOCK = 1, 1, 32
BYTES = {QUANTIZE: 16 * (2 + 2 * VALUE_BYTES) + 2 * 16 * SCALE_BYTES // BLOCK}
#: GPU catalogue families (``sim/data/gpus.csv``) with MXFP8 tensor cores: data-center
#: Blackwell (B200, GB200, GB300; compute capability 10.x)
FAMILIES = ("B200",)


def check_gpu(recipe: str, gpu_name: str, family: str) -> None:
    """Refuse ``--fp8-recipe mxfp8`` on a GPU without MXFP8 tensor cores (field
    ``fp8_recipe``)."""
    if recipe == RECIPE and family not in FAMILIES:
        raise UsageError(f"mxfp8 needs data-center Blackwell tensor cores (compute capability "
                         f"10.x: B200, GB200, GB300); GPU {gpu_name} (family "
                         f"{family or 'not in the catalogue'}) has no MXFP8 path",
                         field="fp8_recipe")


def describe(sp: bool) -> str:
    """The recipe part of an MXFP8 run's ``--fp8-recipe`` assumption line."""
    return ("MXFP8 block scaling (TE MXFP8BlockScaling: E4M3 values, one E8M0 scale per 32 "
            "values): one quantise kernel per operand writes the row-wise and column-wise "
            "copies with their scales (2 B read, 1 + 1 + 2/32 B written per element: "
            "4.0625 B), behind the norms too (TE fuses norm and MXFP8 only through cuDNN, "
            "NVTE_NORM_FWD_USE_CUDNN, not modelled); weights quantised the same way once per "
            "iteration in the first microbatch's forward (with --fp8-param-gather: "
            "Megatron-Bridge's reuse_grad_buf_for_mxfp8_param_ag path, bf16 all-gather of the "
            "weights then this quantisation, the same bytes and place); no amax pass, "
            "history or reduction; GEMMs at the transfer rule's per-tensor fp8 ratio x 1.0512 "
            "(MXFP8 / FP8-current GEMM time, one B300 measurement: the rule's block-scaled "
            "part; where the roofline times them, as any FP8 GEMM)" + (
                "; with sequence parallelism the gathered operands are quantised both ways on "
                "the local rows before the gather, no transpose after it; the qkv/fc1 input "
                "all-gathers and their backward re-gathers carry one MXFP8 copy (1 + 1/32 B "
                "per element), the proj/fc2 output-gradient all-gathers both (2.0625 B)"
                if sp else ""))

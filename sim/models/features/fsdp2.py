"""PyTorch FSDP2 (``fully_shard``; Megatron-LM's ``--use-torch-fsdp2``): the memory copies
around each unit's all-gather and reduce-scatter, and the fp32 gradient reduction of the mixed
precision policy torchtitan gives it.

Read from ``torch/distributed/_composable/fsdp/_fsdp_collectives.py`` (pytorch/pytorch, the
version stored at commit 01d66d21f38a04729a87a5840f405ca1b7acf856; FSDP2 lived under
``_composable/fsdp`` before PyTorch 2.6 moved it to ``fsdp/_fully_shard``) and torchtitan's
``torchtitan/parallelisms/parallelize_llama.py`` at commit 0413363, which wraps every
transformer block and the whole model with ``fully_shard(..., mp_policy=
MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))``. Per unit of
``P`` parameters (bytes read + written):

- **all-gather copy-out** (``foreach_all_gather_copy_out``): after waiting for the all-gather,
  ``torch.split_with_sizes_copy`` copies the gathered bf16 buffer into the unsharded
  parameters on the compute stream: 4·P bytes, one kernel, before the unit's forward and
  before its backward. The copy-in (each fp32 shard cast to bf16 and copied into the
  all-gather buffer, 10·P/DP bytes) runs on the all-gather copy-in stream: not modelled.
- **reduce-scatter copy-in** (``foreach_reduce_scatter``, on the reduce-scatter stream after it
  waits for the compute stream): ``torch.cat`` of the unit's bf16 gradients into the fp32
  reduce-scatter input (reads 2, writes 4: 6·P bytes), then the in-place pre-divide
  ``_div_if_needed(input, predivide_factor)`` (8·P bytes; the factor is > 1 for every DP ≥ 2);
  then the reduce-scatter moves **4 bytes per parameter** (fp32) instead of 2. The post-divide
  and the gradient accumulation touch the 1/DP shard: not modelled.

The reduce-scatter copy-in runs beside the next unit's backward on another stream. simrun
charges it to the compute stream where FSDP2 issues it (right after the unit's backward): a
memory-bound kernel that has the GPU to itself takes this long, and beside a GEMM it takes the
SMs and HBM bandwidth the GEMM would use (first order; no measurement of the overlap was
found). Not modelled: the extra memory of the fp32 reduce-scatter buffers.
"""

from __future__ import annotations

from sim.models.vocab.ops import Op, elementwise

REDUCE_BYTES = 4  # MixedPrecisionPolicy(reduce_dtype=torch.float32): fp32 gradients on the wire


def copy_out(params: int) -> tuple[Op, ...]:
    """The all-gather copy-out of a unit of ``params`` bf16 parameters (compute stream)."""
    return (elementwise("fsdp2_all_gather_copy_out", 4 * params),)


def reduce_scatter_copy_in(params: int) -> tuple[Op, ...]:
    """The reduce-scatter copy-in: bf16 gradients cast into the fp32 buffer, pre-divide."""
    return (elementwise("fsdp2_reduce_scatter_copy_in", 6 * params),
            elementwise("fsdp2_reduce_scatter_predivide", 8 * params))


def describe() -> str:
    """The assumption line of ``--use-torch-fsdp2``."""
    return ("--use-torch-fsdp2: PyTorch FSDP2 fully_shard with torchtitan's "
            "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): gradients "
            "reduce-scattered in fp32 (4 bytes per parameter); per unit, the all-gather "
            "copy-out (split_with_sizes_copy, 4 bytes per parameter) on the compute stream "
            "before its forward and its backward, and the reduce-scatter copy-in (cat into "
            "the fp32 buffer, 6 bytes per parameter) and pre-divide (8) charged to the compute "
            "stream after its backward (FSDP2 runs them on the reduce-scatter stream beside the "
            "next unit's backward); the all-gather copy-in (1/DP of it) and the fp32 buffers' "
            "memory not modelled (sim/models/features/fsdp2.py)")

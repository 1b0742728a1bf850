"""Optimizer-step work: Adam (memory-bound) and distributed Shampoo (fp32 matrix roots).

Adam (Megatron mixed precision, fused multi-tensor kernel) per parameter it updates: reads the
fp32 gradient (``g`` bytes: 4, or 2 with fp16 gradients), reads and writes the fp32 master
weight, ``m`` and ``v`` (3 × 8 bytes) and writes the 16-bit weight (2): ``g + 26`` bytes; the
gradient-norm pass reads the gradient again (``g``); the gradient buffer is zeroed (``g`` per
local parameter). With the distributed optimizer a GPU updates ``1/dp`` of its parameters.
fp16 runs add the fp16 optimizer's gradient copy, unscale and parameter copy (``adam_ops``).

Shampoo (blocked, as in seed 000): for a block ``m×n`` with left ``m×m`` and right ``n×n``
factors, each step costs ``2m²n + 2mn²`` FLOPs to update the statistics (G·Gᵀ, Gᵀ·G),
``2m²n + 2mn²`` to precondition (L^-¼·G·R^-¼), and the inverse 4th roots, computed by a
coupled Newton iteration of ``k`` steps (default 10) with two ``n×n`` fp32 GEMMs (``2n³``
each) per step: ``4k·n³`` FLOPs per factor (``40·n³``). The owning data-parallel rank does
this work; the roots are then all-gathered in the DP group (``n²`` fp32 values per factor).
The step ends when the slowest owner is done.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.models.vocab.ops import Op, OpKind


def adam_ops(local_params: int, dp: int, distributed: bool, grad_bytes: int = 4,
             fp16: bool = False) -> tuple[Op, ...]:
    """Memory-bound Adam step of one GPU holding ``local_params`` parameters (see module doc).

    fp16 runs (``fp16``) take Megatron's ``Float16OptimizerWithFloat16Params``
    path (NVIDIA/Megatron-LM megatron/optimizer/optimizer.py ``step`` at commit
    6985e58938d40ad91ac07b0fddcfad8132e1447e), per updated parameter: copy the fp16 gradient
    to an fp32 main gradient (``.float()``: reads 2, writes 4), unscale it in place and check
    for inf/nan (``_amp_foreach_non_finite_check_and_unscale_``: reads 4, writes 4), the
    gradient norm over the fp32 main gradients (clip_grads.py asserts FloatTensor: reads 4),
    apex ``FusedAdam`` on the fp32 main parameters (reads the fp32 gradient, reads and writes
    p, m, v: 28) and the fp32 → fp16 parameter copy (``_multi_tensor_copy_this_to_that``:
    reads 4, writes 2); the fp16 gradient buffer is zeroed (2 per local parameter)."""
    updated = -(-local_params // dp) if distributed else local_params
    if fp16:
        return (
            Op("copy_model_grads_to_main_grads", OpKind.OPTIMIZER, 0, (2 + 4) * updated),
            Op("unscale_and_check_inf", OpKind.OPTIMIZER, 0, (4 + 4) * updated),
            Op("grad_norm", OpKind.OPTIMIZER, 0, 4 * updated),
            Op("adam_step", OpKind.OPTIMIZER, 0, (4 + 24) * updated,
               kernel="adamw_fused_fp32" if updated else "", shape=(updated,)),
            Op("copy_main_params_to_model_params", OpKind.OPTIMIZER, 0, (4 + 2) * updated),
            Op("zero_grad_buffer", OpKind.OPTIMIZER, 0, 2 * local_params),
        )
    return (
        Op("grad_norm", OpKind.OPTIMIZER, 0, grad_bytes * updated),
        Op("adam_step", OpKind.OPTIMIZER, 0, (grad_bytes + 26) * updated,
           kernel="adamw_fused_fp32" if updated else "", shape=(updated,)),
        Op("zero_grad_buffer", OpKind.OPTIMIZER, 0, grad_bytes * local_params),
    )


@dataclass(frozen=True)
class ShampooBlock:
    """One preconditioned block ``rows × cols`` of a weight, owned by DP rank ``owner``."""

    tensor: str
    owner: int
    rows: int
    cols: int


def root_flops(n: int, newton_steps: int = 10) -> int:
    """FLOPs of one inverse 4th root of an ``n×n`` factor: ``4·k·n³`` (k Newton steps)."""
    return 4 * newton_steps * n**3


def block_step_flops(b: ShampooBlock, newton_steps: int = 10) -> int:
    """Statistics update + preconditioning + both inverse roots of one block (FLOPs)."""
    m, n = b.rows, b.cols
    return 4 * m * m * n + 4 * m * n * n + root_flops(m, newton_steps) + root_flops(n, newton_steps)


@dataclass(frozen=True)
class ShampooPlan:
    """Shampoo preconditioner blocks of one transformer layer (per TP shard) and of the
    embedding, with their owning DP ranks (mapped modulo the DP size of the layout)."""

    layer_blocks: tuple[ShampooBlock, ...]
    embedding_blocks: tuple[ShampooBlock, ...] = ()
    newton_steps: int = 10

    def per_rank_flops(self, layers: int, with_embedding: bool, dp: int) -> list[int]:
        """Shampoo FLOPs per DP rank for a stage with ``layers`` transformer layers."""
        work = [0] * dp
        blocks = [(b, layers) for b in self.layer_blocks]
        if with_embedding:
            blocks += [(b, 1) for b in self.embedding_blocks]
        for b, times in blocks:
            work[b.owner % dp] += times * block_step_flops(b, self.newton_steps)
        return work

    def root_bytes(self, layers: int, with_embedding: bool) -> int:
        """fp32 bytes of all inverse-root factors of a stage (all-gathered after the step)."""
        total = layers * sum(b.rows**2 + b.cols**2 for b in self.layer_blocks)
        if with_embedding:
            total += sum(b.rows**2 + b.cols**2 for b in self.embedding_blocks)
        return 4 * total

    def stage_op(self, layers: int, with_embedding: bool, dp: int) -> Op:
        """The critical-path Shampoo work of a stage: the busiest owner's FLOPs (fp32)."""
        work = self.per_rank_flops(layers, with_embedding, dp)
        return Op("shampoo_step", OpKind.FP32_MATMUL, max(work), 0)


PARAM_BYTES = 2  # bf16/fp16 model weights (fp8 runs keep bf16 weights)


def grad_bytes(dtype: str, reduce_in_bf16: bool = False) -> int:
    """Bytes per element of the main-gradient buffer and the DP reduction: fp32 main grads for
    bf16/fp8 (Megatron-LM sets ``accumulate_allreduce_grads_in_fp32`` for bf16), fp16 for fp16,
    bf16 with ``--grad-reduce-in-bf16`` (``reduce_in_bf16``; Megatron-Core DDP
    ``grad_reduce_in_fp32 = False``: the buffer's dtype is the parameter's,
    megatron/core/distributed/param_and_grad_buffer.py ``group_params_for_buffers``)."""
    return 2 if dtype == "fp16" or reduce_in_bf16 else 4


def bucket_params(dp: int, ddp_bucket_size: int | None = None) -> int:
    """Megatron DDP bucket size in parameters: ``ddp_bucket_size`` where given (Megatron-LM's
    ``--ddp-bucket-size``, Megatron-Core ``DistributedDataParallelConfig.bucket_size``), else
    Megatron-Core's default ``max(40,000,000, 1,000,000 · dp)`` with ``dp`` the data-parallel
    size **without** context parallelism: ``parallel_state.get_data_parallel_world_size()``,
    whose ``with_context_parallel`` defaults to False (NVIDIA/Megatron-LM
    megatron/core/distributed/distributed_data_parallel.py lines 56-59 and
    megatron/core/parallel_state.py line 1727 at ee6737da824b18f945946b4c798adf2328374cb7,
    the commit of the NeMo 25.02 benchmark runs; ``dp_group.size()`` at d98e8a64dd, 2026)."""
    if ddp_bucket_size is not None:
        return ddp_bucket_size
    return max(40_000_000, 1_000_000 * dp)


def bucket_source(dp: int, ddp_bucket_size: int | None = None) -> str:
    """Where :func:`bucket_params` took its size from, for the assumption line."""
    if ddp_bucket_size is not None:
        return ": --ddp-bucket-size"
    return f": Megatron-Core's default max(40,000,000, 1,000,000·DP), DP {dp} without CP"

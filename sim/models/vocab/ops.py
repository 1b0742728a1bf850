"""Operators: the unit of FLOP accounting and of the compute-time model.

FLOPs are counted as in Narayanan et al. (SC'21) and Korthikanti et al. (MLSys'23): matrix
multiplies only, 2 FLOPs per multiply-add; element-wise work (norms, softmax, dropout, GeLU,
residual adds, the optimizer) has ``flops = 0`` and is timed from the HBM bytes it moves.
All counts are per GPU (one tensor-parallel shard) and per microbatch unless stated otherwise.
``recompute=True`` marks work re-done in the backward pass (counts towards hardware FLOPs, not
model FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

ACT_BYTES = 2  # activations are bf16/fp16 in every dtype setting (fp8 only in GEMM operands)
MASK_BYTES = 1  # dropout masks are stored as one byte per element
FPROP, WGRAD = "fprop", "wgrad"  # Op.role of a layer's forward / weight-gradient GEMM


class OpKind(str, Enum):
    GEMM = "gemm"  # dense matrix multiply (weights): tensor cores, training dtype
    BMM = "bmm"  # batched matmul of the unfused attention core (activations × activations)
    FLASH_FWD = "flash_fwd"  # fused attention forward (FlashAttention-2)
    FLASH_BWD = "flash_bwd"  # fused attention backward
    ELEMENTWISE = "elementwise"  # memory-bound kernel (norm, softmax, dropout, GeLU, add, loss)
    OPTIMIZER = "optimizer"  # memory-bound optimizer step (multi-tensor apply)
    FP32_MATMUL = "fp32_matmul"  # fp32 matrix work (Shampoo inverse roots)


@dataclass(frozen=True, slots=True)
class Op:
    """``count`` identical kernels with ``flops`` matrix-multiply FLOPs and ``bytes`` HBM traffic
    (read + written) in total (e.g. one GEMM per local expert).

    ``kernel`` and ``shape`` say which measured kernel a kernel table may time it by (one
    kernel's shape; see :mod:`sim.kernels.lookup`): ``"gemm"`` ``(m, k, n)``; ``"attn_fwd"`` /
    ``"attn_bwd"`` ``(b, hq, hkv, s, d, causal)`` (``"attn_bwd_part"``: FLOPs of the same
    backward kernel counted apart; ``"attn_fwd_ring"`` / ``"attn_bwd_ring"``
    ``(b, hq, hkv, s, d, 0, s_kv)``: a context-parallel ring step,
    :mod:`sim.models.features.context`);
    a memory-bound kind of the table (``"layernorm_fwd"``,
    ``"gelu_fwd"``, ``"dropout_add"``, ...) ``(tokens, h)``; ``"adamw_fused_fp32"``
    ``(params,)``. Empty: only the roofline times it. ``dtype``: the dtype a GEMM runs in when
    it is not the run's (``""``: the run's; an fp8 run's output layer runs in bf16).
    ``host_waits``: the host later blocks until this kernel (and every kernel before it) has
    finished, to copy its result to the CPU (:mod:`sim.engine.host`). ``role``: a weight GEMM's
    pass, which picks its kernel-table kind (:func:`sim.models.compute.gemm_table_kind`):
    ``"fprop"`` (forward; Transformer Engine's FP8 forward GEMMs use fast accumulation),
    ``"wgrad"`` (weight gradient, accumulated into the main-grad buffer), ``""`` otherwise."""

    name: str
    kind: OpKind
    flops: int
    bytes: int
    recompute: bool = False
    count: int = 1
    kernel: str = ""
    shape: tuple[int, ...] = ()
    dtype: str = ""  # a GEMM's dtype when not the run's (bf16 outside Transformer Engine's fp8)
    host_waits: bool = False
    role: str = ""  # "fprop" / "wgrad": a weight GEMM's pass (picks its table kind)


def gemm(name: str, m: int, k: int, n: int, operand_bytes: int = ACT_BYTES,
         out_bytes: int = ACT_BYTES, dtype: str = "", role: str = "") -> Op:
    """``C[m×n] = A[m×k] · B[k×n]``: ``2mkn`` FLOPs; reads A and B, writes C (``role``
    ``"fprop"``: a layer's forward GEMM)."""
    return Op(name, OpKind.GEMM, 2 * m * k * n,
              operand_bytes * (m * k + k * n) + out_bytes * m * n, kernel="gemm", shape=(m, k, n),
              dtype=dtype, role=role)


def wgrad(name: str, m: int, k: int, n: int, operand_bytes: int = ACT_BYTES,
          dtype: str = "") -> Op:
    """Weight gradient ``dW[k×n] = Xᵀ[k×m] · dY[m×n]`` accumulated into an fp32 main-grad buffer
    (Megatron's gradient-accumulation fusion): reads X, dY and dW (fp32), writes dW (fp32)."""
    return Op(name, OpKind.GEMM, 2 * m * k * n, operand_bytes * (m * k + m * n) + 8 * k * n,
              kernel="gemm", shape=(k, m, n), dtype=dtype, role=WGRAD)


def bmm(name: str, batch: int, m: int, k: int, n: int) -> Op:
    """Batched ``[m×k]·[k×n]`` over ``batch`` matrices (attention core, activations only)."""
    return Op(name, OpKind.BMM, 2 * batch * m * k * n,
              ACT_BYTES * batch * (m * k + k * n + m * n))


def elementwise(name: str, nbytes: int, kernel: str = "", shape: tuple[int, ...] = ()) -> Op:
    """A memory-bound kernel moving ``nbytes`` bytes (``kernel``/``shape``: see :class:`Op`)."""
    return Op(name, OpKind.ELEMENTWISE, 0, nbytes, kernel=kernel, shape=shape)


def as_recompute(ops: tuple[Op, ...] | list[Op]) -> tuple[Op, ...]:
    """Copies of ``ops`` marked as recomputation (re-done in backward)."""
    return tuple(replace(op, name="recompute_" + op.name, recompute=True) for op in ops)

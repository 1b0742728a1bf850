"""PyTorch eager mode (``--no-compile``): the element-wise kernels of torchtitan's Llama block
as PyTorch runs them without ``torch.compile``, one kernel per ATen operator.

simrun's default layer (:mod:`sim.models.layers`) has Megatron-Core / Transformer Engine's fused
element-wise kernels (one RMSNorm kernel per direction, fused bias-dropout-add, one SwiGLU
kernel, Transformer Engine's fused rotary embedding of :mod:`sim.models.features.rope`, which the
eager kernels below replace). torchtitan (pytorch/torchtitan at commit 0413363,
``torchtitan/models/llama/model.py`` and ``torchtitan/models/norms.py``) writes the block in
plain PyTorch; with ``training.compile = false`` (the default of its job config and of every
shipped preset at that commit) each operator below is one kernel. Bytes are HBM bytes read +
written per kernel (bf16 = 2, fp32 = 4, complex64 = 8 per element; ``e`` elements of the
tensor, ``r`` rows = tokens). The backward kernels are autograd's formulas of each operator
(PyTorch ``tools/autograd/derivatives.yaml`` and ``FunctionsManual.cpp``: ``pow_backward``,
``mean_backward``, ``rsqrt``'s ``-0.5·grad·result³``, ``mul`` with a broadcast operand reduced
by ``sum_to_size``), one kernel per ATen call.

RMSNorm (``norm_type = "rmsnorm"``: ``(x.float() · rsqrt(x.float().pow(2).mean(-1) + eps))
.type_as(x) · weight``), over ``e = tokens·h``, weight bf16 (FSDP2's ``param_dtype``):

- forward, 8 kernels: cast to fp32 (6e), pow (8e), mean (4e + 4r), + eps (8r), rsqrt (8r),
  x·rsqrt (8e + 4r), cast to bf16 (6e), ·weight (4e + 2h) = 36e + 24r + 2h;
- backward, 16 kernels: ·weight's input grad (4e + 2h) and weight grad (mul 6e, sum over rows
  2e + 2h); cast back to fp32 (6e); x·rsqrt's grads (8e + 4r; mul 12e, row sum 4e + 4r);
  rsqrt backward (pow 8r, two muls 8r + 12r); mean backward (expand / h: 4e + 4r); pow
  backward (x.pow(1) copy 8e, ·2 8e, ·grad 12e); the two fp32 gradients of x added (12e);
  cast to bf16 (6e) = 92e + 40r + 4h.

``norm_type = "fused_rmsnorm"`` (torchtitan's Triton kernel, one per direction) moves what the
fused layer's kernel moves: the layer keeps its fused norm.

Rotary embedding (``apply_rotary_emb``: ``view_as_complex(x.float())`` · ``freqs_cis``, back with
``type_as``) on q (``Q = tokens·heads·d``) and k (``K = tokens·kv_heads·d``), per tensor ``X``:
forward cast (6X), complex multiply (8X + 4·s·d for the complex64 ``freqs_cis`` [s, d/2]),
cast back (6X); backward the same three (grad · conj(freqs_cis)). 3 kernels, 20X + 4sd each way.

GQA (``repeat_kv``, heads > kv_heads, ``R = heads / kv_heads``): k and v expanded and copied to
all query heads, 2A·(K + R·K) each; backward sums the copies, the same bytes.

SwiGLU (``w2(silu(w1 x) · w3 x)``, ``F = tokens·ffn`` per GPU): silu (4F), mul (6F); backward
the mul's two grads (6F each) and ``silu_backward`` (6F).

torchtitan's ``wq``/``wk``/``wv`` and ``w1``/``w3`` are separate linears on the same input:
autograd adds their input gradients (3 and 2 contributions: 2 + 1 adds of ``tokens·h``, 6 bytes
per element each). Residual adds: ``x + attention(..)`` and ``h + feed_forward(..)``, 6 bytes per
element each, no dropout (torchtitan has none); in backward the residual stream's gradient
meets the norm branch's: one add each (6 bytes per element).

Not modelled: CPU launch latency (eager PyTorch issues ~100 kernels per layer; simrun charges
the element-wise overhead of the compute model per kernel), the allocator, and the fp32
activations eager autograd saves (the memory check counts the fused layer's activations).
"""

from __future__ import annotations

from sim.errors import UsageError
from sim.models.features.rope import FUSED_NAMES as FUSED_ROPE
from sim.models.vocab.dims import Dims
from sim.models.vocab.ops import ACT_BYTES as A
from sim.models.vocab.ops import Op, elementwise
from sim.models.vocab.rows import Row
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig

#: torchtitan's ``model.norm_type`` values simrun models (eager PyTorch)
NORM_TYPES = ("rmsnorm", "fused_rmsnorm")
F32 = 4  # fp32 bytes
C64 = 8  # complex64 bytes


def rmsnorm_fwd(name: str, r: int, h: int) -> tuple[Op, ...]:
    """torchtitan's eager RMSNorm forward over ``r`` rows of ``h`` (8 kernels, docstring)."""
    e = r * h
    return (
        elementwise(f"{name}_to_fp32", (A + F32) * e),
        elementwise(f"{name}_pow", 2 * F32 * e),
        elementwise(f"{name}_mean", F32 * e + F32 * r),
        elementwise(f"{name}_add_eps", 2 * F32 * r),
        elementwise(f"{name}_rsqrt", 2 * F32 * r),
        elementwise(f"{name}_mul_rsqrt", 2 * F32 * e + F32 * r),
        elementwise(f"{name}_to_bf16", (F32 + A) * e),
        elementwise(f"{name}_mul_weight", 2 * A * e + A * h),
    )


def rmsnorm_bwd(name: str, r: int, h: int) -> tuple[Op, ...]:
    """Autograd's kernels of the eager RMSNorm backward (16 kernels, docstring)."""
    e = r * h
    n = f"{name}_grad"
    return (
        elementwise(f"{n}_mul_weight", 2 * A * e + A * h),
        elementwise(f"{n}_weight_mul", 3 * A * e),
        elementwise(f"{n}_weight_sum", A * e + A * h),
        elementwise(f"{n}_to_fp32", (A + F32) * e),
        elementwise(f"{n}_mul_rsqrt", 2 * F32 * e + F32 * r),
        elementwise(f"{n}_rsqrt_mul_x", 3 * F32 * e),
        elementwise(f"{n}_rsqrt_sum", F32 * e + F32 * r),
        elementwise(f"{n}_rsqrt_pow3", 2 * F32 * r),
        elementwise(f"{n}_rsqrt_scale", 2 * F32 * r),
        elementwise(f"{n}_rsqrt_mul", 3 * F32 * r),
        elementwise(f"{n}_mean", F32 * e + F32 * r),
        elementwise(f"{n}_pow_copy", 2 * F32 * e),
        elementwise(f"{n}_pow_scale", 2 * F32 * e),
        elementwise(f"{n}_pow_mul", 3 * F32 * e),
        elementwise(f"{n}_accumulate", 3 * F32 * e),
        elementwise(f"{n}_to_bf16", (F32 + A) * e),
    )


def rope_ops(name: str, elems: int, s: int, d: int) -> tuple[Op, ...]:
    """One direction of the eager rotary embedding of a tensor of ``elems`` elements:
    cast to fp32, complex multiply by ``freqs_cis`` (complex64 [s, d/2]), cast back."""
    return (
        elementwise(f"{name}_to_fp32", (A + F32) * elems),
        elementwise(f"{name}_complex_mul", 2 * F32 * elems + C64 * s * (d // 2)),
        elementwise(f"{name}_to_bf16", (F32 + A) * elems),
    )


def add(name: str, elems: int) -> Op:
    """A bf16 add of two ``elems``-element tensors (reads 2, writes 1)."""
    return elementwise(name, 3 * A * elems)


def _swiglu(fwd: bool, e: int) -> tuple[Op, ...]:
    if fwd:
        return (elementwise("mlp_silu", 2 * A * e), elementwise("mlp_silu_mul", 3 * A * e))
    return (elementwise("mlp_mul_grad_silu", 3 * A * e),
            elementwise("mlp_mul_grad_up", 3 * A * e),
            elementwise("mlp_silu_grad", 3 * A * e))


def _attention_fwd(dm: Dims) -> tuple[Op, ...]:
    """Rotary embedding of q and k, then ``repeat_kv`` of k and v (GQA)."""
    q, k = dm.n * dm.q_width // dm.t, dm.n * dm.kvh // dm.t
    ops = rope_ops("rope_q", q, dm.s, dm.d) + rope_ops("rope_k", k, dm.s, dm.d)
    if k < q:
        ops += tuple(elementwise(f"repeat_kv_{x}", A * (k + q)) for x in ("k", "v"))
    return ops


def _attention_bwd(dm: Dims) -> tuple[Op, ...]:
    q, k = dm.n * dm.q_width // dm.t, dm.n * dm.kvh // dm.t
    ops: tuple[Op, ...] = ()
    if k < q:
        ops += tuple(elementwise(f"repeat_kv_{x}_grad", A * (k + q)) for x in ("k", "v"))
    return ops + rope_ops("rope_q_grad", q, dm.s, dm.d) + rope_ops("rope_k_grad", k, dm.s,
                                                                    dm.d)


def _replace(ops: tuple[Op, ...], dm: Dims, norm_type: str) -> tuple[Op, ...]:
    """``ops`` of one phase with each fused element-wise kernel replaced by its eager kernels
    and the eager-only kernels inserted next to the GEMMs they follow (rotary embedding after
    the QKV GEMM, before its input-gradient GEMM)."""
    out: list[Op] = []
    res = dm.nt * dm.h  # residual stream elements on this GPU
    for op in ops:
        if op.name in FUSED_ROPE:  # replaced by the eager RoPE next to the QKV GEMM
            continue
        if op.kernel in ("rmsnorm_fwd", "rmsnorm_bwd") and norm_type == "rmsnorm":
            fn = rmsnorm_fwd if op.kernel == "rmsnorm_fwd" else rmsnorm_bwd
            out += fn(op.name.removesuffix("_grad"), dm.nt, dm.h)
        elif op.kernel == "dropout_add":
            out.append(add(op.name.removeprefix("recompute_") + "_residual_add", res))
        elif op.name.endswith("_bda_grad"):
            out.append(add(op.name + "_residual_accumulate", res))
        elif op.kernel in ("swiglu_fwd", "swiglu_bwd"):
            out += _swiglu(op.kernel == "swiglu_fwd", dm.n * dm.f // dm.t)
        elif op.name == "qkv_dgrad":
            out += _attention_bwd(dm)
            out += (op, add("qkv_dgrad_add_k", dm.n * dm.h), add("qkv_dgrad_add_v", dm.n * dm.h))
        elif op.name == "fc1_dgrad":
            out += (op, add("fc1_dgrad_add_up", dm.n * dm.h))
        else:
            out.append(op)
            if op.name == "qkv":
                out += _attention_fwd(dm)
    return tuple(out)


def apply(rows: list[Row], par: ParallelConfig, dm: Dims) -> list[Row]:
    """``rows`` (one layer's, or the output rows) as PyTorch eager runs them, changed in place
    and returned; unchanged under ``--compile`` (the default)."""
    if par.compile:
        return rows
    for r in rows:
        r.fwd = _replace(r.fwd, dm, par.norm_type)
        r.ig = _replace(r.ig, dm, par.norm_type)
    return rows


def check(model: ModelSpec, par: ParallelConfig) -> None:
    """``--no-compile`` where simrun has the eager operator list: torchtitan's Llama block
    (RMSNorm, rotary embedding, SwiGLU), dense, bf16, a fused attention kernel (SDPA)."""
    if par.compile:
        if par.norm_type != "rmsnorm":
            raise UsageError("torchtitan's norm_type applies in eager mode (--no-compile); "
                             "compiled, the norm is one fused kernel either way",
                             field="norm_type")
        return
    if par.norm_type not in NORM_TYPES:
        raise UsageError(f"must be one of {', '.join(NORM_TYPES)}", field="norm_type")
    style = (model.norm == "rmsnorm", model.gated_mlp, model.position_embedding == "rope")
    if not all(style) or model.moe is not None:
        raise UsageError(f"the eager operator list is torchtitan's dense Llama block (RMSNorm, "
                         f"SwiGLU, rotary embedding); model {model.name} has "
                         f"{model.norm}, {'SwiGLU' if model.gated_mlp else 'GeLU'}, "
                         f"{model.position_embedding} positions"
                         + (", MoE layers" if model.moe is not None else ""),
                         field="no_compile")
    if par.dtype == "fp8":
        raise UsageError("eager fp8 (torchao's Float8Linear) is not modelled; Transformer "
                         "Engine's fp8 runs compiled (fused) kernels", field="no_compile")
    if par.backend == "unfused":
        raise UsageError("torchtitan calls scaled_dot_product_attention (a fused kernel: "
                         "--attention-backend flash or fused)", field="no_compile")
    if par.tp_comm_overlap:
        raise UsageError("Transformer Engine's userbuffers overlap runs in Megatron-Core, "
                         "not in eager PyTorch", field="tp_comm_overlap")


def describe(par: ParallelConfig) -> str:
    """The assumption line of the execution mode."""
    if par.compile:
        return ("element-wise kernels fused as Megatron-Core / Transformer Engine (and "
                "torch.compile) run them: one norm kernel per direction, fused "
                "bias-dropout-add, one SwiGLU/GeLU kernel, Transformer Engine's fused "
                "rotary embedding (RoPE line) (--no-compile: PyTorch eager, torchtitan's "
                "Llama block)")
    norm = ("RMSNorm as 8 forward / 16 backward kernels (fp32 casts, pow, mean, rsqrt, muls)"
            if par.norm_type == "rmsnorm" else
            "RMSNorm as torchtitan's fused Triton kernel (--norm-type fused_rmsnorm)")
    return ("--no-compile: PyTorch eager (torchtitan training.compile = false), one kernel "
            f"per operator: {norm}; rotary embedding as fp32 cast, complex multiply, cast back "
            "(q and k, each way); GQA repeat_kv copies; SwiGLU as silu and mul (3 backward "
            "kernels); separate residual adds and their gradient adds; the input-gradient "
            "adds of torchtitan's separate wq/wk/wv and w1/w3 linears; timed by the "
            "element-wise roofline (docs/models.md); activation memory as the fused layer")

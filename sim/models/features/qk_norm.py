"""QK normalisation (Megatron-Core's ``qk_layernorm``): a norm over each attention head of the
query and of the key, as Qwen3 and OLMo 2 use it (model spec ``qk_layernorm: true``).

Megatron-Core (NVIDIA/Megatron-LM ``megatron/core/transformer/attention.py`` at commit
d98e8a64): with ``config.qk_layernorm`` the attention builds ``q_layernorm`` and ``k_layernorm``
as ``TENorm(hidden_size=hidden_size_per_attention_head)`` — Transformer Engine's LayerNorm or
RMSNorm, the kind of ``config.normalization`` (the spec's ``norm``) — and
``get_query_key_value_tensors`` applies them to the split query ``[s, b, np, hn]`` and key
``[s, b, ng, hn]`` right after the QKV GEMM, before the rotary embedding. Per GPU a layer
normalises ``Q = n·heads·d/t`` query and ``K = n·kv_heads·d/t`` key elements (``n`` tokens of
this CP rank, ``d`` = kv_channels).

Kernels, as for the residual-stream norms (:func:`sim.models.layers.norm_block`): one forward
kernel per tensor reading x and writing y (``2A`` per element), one backward kernel reading x
and dy and writing dx (``3A``; the weight gradient is that kernel's reduction over tokens),
timed as the measured ``rmsnorm_fwd`` / ``rmsnorm_bwd`` (or ``layernorm_*``) kinds at their
element count. Transformer Engine's norm (``transformer_engine/pytorch/ops/basic/rmsnorm.py``,
``layer_norm.py``, identical at v2.8, v2.10 and d0067d0d) first runs ``input_.contiguous()``:
the key is a strided view of the QKV output (its group stride is ``(np/ng + 2)·hn``), so it is
copied (reads and writes ``K``, ``2A·K``); so is the query when every head has its own group
(``heads == kv_heads``: the reshape is a view), while a GQA query is already the reshape's copy
(:func:`sim.models.features.rope.split_forward_ops`). The gradient arriving in backward is the
rotary backward's new tensor: no copy. Kept for backward (:func:`saved_bytes`): the norm's
contiguous input (2 bytes per element) and its fp32 inverse RMS per row (``ctx.save_for_backward(x,
rstdevs)``). Their weights: :func:`sim.models.flops.qk_norm_params`.
"""

from __future__ import annotations

from sim.errors import UsageError
from sim.models.vocab.dims import Dims
from sim.models.vocab.ops import ACT_BYTES as A
from sim.models.vocab.ops import Op, elementwise
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig


def _tensors(dm: Dims) -> tuple[tuple[str, int, int], ...]:
    """``(name, rows, elements)`` of the normalised q and k on one GPU (rows = token·head)."""
    q, k = dm.n * dm.q_width // dm.t, dm.n * dm.kvh // dm.t
    return (("q", q // dm.d, q), ("k", k // dm.d, k))


def forward_ops(model: ModelSpec, dm: Dims) -> tuple[Op, ...]:
    """The q and k norm kernels after the QKV GEMM, each after the copy that makes its input
    contiguous where it is a strided view (none without ``qk_layernorm``)."""
    if not model.qk_layernorm:
        return ()
    ops: tuple[Op, ...] = ()
    for name, r, x in _tensors(dm):
        if name == "k" or dm.q_width == dm.kvh:  # a view of the QKV output, not yet copied
            ops += (elementwise(f"attn_{name}_norm_contiguous", 2 * A * x),)
        ops += (elementwise(f"attn_{name}_norm", 2 * A * x, f"{model.norm}_fwd", (r, dm.d)),)
    return ops


def backward_ops(model: ModelSpec, dm: Dims) -> tuple[Op, ...]:
    """Their gradient kernels, key first (reverse order), before the QKV input gradient."""
    if not model.qk_layernorm:
        return ()
    return tuple(elementwise(f"attn_{name}_norm_grad", 3 * A * x, f"{model.norm}_bwd", (r, dm.d))
                 for name, r, x in reversed(_tensors(dm)))


def saved_bytes(model: ModelSpec, par: ParallelConfig) -> int:
    """Activation bytes the two norms keep for backward per GPU and microbatch: their inputs
    (2 bytes per element) and an fp32 inverse RMS per head and token,
    ``(s/cp)·b·((heads + kv_heads)·(2d + 4))/t``."""
    if not model.qk_layernorm:
        return 0
    sb = model.seq_len // par.cp * par.micro_batch
    heads = model.heads + model.kv_heads
    return sb * heads * (A * model.head_dim + 4) // par.tp


def check(model: ModelSpec, par: ParallelConfig) -> None:
    """PyTorch eager (``--no-compile``) counts torchtitan's Llama block, which has no QK norm."""
    if model.qk_layernorm and not par.compile:
        raise UsageError(f"model {model.name} sets qk_layernorm; the eager operator list is "
                         "torchtitan's Llama block, which has no QK norm", field="no_compile")


def describe(model: ModelSpec) -> str:
    """The assumption line of a model with ``qk_layernorm``."""
    norm = "an RMSNorm" if model.norm == "rmsnorm" else "a LayerNorm"
    return (f"qk_layernorm (model spec; Megatron-Core TransformerConfig.qk_layernorm): {norm} "
            "over each head of q and of k after the QKV GEMM, one kernel per "
            "tensor each way after Transformer Engine's contiguous copy of the key (and of an "
            "MHA query); inputs and fp32 inverse RMS kept for backward")

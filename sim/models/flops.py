"""Closed-form parameter and FLOP counts, and achieved-throughput metrics.

Notation: ``B`` global batch (sequences), ``L`` layers, ``s`` sequence length, ``h`` hidden,
``V`` vocabulary. Matrix-multiply FLOPs only (2 per multiply-add); attention over the full
s×s score matrix (as in the papers; causal kernels may skip half of it, which affects time,
not the accounting).

- Narayanan et al. (SC'21): parameters ``P = 12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h))``
  (tied embeddings, learned positions; excludes the final LayerNorm's 2h), and with full
  recomputation ``F = 96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))``.
- Korthikanti et al. (MLSys'23): model FLOPs ``72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L))``; their
  hardware FLOPs with selective recompute are stated as ``72·B·L·s·h²·(1 + s/(3h) + ...)``.
  Re-running the attention core forward costs ``4·B·s²·h`` per layer, i.e. ``1 + 2s/(9h)``;
  the paper's ``s/(3h)`` counts ``8·B·L·s²·h`` more. We count what is executed
  (:func:`hardware_flops_per_iteration`) and keep the paper's formula for reference
  (:func:`korthikanti_selective_hardware_flops`).
"""

from __future__ import annotations

from sim.models.vocab.spec import ModelSpec


def _mlp_params(model: ModelSpec, f: int) -> int:
    f1 = 2 * f if model.gated_mlp else f
    return model.hidden * f1 + f * model.hidden + (f1 + model.hidden if model.bias else 0)


def _mlp_flops(model: ModelSpec, f: int) -> int:
    f1 = 2 * f if model.gated_mlp else f
    return 2 * model.hidden * f1 + 2 * f * model.hidden


def layer_params(model: ModelSpec, moe: bool = True) -> int:
    """Parameters of one transformer layer: all routed and shared experts and the router for an
    MoE layer (``moe=False``: a dense layer of an MoE model)."""
    h, q, kv = model.hidden, model.q_hidden, model.kv_hidden
    attn = h * (q + 2 * kv) + q * h + ((q + 2 * kv) + h if model.bias else 0)
    norms = 2 * (2 if model.norm == "layernorm" else 1) * h + qk_norm_params(model)
    if model.moe is not None and moe:
        me = model.moe
        experts = me.experts * _mlp_params(model, me.expert_ffn_hidden)
        shared = _mlp_params(model, me.shared_ffn_hidden) if me.shared_ffn_hidden else 0
        return attn + experts + shared + h * me.experts + norms
    return attn + _mlp_params(model, model.ffn_hidden) + norms


def qk_norm_params(model: ModelSpec) -> int:
    """Weights of one layer's q and k norms (``qk_layernorm``, :mod:`sim.models.features.qk_norm`):
    one ``head_dim`` vector each (LayerNorm: weight and bias), replicated across TP."""
    if not model.qk_layernorm:
        return 0
    return 2 * (2 if model.norm == "layernorm" else 1) * model.head_dim


def _dense_layers(model: ModelSpec) -> int:
    return model.moe.dense_layers if model.moe is not None else model.layers


def total_params(model: ModelSpec, vocab: int | None = None) -> int:
    """All parameters: layers, word (and learned position) embeddings, final norm, and the output
    layer when untied. ``vocab`` defaults to the unpadded ``model.vocab``."""
    v = model.vocab if vocab is None else vocab
    h = model.hidden
    emb = v * h + (model.seq_len * h if model.position_embedding == "learned" else 0)
    out = 0 if model.tied_embeddings else v * h
    final_norm = (2 if model.norm == "layernorm" else 1) * h
    dense = _dense_layers(model)
    layers = dense * layer_params(model, False) + (model.layers - dense) * layer_params(model)
    return layers + emb + out + final_norm


def narayanan_params(model: ModelSpec) -> int:
    """``12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h)) = 12Lh² + 13Lh + (V + s)h`` (exact integer)."""
    L, h = model.layers, model.hidden
    return 12 * L * h * h + 13 * L * h + (model.vocab + model.seq_len) * h


def _layer_forward_flops_per_token(model: ModelSpec) -> tuple[int, int]:
    """(linear-layer FLOPs summed over the layers, attention-core FLOPs of one layer) of the
    forward, per token. MoE layers: ``top_k`` routed plus the shared experts, and the router."""
    h, q, kv, s = model.hidden, model.q_hidden, model.kv_hidden, model.seq_len
    linear = 2 * h * (q + 2 * kv) + 2 * q * h
    dense = _dense_layers(model)
    total = dense * (linear + _mlp_flops(model, model.ffn_hidden))
    if model.moe is not None:
        me = model.moe
        moe = me.top_k * _mlp_flops(model, me.expert_ffn_hidden) + (
            _mlp_flops(model, me.shared_ffn_hidden) if me.shared_ffn_hidden else 0)
        total += (model.layers - dense) * (linear + moe + 2 * h * me.experts)
    return total, 4 * s * q


def model_flops_per_iteration(model: ModelSpec, global_batch: int,
                              vocab: int | None = None) -> int:
    """Model FLOPs of one iteration (forward + backward, no recomputation), all GPUs.

    ``3 · B·s · [L·(linear + 4·s·q) + 2·h·V]`` with per-token forward linear FLOPs
    ``2h(q + 2·kv) + 2qh + MLP`` (``q`` = heads·kv_channels, ``h`` by default; MLP ``4hf``,
    gated ``6hf``, MoE ``top_k×`` plus the router).
    Equals ``72·B·L·s·h²·(1 + s/(6h) + V/(12hL))`` for GPT-style models.
    """
    v = model.vocab if vocab is None else vocab
    linear, attn = _layer_forward_flops_per_token(model)
    per_token = linear + model.layers * attn + 2 * model.hidden * v
    return 3 * global_batch * model.seq_len * per_token


def hardware_flops_per_iteration(model: ModelSpec, global_batch: int, recompute: str,
                                 flash_attention: bool = False, vocab: int | None = None) -> int:
    """FLOPs executed in one iteration: model FLOPs plus recomputation.

    ``full``: every layer's forward again (``B·s·L·(linear + 4sh)``); ``selective`` (unfused
    attention): the attention core forward again (``4·B·L·s²·h``); flash attention recomputes
    ``QKᵀ`` in its backward (``2·B·L·s²·h``) and makes selective recompute a no-op.
    """
    tokens = global_batch * model.seq_len
    linear, attn = _layer_forward_flops_per_token(model)
    extra = 0
    if recompute == "full":
        extra += tokens * (linear + model.layers * attn)
    elif recompute == "selective" and not flash_attention:
        extra += tokens * model.layers * attn
    if flash_attention:
        extra += tokens * model.layers * attn // 2
    return model_flops_per_iteration(model, global_batch, vocab) + extra


def korthikanti_model_flops(B: int, L: int, s: int, h: int, V: int) -> int:
    """``72·B·L·s·h²·(1 + s/(6h) + V/(12hL)) = 72BLsh² + 12BLs²h + 6BshV``."""
    return 72 * B * L * s * h * h + 12 * B * L * s * s * h + 6 * B * s * h * V


def korthikanti_selective_hardware_flops(B: int, L: int, s: int, h: int, V: int) -> int:
    """The paper's ``72·B·L·s·h²·(1 + s/(3h) + V/(12hL))`` (used for its HFU column)."""
    return 72 * B * L * s * h * h + 24 * B * L * s * s * h + 6 * B * s * h * V


def narayanan_full_recompute_flops(B: int, L: int, s: int, h: int, V: int) -> int:
    """``96·B·s·L·h²·(1 + s/(6h) + V/(16Lh)) = 96BsLh² + 16BLs²h + 6BshV``."""
    return 96 * B * s * L * h * h + 16 * B * L * s * s * h + 6 * B * s * h * V


def achieved_throughput(model_flops: int, iteration_time_s: float, n_gpus: int,
                        peak_tflops: float) -> tuple[float, float]:
    """``(tflops_per_gpu, mfu)``: model FLOPs per second per GPU in TFLOP/s (1e12 FLOP/s) and
    its fraction of the GPU's dense peak ``peak_tflops`` for the training dtype."""
    if iteration_time_s <= 0 or n_gpus <= 0:
        raise ValueError("iteration time and GPU count must be positive")
    tflops = model_flops / iteration_time_s / n_gpus / 1e12
    return tflops, tflops / peak_tflops

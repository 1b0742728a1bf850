"""Megatron-LM's per-GPU operators and communications for one microbatch, as rows.

``transformer_layer_rows``, ``embedding_rows`` and ``output_rows`` follow Megatron GPT
(``ParallelTransformerLayer`` / Megatron-Core ``TransformerLayer``) with tensor parallelism
``t``: column-parallel QKV and fc1, row-parallel projection and fc2; the ``f``/``g`` operators
(all-reduce in backward / forward) or, with sequence parallelism, all-gather / reduce-scatter;
the rotary embedding of q and k between the QKV GEMM and the attention core
(:mod:`sim.models.features.rope`).
Byte counts of element-wise kernels are documented next to each operator (``A`` = activation
bytes, 2; masks 1 byte per element). Sizes are per GPU and per microbatch.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from sim.comm import CollKind
from sim.models.features import (
    cross_entropy,
    eager,
    fp8,
    fp8_current,
    nvfp4,
    qk_norm,
    quant_gather,
    rope,
    tp_async,
    tp_overlap,
)
from sim.models.features.context import attach_ring_exchanges, ring_attention_blocks
from sim.models.features.defer_wgrad import DEFER_REGATHER_TAG, DEFER_WGRAD_TAG
from sim.models.features.moe import (
    dispatch_nodes,
    dispatch_ranks,
    dispatcher_syncs_host,
    moe_load_factor,
    moe_mlp_items,
    sorts_by_local_expert,
)
from sim.models.flops import qk_norm_params
from sim.models.vocab.dims import (
    Dims,
    linear_params,
    sp_regather,
    tp_collective,
    tp_enter,
    tp_exit,
)
from sim.models.vocab.ops import ACT_BYTES as A
from sim.models.vocab.ops import FPROP, Op, OpKind, as_recompute, bmm, elementwise, gemm, wgrad
from sim.models.vocab.ops import MASK_BYTES as K
from sim.models.vocab.rows import Block, Conj, Row, recompute_rows, renamed, rows_from_items
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig


def dropout_note(model: ModelSpec, par: ParallelConfig) -> str:
    """The assumption line of dropout: the model spec's probabilities and their kernels."""
    hp, ap = model.hidden_dropout, model.attention_dropout
    if not par.compile:
        hidden = "none in torchtitan's block (--no-compile line)"
    elif hp > 0:
        hidden = ("the fused bias-dropout-add kernels write and read a 1-byte mask, and so does "
                  "the embedding dropout")
    else:
        hidden = ("PyTorch's dropout returns its input: each bias-dropout-add is a residual add "
                  "forward (the measured add kernel) and no kernel backward; no embedding "
                  "dropout")
    if not par.fused_attention:
        attn = ("the unfused core's dropout kernel over the b·(a/t)·s² probabilities, each way"
                if ap > 0 else "no dropout kernel in the unfused core")
    elif ap > 0:
        attn = ("inside the fused attention kernel, taken as free: no published H100 or A100 "
                "measurement of those kernels with and without dropout was found")
    else:
        attn = "none in the fused attention kernel"
    return (f"dropout (model spec; Megatron-Core's default 0.1): hidden_dropout {hp:g}: "
            f"{hidden}; attention_dropout {ap:g}: {attn}; activation memory counts the "
            "dropout masks either way")


#: suffix of the autograd sum of a residual stream's two gradients (:func:`norm_block`)
RESIDUAL_GRAD_ADD = "_residual_grad_add"


def _norm_params(model: ModelSpec) -> int:
    return (2 if model.norm == "layernorm" else 1) * model.hidden


def norm_block(name: str, model: ModelSpec, dm: Dims, pre: tuple[Op, ...] = (),
               residual: bool = False) -> Block:
    """LayerNorm/RMSNorm over the residual stream: forward reads x, writes y (2A per element);
    backward reads x and dy, writes dx (3A): Transformer Engine's ``rmsnorm_bwd`` /
    ``layernorm_bwd`` take ``(dz, x, rsigma / mu, gamma)`` and nothing else
    (transformer_engine/pytorch/module/layernorm_linear.py, ``_LayerNormLinear.backward``, at
    v1.9 e79d915a and v2.1 450146ae; apex's fused LayerNorm likewise).

    ``residual``: the norm's input is also the residual of the following bias-dropout-add
    (every norm of a transformer layer, not the final norm). Its two gradients — the norm's
    ``dx`` and the one the add passes through — are summed by PyTorch's autograd engine when
    they meet (``InputBuffer::add``: one ``add`` kernel, reads 2A, writes A per element),
    because Megatron-Core calls its TE modules eagerly (Megatron-Core ``TransformerLayer``:
    ``residual = hidden_states`` feeds both ``linear_qkv``/``linear_fc1`` and the
    bias-dropout-add); timed as the measured ``add`` kind. ``torch.compile``d and eager
    torchtitan blocks differ: :mod:`sim.models.features.eager` counts its own adds."""
    e = dm.nt * dm.h
    norm, shape = model.norm, (dm.nt, dm.h)
    ig = (elementwise(name + "_grad", 3 * A * e, f"{norm}_bwd", shape),)
    if residual:
        ig += (elementwise(name + RESIDUAL_GRAD_ADD, 3 * A * e, "add", shape),)
    return Block(name, fwd=pre + (elementwise(name, 2 * A * e, f"{norm}_fwd", shape),),
                 ig=ig, params=_norm_params(model))


def bda_ops(name: str, dm: Dims,
            dropout: bool = True) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """Fused bias-dropout-add (Megatron-Core ``bias_dropout_add_fused_train``): forward reads x
    and residual, writes y and the mask (3A + 1); backward reads dy and the mask, writes dx
    (2A + 1). Without ``dropout`` (``hidden_dropout`` 0: PyTorch's ``dropout`` returns its
    input, ``_dropout_impl`` in aten/src/ATen/native/Dropout.cpp, and no mask exists) it is a
    residual add: forward reads x and the residual, writes y (3A, the measured ``add`` kind);
    its backward hands the gradient to both inputs unchanged, no kernel (the residual's two
    gradients are summed by autograd: :func:`norm_block`). A bias's gradient (a row sum) is
    not counted, with or without dropout."""
    e = dm.nt * dm.h
    if not dropout:
        return (elementwise(name, 3 * A * e, "add", (dm.nt, dm.h)),), ()
    return ((elementwise(name, (3 * A + K) * e, "dropout_add", (dm.nt, dm.h)),),
            (elementwise(name + "_grad", (2 * A + K) * e),))


def attention_core(par: ParallelConfig, dm: Dims, dropout: bool = True) -> tuple[tuple, tuple]:
    """Core attention forward and backward operators (per GPU: ``a/t`` heads).

    Unfused (Megatron 2022): QKᵀ and PV batched matmuls (2·b·s²·h/t FLOPs each), fused
    scale-mask-softmax (reads and writes the b·(a/t)·s² scores: 2A per element) and dropout
    (reads x, writes y and the mask: 2A + 1). Backward: four batched matmuls (2× forward
    FLOPs), dropout backward (2A + 1), softmax backward (reads y and dy, writes dx: 3A).
    Without ``dropout`` (``attention_dropout`` 0) the unfused core has no dropout kernels
    (PyTorch's ``dropout`` returns its input). Flash attention: one forward kernel
    (4·b·s²·h/t FLOPs) and one backward kernel (8·b·s²·h/t model FLOPs plus the 2·b·s²·h/t
    recomputation of QKᵀ).
    """
    hb = dm.b * (dm.a // dm.t)  # batched heads on this GPU
    s, d = dm.s, dm.d
    if par.fused_attention:
        qkvo = A * dm.n * (2 * dm.q_width + 2 * dm.kvh) // dm.t
        shape = (dm.b, dm.a // dm.t, max(1, dm.kvh // d // dm.t), s, d, 1)
        fwd = (Op("flash_attn", OpKind.FLASH_FWD, 4 * hb * s * s * d, qkvo, kernel="attn_fwd",
                  shape=shape),)
        bwd = (
            Op("flash_attn_grad", OpKind.FLASH_BWD, 8 * hb * s * s * d, 2 * qkvo,
               kernel="attn_bwd", shape=shape),
            Op("flash_attn_grad_recompute_qk", OpKind.FLASH_BWD, 2 * hb * s * s * d, 0,
               recompute=True, kernel="attn_bwd_part", shape=shape),
        )
        return fwd, bwd
    x = hb * s * s
    drop = (elementwise("attn_dropout", (2 * A + K) * x),) if dropout else ()
    drop_grad = (elementwise("attn_dropout_grad", (2 * A + K) * x),) if dropout else ()
    fwd = (
        bmm("attn_scores", hb, s, d, s),
        elementwise("attn_softmax", 2 * A * x),
        *drop,
        bmm("attn_values", hb, s, s, d),
    )
    bwd = (
        bmm("attn_values_grad_probs", hb, s, d, s),
        bmm("attn_values_grad_v", hb, s, s, d),
        *drop_grad,
        elementwise("attn_softmax_grad", 3 * A * x),
        bmm("attn_scores_grad_q", hb, s, s, d),
        bmm("attn_scores_grad_k", hb, s, s, d),
    )
    if par.recompute == "selective":
        bwd = as_recompute(fwd) + bwd
    return fwd, bwd


def transformer_layer_rows(model: ModelSpec, par: ParallelConfig, dm: Dims,
                           index: int) -> list[Row]:
    """Rows of transformer layer ``index`` (global layer number) for one microbatch."""
    moe_layer = model.moe is not None and index >= model.moe.dense_layers
    return [renamed(r, f"layer{index}_{r.name}", {**r.tags, "layer": index})
            for r in _layer_rows(model, par, dm, moe_layer)]


@lru_cache(maxsize=64)
def _layer_rows(model: ModelSpec, par: ParallelConfig, dm: Dims, moe_layer: bool
                ) -> tuple[Row, ...]:
    """The rows of every dense (``moe_layer`` false) or every MoE layer, before
    :func:`transformer_layer_rows` names them after their layer: they depend on nothing else
    (cached: a model's layers repeat; the rows are copied, never shared)."""
    n, h, t, eg = dm.n, dm.h, dm.t, dm.eg
    gin, gout = quant_gather.gathered_bytes(par)  # the TE linears' SP all-gathers, B/element
    qh = dm.q_width  # heads·kv_channels: h unless the spec sets kv_channels
    qkv_out = qh + 2 * dm.kvh
    core_f, core_b = (attention_core(par, dm, model.attention_dropout > 0) if dm.cp == 1
                      else ((), ()))
    # eager (--no-compile) replaces these kernels by torchtitan's adds, with or without dropout
    hidden = model.hidden_dropout > 0 or not par.compile
    bda1_f, bda1_b = bda_ops("attn_bda", dm, hidden)
    bda2_f, bda2_b = bda_ops("mlp_bda", dm, hidden)
    # eager torchtitan blocks count their residual adds in sim.models.features.eager
    res = par.compile
    items: list[Block | Conj] = [
        norm_block("attn_norm", model, dm, residual=res),
        tp_enter(dm, ag_bytes=gin),
        Block("attn_qkv",
              fwd=(gemm("qkv", n, h, qkv_out // t, eg, role=FPROP),)
              + qk_norm.forward_ops(model, dm) + rope.forward_ops(model, par, dm)
              + rope.split_forward_ops(model, par, dm) + core_f,
              ig=core_b + rope.backward_ops(model, par, dm) + qk_norm.backward_ops(model, dm)
              + rope.split_backward_ops(model, par, dm)
              + (gemm("qkv_dgrad", n, qkv_out // t, h, eg),),
              wg=(wgrad("qkv_wgrad", n, h, qkv_out // t, eg),),
              params=linear_params(model, h, qkv_out, t, True) + qk_norm_params(model)),
        *(ring_attention_blocks(dm) if dm.cp > 1 else ()),
        sp_regather(dm, ag_bytes=gin),
        Block("attn_proj",
              fwd=(gemm("proj", n, qh // t, h, eg, role=FPROP),),
              ig=(gemm("proj_dgrad", n, h, qh // t, eg),),
              wg=(wgrad("proj_wgrad", n, qh // t, h, eg),),
              params=linear_params(model, qh, h, t, False)),
        tp_exit(dm, ag_bytes=gout),
    ]
    mlp_norm = norm_block("mlp_norm", model, dm, pre=bda1_f, residual=res)
    mlp_norm.ig = mlp_norm.ig + bda1_b
    items.append(mlp_norm)
    if not moe_layer:
        items += _dense_mlp(model, dm, gathered=(gin, gout))
    else:
        fs = model.moe.shared_ffn_hidden
        if fs:  # Megatron-Core SharedExpertMLP: a TP-split dense MLP
            sdm = replace(dm, f=fs, f1=2 * fs if model.gated_mlp else fs)
            items += _dense_mlp(model, sdm, "shared_")
        items += moe_mlp_items(model, dm, moe_load_factor(par), dispatch_nodes(par),
                               dispatcher_syncs_host(par), sorts_by_local_expert(model, par),
                               dispatch_ranks(par))
    items.append(Block("mlp_out", fwd=bda2_f, ig=bda2_b))
    if par.dtype == "fp8":  # Transformer Engine's casts around each FP8 GEMM
        # mxfp8 FP8 parameters: Megatron-Bridge's reuse_grad_buf_for_mxfp8_param_ag path, a
        # bf16 all-gather then the weight's quantisation (sim.models.features.mxfp8)
        weights = ("cast" if not par.fp8_param_gather or par.fp8_recipe == "mxfp8" else
                   "transpose" if par.overlap_param_gather else "none")
        fp8.add_casts(items, par.fp8_recipe, dm.sp, t, weights)
    if par.fp4:  # Transformer Engine's NVFP4 GEMMs and quantisation (sim.models.features.nvfp4)
        nvfp4.add_quantize(items, dm.sp, t, "cast" if not par.fp4_param_gather else
                           "transpose" if par.overlap_param_gather else "none")
    rows = eager.apply(rows_from_items(items), par, dm)
    if dm.cp > 1:
        attach_ring_exchanges(rows, dm)
    if par.tp_comm_overlap:
        tp_overlap.apply(rows, moe=moe_layer)
    elif tp_async.applies(par):
        tp_async.apply(rows, dm.sp, moe=moe_layer)
    if par.dtype == "fp8":  # current scaling: TP amax all-reduces of the gathered operands
        rows = fp8_current.reduction_rows(rows, par.fp8_recipe, dm.sp, t)
    if par.fp4:  # the TP amax all-reduces of the gathered operands
        rows = nvfp4.reduction_rows(rows, items, dm.sp, t)
    if par.recompute == "full":
        rows += recompute_rows(rows)
    return tuple(rows)


def _dense_mlp(model: ModelSpec, dm: Dims, prefix: str = "",
               gathered: tuple = (A, A)) -> list[Block | Conj]:
    """fc1 (column-parallel) → GeLU/SwiGLU → fc2 (row-parallel). Activation kernel: GeLU reads
    and writes n·f/t (2A), its backward reads x and dy, writes dx (3A); SwiGLU reads 2f and
    writes f (3A), backward reads 2f and df, writes 2f (5A). ``gathered``: bytes per element
    of the fc1 input (and re-gather) and the fc2 output-gradient all-gathers (default bf16's;
    the shared experts of an MoE layer keep it: the MoE paths' gathers are left at bf16)."""
    n, h, t, eg, f, f1 = dm.n, dm.h, dm.t, dm.eg, dm.f, dm.f1
    gin, gout = gathered
    act_f, act_b = (3, 5) if model.gated_mlp else (2, 3)
    act = "swiglu" if model.gated_mlp else "gelu"
    e = n * f // t
    return [
        tp_enter(dm, ag_bytes=gin),
        Block(prefix + "mlp_fc1",
              fwd=(gemm("fc1", n, h, f1 // t, eg, role=FPROP),
                   elementwise("mlp_act", act_f * A * e, f"{act}_fwd", (n, f // t))),
              ig=(elementwise("mlp_act_grad", act_b * A * e, f"{act}_bwd", (n, f // t)),
                  gemm("fc1_dgrad", n, f1 // t, h, eg)),
              wg=(wgrad("fc1_wgrad", n, h, f1 // t, eg),),
              params=linear_params(model, h, f1, t, True)),
        sp_regather(dm, ag_bytes=gin),
        Block(prefix + "mlp_fc2",
              fwd=(gemm("fc2", n, f // t, h, eg, role=FPROP),),
              ig=(gemm("fc2_dgrad", n, h, f // t, eg),),
              wg=(wgrad("fc2_wgrad", n, f // t, h, eg),),
              params=linear_params(model, f, h, t, False)),
        tp_exit(dm, ag_bytes=gout),
    ]


def embedding_rows(model: ModelSpec, dm: Dims) -> list[Row]:
    """Vocab-parallel word embedding (+ learned positions) on the first stage.

    Forward: lookup writes n·h (2A incl. the read of the rows), position add (3A), then the
    TP all-reduce (SP: reduce-scatter) of the n·h output, then dropout (2A + 1; none at
    ``hidden_dropout`` 0, where PyTorch's ``dropout`` returns its input). Weight grad:
    scatter-add of the n·h gradient into the fp32 main-grad rows (A + 8 per element for the
    positions, A·n·h + 8·n·h/t for the vocab shard).
    """
    n, h, t = dm.n, dm.h, dm.t
    look = (elementwise("embedding_lookup", 2 * A * n * h),)
    wg = [elementwise("embedding_wgrad", A * n * h + 8 * n * h // t)]
    params = dm.v * h // t
    if model.position_embedding == "learned":
        look += (elementwise("position_add", 3 * A * n * h),)
        wg.append(elementwise("position_wgrad", (A + 8) * n * h))
        params += dm.s * h
    comm = Conj()
    if t > 1:
        size = n * h * A
        kind = CollKind.REDUCESCATTER if dm.sp else CollKind.ALLREDUCE
        back = tp_collective(CollKind.ALLGATHER, size) if dm.sp else None
        comm = Conj(tp_collective(kind, size), back)
    e = dm.nt * h
    items = [
        Block("embedding", fwd=look, wg=tuple(wg), params=params),
        comm,
        Block("embedding_dropout", fwd=(elementwise("embedding_dropout", (2 * A + K) * e),),
              ig=(elementwise("embedding_dropout_grad", (2 * A + K) * e),))
        if model.hidden_dropout > 0 else Block("embedding_dropout"),
    ]
    return rows_from_items(items)


def output_rows(model: ModelSpec, dm: Dims, holds_output_weight: bool,
                loss_fusion: str = "") -> list[Row]:
    """Final norm, vocab-parallel output layer and cross entropy on the last stage.

    Logits GEMM ``n × h × v/t`` (bf16 in an fp8 run: Megatron-Core's output layer is not a
    Transformer Engine module); then the vocab-parallel cross entropy, unfused (``loss_fusion``
    ``""``) or fused (``"native"``, ``"te"``): :mod:`sim.models.features.cross_entropy`.
    """
    n, h, t, v = dm.n, dm.h, dm.t, dm.v
    out_params = v * h // t if holds_output_weight else 0
    # Megatron-Core's output layer is a tensor_parallel.ColumnParallelLinear, outside
    # Transformer Engine: with fp8 (eg 1) its GEMMs still run in bf16
    eg, gd = (A, "bf16") if dm.eg == 1 else (dm.eg, "")
    items: list[Block | Conj] = [norm_block("final_norm", model, dm), tp_enter(dm)]
    items.append(Block("output_logits",
                       fwd=(gemm("logits", n, h, v // t, eg, dtype=gd, role=FPROP),),
                       ig=(gemm("logits_dgrad", n, v // t, h, eg, dtype=gd),),
                       wg=(wgrad("logits_wgrad", n, h, v // t, eg, dtype=gd),),
                       params=out_params))
    regather = sp_regather(dm)
    items.append(regather)
    items += cross_entropy.loss_items(dm, loss_fusion)
    rows = rows_from_items(items)
    for r in rows:  # what defer_embedding_wgrad_compute moves (sim.models.features.defer_wgrad)
        if r.name == "output_logits":
            r.tags[DEFER_WGRAD_TAG] = 1
        if regather.bwd is not None and r.ig_comm is regather.bwd:
            r.tags[DEFER_REGATHER_TAG] = 1
    return rows

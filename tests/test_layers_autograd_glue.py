"""Kernels Megatron-Core + Transformer Engine run between the fused ones of a transformer layer,
found by the small-model H100 audit (docs/calibration.md, "Audit: small-model H100 layers").

1. The residual stream's two gradients. Megatron-Core's ``TransformerLayer`` feeds
   ``hidden_states`` both to the norm (TE ``LayerNormLinear``) and, as ``residual``, to the
   bias-dropout-add (megatron/core/transformer/transformer_layer.py at core_v0.8.0 baf94af3,
   ``residual = hidden_states``, twice per layer). TE's norm backward takes only
   ``(dz, x, rsigma, gamma)`` (transformer_engine/pytorch/module/layernorm_linear.py at v1.9
   e79d915a, ``tex.rmsnorm_bwd``): it reads x and dz and writes dx, 3 bf16 bytes per element.
   The two gradients of x are summed by PyTorch's autograd engine (torch/csrc/autograd/
   input_buffer.cpp at 4537ef6c, ``accumulate``: ``old_var.add_(var)`` or ``old_var + var``):
   one add kernel, 3 bytes·2 per element, timed as the measured ``add`` kind.
2. The QKV split with rotary embeddings (megatron/core/transformer/attention.py at core_v0.8.0,
   ``get_query_key_value_tensors``; TE ``get_qkv_layout`` and ``_SplitAlongDim`` at v1.9):
   forward, a copy of q under GQA (``query.reshape`` of a strided view) and a copy of v
   (``.contiguous()`` in TE's layout check); backward, ``torch.cat`` of dq, dk, dv.

Expected byte counts are written out from the tensor sizes (bf16: 2 bytes per element).
"""

from dataclasses import replace

import pytest
from conftest import WORKLOADS
from par_support import make_par

from sim.kernels.lookup import TableLookup
from sim.kernels.table import shipped_table
from sim.models import load_model
from sim.models.compute import H100, Timer
from sim.models.layers import output_rows, transformer_layer_rows
from sim.models.vocab.dims import Dims
from sim.topology.gpu import GpuSpec

H100_SXM = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)


def layer_ops(model_file: str, seq: int | None = None, **par_kw):
    model = load_model(WORKLOADS / "models" / model_file)
    if seq is not None:
        model = replace(model, seq_len=seq)
    par = make_par(**{"global_batch": 1, **par_kw})
    rows = transformer_layer_rows(model, par, Dims.of(model, par), 0)
    fwd = {op.name: op for r in rows for op in r.fwd}
    ig = {op.name: op for r in rows for op in r.ig}
    return fwd, ig


def test_each_layer_norm_backward_is_followed_by_the_residual_gradient_add():
    # Llama 2 7B, TP 1, micro-batch 1, s = 4096: the residual stream is 4096 tokens x 4096
    fwd, ig = layer_ops("llama2-7b.yaml")
    e = 4096 * 4096
    for norm in ("attn_norm", "mlp_norm"):
        assert ig[f"{norm}_grad"].bytes == 3 * 2 * e  # reads x, dy; writes dx
        add = ig[f"{norm}_residual_grad_add"]
        assert (add.bytes, add.kernel, add.shape) == (3 * 2 * e, "add", (4096, 4096))
    assert not [n for n in fwd if "residual_grad" in n]


def test_the_residual_add_is_timed_as_the_measured_add_kernel():
    # Llama 3 8B at s = 8192: [8192 x 4096], a measured shape of the H100 table
    # (sim/data/kernels/h100-sxm.csv: add, 0.07251 ms)
    _, ig = layer_ops("llama3-8b.yaml", seq=8192)
    timer = Timer(H100_SXM, H100, TableLookup(shipped_table("h100-sxm.csv"), slots=132))
    t_ns, how = timer.op_ns(ig["mlp_norm_residual_grad_add"], "bf16")
    assert (t_ns, how) == (pytest.approx(72510.0), "measured shape")


def test_sequence_parallel_residual_add_covers_the_local_tokens():
    _, ig = layer_ops("llama2-7b.yaml", tp=4, sequence_parallel=True)
    assert ig["attn_norm_residual_grad_add"].bytes == 3 * 2 * (4096 // 4) * 4096


def test_final_norm_has_no_residual_add():
    model = load_model(WORKLOADS / "models" / "llama2-7b.yaml")
    par = make_par(global_batch=1)
    rows = output_rows(model, Dims.of(model, par), True)
    names = [op.name for r in rows for op in r.ig]
    assert "final_norm_grad" in names
    assert not [n for n in names if "residual_grad" in n]


def test_eager_torchtitan_block_keeps_its_own_adds_only():
    # --no-compile: sim.models.features.eager counts the residual accumulate from the bda gradient
    fwd, ig = layer_ops("llama2-7b.yaml", compile=False, attention_backend="flash")
    assert not [n for n in (*fwd, *ig) if "residual_grad_add" in n or "qkv_split" in n]
    assert [n for n in ig if n.endswith("_residual_accumulate")]


def test_gqa_rope_layer_copies_q_and_v_forward_and_concatenates_the_gradients():
    # Llama 3 8B: 32 query heads, 8 KV heads of 128; 4096 tokens
    fwd, ig = layer_ops("llama3-8b.yaml", seq=4096, attention_backend="fused")
    q, k = 4096 * 32 * 128, 4096 * 8 * 128
    assert fwd["qkv_split_query_copy"].bytes == 2 * 2 * q
    assert fwd["qkv_split_value_copy"].bytes == 2 * 2 * k
    assert ig["qkv_split_grad_cat"].bytes == 2 * 2 * (q + 2 * k)


def test_mha_rope_layer_has_no_query_copy():
    fwd, ig = layer_ops("llama2-7b.yaml", attention_backend="fused")
    x = 4096 * 4096  # 32 heads of 128, q, k and v alike
    assert "qkv_split_query_copy" not in fwd
    assert fwd["qkv_split_value_copy"].bytes == 2 * 2 * x
    assert ig["qkv_split_grad_cat"].bytes == 2 * 2 * 3 * x


def test_tensor_parallel_split_copies_are_per_gpu():
    fwd, ig = layer_ops("llama3-8b.yaml", seq=4096, tp=2, attention_backend="fused")
    q, k = 4096 * 16 * 128, 4096 * 4 * 128
    assert fwd["qkv_split_query_copy"].bytes == 4 * q
    assert ig["qkv_split_grad_cat"].bytes == 4 * (q + 2 * k)


def test_unfused_core_attention_has_the_cat_but_no_te_layout_copy():
    fwd, ig = layer_ops("llama2-7b.yaml", attention_backend="unfused")
    assert "qkv_split_value_copy" not in fwd
    assert "qkv_split_grad_cat" in ig


def test_learned_position_model_has_no_split_kernels():
    # GPT-3: no rotary embedding, q, k, v stay views of the QKV output
    fwd, ig = layer_ops("gpt3-5b.yaml", attention_backend="fused")
    assert not [n for n in (*fwd, *ig) if n.startswith("qkv_split")]
    assert "attn_norm_residual_grad_add" in ig

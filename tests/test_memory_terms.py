"""Per-term activation and model-state bytes of a small model, each written out in closed form,
and one test per mechanism of the memory model that follows what Megatron-Core and Transformer
Engine keep (docs/models.md, "Memory model"):

- ``--grad-reduce-in-bf16``: 2-byte gradient buffer; the fp32 copy of the optimizer's shard
  exists only during the step (Megatron-Core distrib_optimizer.py ``shard_model_grad.float()``;
  ``optimizer.zero_grad()`` at the start of the next train step frees it);
- FP8: a TE linear layer keeps the FP8 copy of its input (1 byte/element), the fused attention
  its bf16 output beside the projection's FP8 copy;
- dropout with p = 0 keeps no mask (PyTorch's dropout returns its input);
- unfused attention without attention dropout keeps only the 16-bit softmax output;
- fused attention keeps fp32 softmax statistics (4 bytes per head and token), not s×s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from par_support import make_par

from sim.cli import main
from sim.models import ParallelConfig, build_model_plan
from sim.models.generator import _dp_comm
from sim.models.memory import check_memory, layer_activation_bytes
from sim.models.vocab.spec import ModelSpec
from sim.topology.gpu import GpuSpec

GPU = GpuSpec("test-80GB", {"bf16": 1000.0, "fp16": 1000.0, "fp8": 2000.0, "fp32": 60.0}, 80, 3000)
# small GQA model with a gated MLP: s = 256, h = 64, a = 4 heads of 16, 2 KV heads, f = 160
SMALL = ModelSpec(name="small", layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=160,
                  gated_mlp=True, bias=False, norm="rmsnorm", position_embedding="rope",
                  tied_embeddings=False, vocab=512, seq_len=256, hidden_dropout=0.0,
                  attention_dropout=0.0)
S, H, A, QH, KVH, F = 256, 64, 4, 64, 32, 160


def _par(**kw) -> ParallelConfig:
    base = dict(tp=2, micro_batch=2, global_batch=2, sequence_parallel=True)
    base.update(kw)
    return make_par(**base)


def _layer(b, t, *, x, masks, proj, attn_extra, sp=True):
    """The closed form of one layer's bytes: replicated terms ÷ t with SP, split terms ÷ t.
    replicated: norm inputs 2+2, QKV and fc1 inputs x each, dropout masks (1 byte each);
    split: Q 2·qh, K and V 2·kvh each, attention output proj·qh, fc1 output 2·2f (SwiGLU
    input), fc2 input x·f."""
    sb = S * b
    replicated = sb * H * (4 + 2 * x + masks)
    split = sb * (2 * QH + 4 * KVH + proj * QH + 2 * 2 * F + x * F)
    return replicated // (t if sp else 1) + split // t + attn_extra


def test_bf16_fused_no_dropout_terms():
    """bf16, fused attention, no dropout: the attention output once (2 bytes, kept by the
    fused kernel and shared with the projection), no masks, + the softmax statistics."""
    b, t = 2, 2
    want = _layer(b, t, x=2, masks=0, proj=2, attn_extra=4 * A * S * b // t)
    assert layer_activation_bytes(SMALL, _par(attention_backend="fused")) == want


def test_fp8_keeps_one_byte_linear_inputs():
    """FP8: QKV, fc1 and fc2 inputs at 1 byte; the attention output kept at 2 by the fused
    kernel plus the projection's FP8 copy (1). The old model counted every input at 2 bytes."""
    b, t = 2, 2
    got = layer_activation_bytes(SMALL, _par(attention_backend="fused", dtype="fp8"))
    assert got == _layer(b, t, x=1, masks=0, proj=3, attn_extra=4 * A * S * b // t)
    bf16 = layer_activation_bytes(SMALL, _par(attention_backend="fused"))
    # FP8 saves (2 − 1)·sbh per norm-fused input (QKV, fc1) ÷ t, (2 − 1)·sbf ÷ t at fc2, and
    # adds sb·qh ÷ t for the projection's copy
    assert bf16 - got == (2 * S * b * H) // t + S * b * F // t - S * b * QH // t


def test_fp8_selective_recompute_projection_keeps_only_fp8():
    """Selective recompute re-runs the attention kernel, so its output is not kept: the
    projection's FP8 copy (1 byte) is all that stays; no softmax statistics either."""
    b, t = 2, 2
    got = layer_activation_bytes(SMALL, _par(attention_backend="fused", dtype="fp8",
                                             recompute="selective"))
    assert got == _layer(b, t, x=1, masks=0, proj=1, attn_extra=0)


def test_hidden_dropout_masks_only_when_p_positive():
    """Two 1-byte masks per layer (÷ t with SP) with hidden dropout > 0, none at p = 0; the
    embedding's mask on the first stage likewise."""
    b, t = 2, 2
    par = _par(attention_backend="fused")
    with_dropout = replace(SMALL, hidden_dropout=0.1)
    assert layer_activation_bytes(with_dropout, par) - layer_activation_bytes(SMALL, par) \
        == 2 * S * b * H // t
    par1 = _par(attention_backend="fused", pp=2, global_batch=2)
    st0 = check_memory(SMALL, par1, GPU).stages[0]
    st0_d = check_memory(with_dropout, par1, GPU).stages[0]
    # stage 0 of 1F1B with p = 2 holds one microbatch (M = 1) of 2 layers + the embedding mask
    assert st0_d.activations_bytes - st0.activations_bytes == 2 * (2 * S * b * H // t) \
        + S * b * H // t


def test_unfused_attention_without_dropout_keeps_softmax_output_only():
    """Unfused attention: 5·a·s²·b/t with attention dropout (softmax output 2, mask 1, dropout
    output 2), 2·a·s²·b/t without (the softmax output is the product's input)."""
    b, t = 2, 2
    par = _par(attention_backend="unfused")
    no_drop = layer_activation_bytes(SMALL, par)
    assert no_drop == _layer(b, t, x=2, masks=0, proj=2, attn_extra=2 * A * S * S * b // t)
    drop = layer_activation_bytes(replace(SMALL, attention_dropout=0.1), par)
    assert drop - no_drop == 3 * A * S * S * b // t


def test_grad_reduce_in_bf16_model_states():
    """Distributed optimizer, DP 4: weights 2, gradients 2 (bf16 buffer) per parameter,
    optimizer 12/d resident; the fp32 gradient copy 4/d only during the step (not added to the
    activations' peak). Default: 4-byte gradients, no copy."""
    kw = dict(tp=1, dp=4, global_batch=8, sequence_parallel=False, distributed_optimizer=True,
              attention_backend="fused")
    par = _par(**kw, grad_reduce_in_bf16=True)
    plan = build_model_plan(SMALL, par)
    n = plan.stages[0].params
    shard = -(-n // 4)
    st = check_memory(SMALL, par, GPU, plan=plan).stages[0]
    assert (st.weights_bytes, st.grads_bytes, st.optimizer_bytes, st.grad_copy_bytes) == \
        (2 * n, 2 * n, 12 * shard, 4 * shard)
    assert st.total_bytes == 2 * n + 2 * n + 12 * shard + max(st.activations_bytes, 4 * shard) \
        + st.reserved_bytes
    old = check_memory(SMALL, _par(**kw), GPU).stages[0]
    assert (old.grads_bytes, old.grad_copy_bytes) == (4 * n, 0)
    assert old.total_bytes - st.total_bytes == 2 * n


def test_grad_copy_bounds_the_peak_when_activations_are_small():
    """The copy and the activations never coexist: the stage needs the larger of the two."""
    par = _par(tp=1, dp=4, micro_batch=1, global_batch=4, sequence_parallel=False,
               recompute="full", grad_reduce_in_bf16=True, attention_backend="fused")
    st = check_memory(replace(SMALL, seq_len=32), par, GPU).stages[0]
    assert st.grad_copy_bytes > st.activations_bytes
    assert st.total_bytes == st.weights_bytes + st.grads_bytes + st.optimizer_bytes \
        + st.grad_copy_bytes + st.reserved_bytes


def test_grad_reduce_in_bf16_halves_dp_gradient_messages():
    """The DP reduce-scatter carries the buffer's dtype: 2 bytes per parameter."""
    kw = dict(tp=1, dp=4, global_batch=8, sequence_parallel=False, distributed_optimizer=True)
    assert _dp_comm(_par(**kw, grad_reduce_in_bf16=True), 1000, False, False).size_bytes == 2000
    assert _dp_comm(_par(**kw), 1000, False, False).size_bytes == 4000


@pytest.mark.parametrize("extra", [["--zero", "2"], ["--fsdp"]])
def test_grad_reduce_in_bf16_refused_where_it_changes_nothing(extra, capsys):
    """ZeRO / FSDP gradients are 16-bit already (so are fp16 ones): exit 2."""
    args = ["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "2", "--global-batch", "8",
            "--grad-reduce-in-bf16", *extra]
    assert main(args) == 2
    assert "--grad-reduce-in-bf16" in capsys.readouterr().err

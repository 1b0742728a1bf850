"""Megatron-Core's qk_layernorm (sim/models/features/qk_norm.py): the q and k norm kernels of a tiny
model's layer with bytes worked out by hand from the tensor shapes, their exact roofline time,
TP and CP sizes, the weights and the kept activations, the spec field, the refusal in eager
mode and the report's assumption line."""

import json
from dataclasses import replace

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.errors import InputError, UsageError
from sim.models import build_model_plan, load_model, total_params
from sim.models.compute import A100, ops_time_ns
from sim.models.memory import layer_activation_bytes
from sim.models.vocab.spec import ModelSpec, model_from_dict
from sim.topology.gpu import GpuSpec

# a GPU of round bandwidth: at 80% of 2000 GB/s, 1600 bytes per ns
GPU = GpuSpec("round", {"bf16": 100.0}, 80, 2000)
# 2 layers, sequence 8, hidden 16: 4 query heads of dim 8 (Q 32 wide, as kv_channels makes
# Qwen3's), 2 kv heads (GQA), RMSNorm, RoPE, QK norm
TINY = ModelSpec("tiny-qk", layers=2, hidden=16, heads=4, vocab=128, seq_len=8, ffn_hidden=32,
                 kv_heads=2, kv_channels=8, gated_mlp=True, bias=False, norm="rmsnorm",
                 position_embedding="rope", tied_embeddings=False, qk_layernorm=True)


def qkv_row(model, **kw):
    """Layer 0's attn_qkv row of a one-stage plan (micro batch 1)."""
    par = make_par(tp=kw.pop("tp", 1), global_batch=1, **kw)
    plan = build_model_plan(model, par)
    return next(r for r in plan.stages[0].rows() if r.name == "layer0_attn_qkv")


def norm_listing(ops):
    return [(op.name, op.bytes, op.kernel, op.shape) for op in ops if "_norm" in op.name]


def test_kernels_hand_derived():
    # n = 8 tokens; q: 8 tokens × 4 heads × 8 = 256 elements in 32 rows of d = 8, k: 8 × 2 × 8
    # = 128 in 16 rows. Forward reads x, writes y (2 + 2 bytes per element); backward reads x
    # and dy, writes dx (6 bytes per element)
    # Transformer Engine's norm first makes its input contiguous: the key is a strided view of
    # the QKV output (copied: reads and writes 128 elements), the GQA query already the
    # reshape's copy
    row = qkv_row(TINY)
    assert norm_listing(row.fwd) == [("attn_q_norm", 1024, "rmsnorm_fwd", (32, 8)),
                                     ("attn_k_norm_contiguous", 512, "", ()),
                                     ("attn_k_norm", 512, "rmsnorm_fwd", (16, 8))]
    assert norm_listing(row.ig) == [("attn_k_norm_grad", 768, "rmsnorm_bwd", (16, 8)),
                                    ("attn_q_norm_grad", 1536, "rmsnorm_bwd", (32, 8))]
    # after the QKV GEMM, before the rotary embedding (Megatron-Core's order); the gradients
    # after RoPE's, before the QKV input-gradient GEMM
    names = [op.name for op in row.fwd]
    assert names[:6] == ["qkv", "attn_q_norm", "attn_k_norm_contiguous", "attn_k_norm",
                         "rope_q", "rope_k"]
    ig = [op.name for op in row.ig]
    assert ig.index("rope_k_grad") < ig.index("attn_k_norm_grad") < ig.index("qkv_dgrad")
    # 3 kernels × 2 µs + 2048 bytes at 1600 bytes/ns (1.28 ns) = 6001.28 ns → 6002 (rounded
    # up); backward 2 kernels, 2304 bytes: 4001.44 → 4002
    fwd = [op for op in row.fwd if "_norm" in op.name]
    assert ops_time_ns(fwd, GPU, A100, "bf16") == 6002
    assert ops_time_ns([op for op in row.ig if "_norm" in op.name], GPU, A100, "bf16") == 4002
    # without the field the layer is the same minus exactly these five kernels
    plain = qkv_row(replace(TINY, qk_layernorm=False))
    assert [op.name for op in plain.fwd] == [n for n in names if "_norm" not in n]
    assert [op.name for op in plain.ig] == [n for n in ig if "_norm" not in n]


def test_tensor_and_context_parallel_sizes():
    # TP 2: 2 query heads and 1 kv head per GPU; CP 2: 4 tokens of this rank → q 4·2·8 = 64
    # elements (8 rows), k 4·1·8 = 32 (4 rows)
    row = qkv_row(TINY, tp=2, cp=2, sequence_parallel=True)
    assert [(n, b, s) for n, b, _, s in norm_listing(row.fwd)] == [
        ("attn_q_norm", 4 * 64, (8, 8)), ("attn_k_norm_contiguous", 4 * 32, ()),
        ("attn_k_norm", 4 * 32, (4, 8))]


def test_mha_query_is_copied_too():
    # heads == kv_heads: the query stays a strided view after the reshape, so TE copies it
    # (no GQA reshape copy either); 8 tokens × 4 heads × 8 = 256 elements each
    row = qkv_row(replace(TINY, kv_heads=4))
    listing = [(n, b) for n, b, _, _ in norm_listing(row.fwd)]
    assert listing == [("attn_q_norm_contiguous", 1024), ("attn_q_norm", 1024),
                       ("attn_k_norm_contiguous", 1024), ("attn_k_norm", 1024)]
    assert "qkv_split_query_copy" not in [op.name for op in row.fwd]


def test_layernorm_kind_follows_the_spec():
    row = qkv_row(replace(TINY, norm="layernorm"))
    assert {op.kernel for op in row.fwd if op.name.endswith("_norm")} == {"layernorm_fwd"}


def test_weights_and_kept_activations():
    # one 8-wide RMSNorm weight each for q and k per layer: 2 layers × 16 parameters
    assert total_params(TINY) - total_params(replace(TINY, qk_layernorm=False)) == 2 * 16
    assert total_params(replace(TINY, norm="layernorm")) - total_params(
        replace(TINY, norm="layernorm", qk_layernorm=False)) == 2 * 32
    plain = replace(TINY, qk_layernorm=False)
    # the norms keep their inputs (2 bytes per element) and an fp32 inverse RMS per head and
    # token: s·b·(heads + kv_heads)·(2d + 4) / t = 8·(4 + 2)·(16 + 4) / t = 960 / t
    for par in (make_par(global_batch=1), make_par(tp=2, global_batch=1),
                make_par(tp=2, global_batch=1, sequence_parallel=True)):
        got = layer_activation_bytes(TINY, par) - layer_activation_bytes(plain, par)
        assert got == 960 // par.tp
    full = make_par(global_batch=1, recompute="full")
    assert layer_activation_bytes(TINY, full) == layer_activation_bytes(plain, full)


def test_qwen3_specs_set_it_and_count_its_weights():
    """Qwen3-30B-A3B: q and k norm weights of head_dim 128 in each of the 48 layers."""
    m = load_model(ROOT / "workloads/models/qwen3-30b-a3b.yaml")
    assert m.qk_layernorm
    assert total_params(m) - total_params(replace(m, qk_layernorm=False)) == 48 * 2 * 128


def test_spec_field_must_be_boolean(tmp_path):
    base = {"name": "x", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32}
    assert not model_from_dict(base).qk_layernorm
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\nseq_len: 32\n"
                    "qk_layernorm: yes please\n")
    with pytest.raises(InputError) as err:
        load_model(path)
    assert (err.value.file, err.value.field, err.value.line) == (str(path), "qk_layernorm", 7)


def test_eager_mode_refused():
    par = make_par(global_batch=1, compile=False)
    with pytest.raises(UsageError, match="no QK norm"):
        build_model_plan(TINY, par)


def test_report_states_it_and_the_iteration_grows(tmp_path):
    base = (ROOT / "tests/data/tiny-llama-2layer.yaml").read_text()
    spec = tmp_path / "m.yaml"
    spec.write_text(base + "qk_layernorm: true\n")
    reps = []
    for model in (ROOT / "tests/data/tiny-llama-2layer.yaml", spec):
        out = tmp_path / "r.json"
        code = main(["--model", str(model), "--topo", "tiny-2x2", "--tp", "1",
                     "--global-batch", "4", "--json", str(out), "--quiet"])
        assert code == 0
        reps.append(json.loads(out.read_text()))
    assert not any(a.startswith("qk_layernorm") for a in reps[0]["assumptions"])
    assert any(a.startswith("qk_layernorm (model spec") for a in reps[1]["assumptions"])
    assert reps[1]["iteration_time_s"] > reps[0]["iteration_time_s"]

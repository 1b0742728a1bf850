"""PyTorch eager mode (--no-compile, sim/models/features/eager.py): the kernels of a tiny
torchtitan Llama layer with bytes worked out by hand from the tensor shapes, their exact roofline
time, eager never faster than fused, and the refusals."""

import math
from dataclasses import replace

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.errors import UsageError
from sim.models import build_model_plan, load_model
from sim.models.compute import A100, H100, ops_time_ns
from sim.models.vocab.spec import ModelSpec
from sim.topology.gpu import GpuSpec

A100_80 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)
H100_80 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
# 4 tokens (micro batch 1, sequence 4), hidden 8, 2 query heads and 1 kv head of dim 4, ffn 16
TINY = ModelSpec("tiny-llama", layers=1, hidden=8, heads=2, vocab=128, seq_len=4, ffn_hidden=16,
                 kv_heads=1, gated_mlp=True, bias=False, norm="rmsnorm",
                 position_embedding="rope", tied_embeddings=False)


def layer_rows(model, compile_: bool, final: bool = False, **kw):
    """The rows of layer 0 (and the final norm's with ``final``) of a one-stage plan."""
    mb = kw.get("micro_batch", 1)
    par = make_par(tp=kw.pop("tp", 1), global_batch=mb, compile=compile_, **kw)
    plan = build_model_plan(model, par)
    return {r.name: r for r in plan.stages[0].rows()
            if r.tags.get("layer") == 0 or (final and r.name == "final_norm")}


def listing(ops):
    return [(op.name, op.bytes) for op in ops]


def test_rmsnorm_kernels_hand_derived():
    # e = 4 tokens × 8 = 32 elements, r = 4 rows, weight h = 8 (bf16 2, fp32 4 bytes)
    norm = layer_rows(TINY, False)["layer0_attn_norm"]
    assert listing(norm.fwd) == [
        ("attn_norm_to_fp32", 32 * (2 + 4)), ("attn_norm_pow", 32 * 8),
        ("attn_norm_mean", 32 * 4 + 4 * 4), ("attn_norm_add_eps", 4 * 8),
        ("attn_norm_rsqrt", 4 * 8), ("attn_norm_mul_rsqrt", 32 * 8 + 4 * 4),
        ("attn_norm_to_bf16", 32 * 6), ("attn_norm_mul_weight", 32 * 4 + 8 * 2)]
    g = "attn_norm_grad"
    assert listing(norm.ig) == [
        (f"{g}_mul_weight", 32 * 4 + 16), (f"{g}_weight_mul", 32 * 6),
        (f"{g}_weight_sum", 32 * 2 + 16), (f"{g}_to_fp32", 32 * 6),
        (f"{g}_mul_rsqrt", 32 * 8 + 16), (f"{g}_rsqrt_mul_x", 32 * 12),
        (f"{g}_rsqrt_sum", 32 * 4 + 16), (f"{g}_rsqrt_pow3", 4 * 8),
        (f"{g}_rsqrt_scale", 4 * 8), (f"{g}_rsqrt_mul", 4 * 12), (f"{g}_mean", 32 * 4 + 16),
        (f"{g}_pow_copy", 32 * 8), (f"{g}_pow_scale", 32 * 8), (f"{g}_pow_mul", 32 * 12),
        (f"{g}_accumulate", 32 * 12), (f"{g}_to_bf16", 32 * 6)]
    assert sum(op.bytes for op in norm.fwd) == 1264 and sum(op.bytes for op in norm.ig) == 3136
    # roofline: 8 kernels × 2 µs + 1264 B at 80% of 2039 GB/s = 16000.775 ns → 16001
    assert ops_time_ns(norm.fwd, A100_80, A100, "bf16") == 16001
    assert ops_time_ns(norm.ig, A100_80, A100, "bf16") == math.ceil(16 * 2000 + 3136 / 1631.2)


def test_rotary_swiglu_and_residual_kernels_hand_derived():
    rows = layer_rows(TINY, False)
    qkv = rows["layer0_attn_qkv"]
    names = [op.name for op in qkv.fwd]
    # q: 4 tokens × 2 heads × 4 = 32 elements, k: 16; freqs_cis complex64 [4 × 2] = 64 bytes
    after = listing(qkv.fwd[names.index("qkv") + 1:names.index("flash_attn")])
    assert after == [("rope_q_to_fp32", 32 * 6), ("rope_q_complex_mul", 32 * 8 + 64),
                     ("rope_q_to_bf16", 32 * 6), ("rope_k_to_fp32", 16 * 6),
                     ("rope_k_complex_mul", 16 * 8 + 64), ("rope_k_to_bf16", 16 * 6),
                     # GQA: k and v (16 elements) copied to both query heads (32): 2·(16 + 32)
                     ("repeat_kv_k", 96), ("repeat_kv_v", 96)]
    ig = listing(qkv.ig)
    i = [n for n, _ in ig].index("qkv_dgrad")
    assert ig[i - 8:i] == [("repeat_kv_k_grad", 96), ("repeat_kv_v_grad", 96),
                           ("rope_q_grad_to_fp32", 192), ("rope_q_grad_complex_mul", 320),
                           ("rope_q_grad_to_bf16", 192), ("rope_k_grad_to_fp32", 96),
                           ("rope_k_grad_complex_mul", 192), ("rope_k_grad_to_bf16", 96)]
    # wq/wk/wv input gradients summed: two adds of 4 × 8 bf16 elements (read 2, write 1)
    assert ig[i + 1:] == [("qkv_dgrad_add_k", 192), ("qkv_dgrad_add_v", 192)]
    fc1 = rows["layer0_mlp_fc1"]  # F = 4 tokens × 16 = 64 elements
    assert listing(fc1.fwd)[1:] == [("mlp_silu", 64 * 4), ("mlp_silu_mul", 64 * 6)]
    assert listing(fc1.ig) == [("mlp_mul_grad_silu", 384), ("mlp_mul_grad_up", 384),
                               ("mlp_silu_grad", 384), ("fc1_dgrad", fc1.ig[3].bytes),
                               ("fc1_dgrad_add_up", 192)]
    out = rows["layer0_mlp_out"]
    assert listing(out.fwd) == [("mlp_bda_residual_add", 192)]
    assert listing(out.ig) == [("mlp_bda_grad_residual_accumulate", 192)]
    final = layer_rows(TINY, False, final=True)["final_norm"]
    assert listing(final.fwd)[0] == ("final_norm_to_fp32", 32 * 6)


def test_fused_rmsnorm_keeps_the_fused_norm_kernel():
    fused = layer_rows(TINY, True)["layer0_attn_norm"]
    triton = layer_rows(TINY, False, norm_type="fused_rmsnorm")["layer0_attn_norm"]
    assert listing(triton.fwd) == listing(fused.fwd) == [("attn_norm", 2 * 2 * 32)]


def test_full_recompute_reruns_the_eager_forward():
    rows = layer_rows(TINY, False, recompute="full")
    rec = rows["layer0_recompute_attn_norm"]
    assert [op.name for op in rec.ig] == ["recompute_" + op.name
                                          for op in rows["layer0_attn_norm"].fwd]
    assert all(op.recompute for op in rec.ig)


def _layer_ns(model, compile_, gpu, cm, **kw) -> int:
    return sum(ops_time_ns(r.ops(), gpu, cm, "bf16")
               for r in layer_rows(model, compile_, **kw).values())


@pytest.mark.parametrize("name", ["llama2-13b", "llama3-8b", "llama3-70b", "llama2-70b"])
@pytest.mark.parametrize("kw", [{}, {"tp": 8, "sequence_parallel": True},
                                {"recompute": "full", "micro_batch": 2},
                                {"norm_type": "fused_rmsnorm"}])
def test_eager_never_faster_than_fused(name, kw):
    model = load_model(str(ROOT / "workloads" / "models" / f"{name}.yaml"))
    for gpu, cm in ((A100_80, A100), (H100_80, H100)):
        base = {k: v for k, v in kw.items() if k != "norm_type"}
        fused = _layer_ns(model, True, gpu, cm, **base)
        eager = _layer_ns(model, False, gpu, cm, **kw)
        assert eager > fused


def test_eager_layer_extra_time_hand_derived():
    # Llama 2 13B, micro batch 1 (r = 4096 tokens, e = r·h, MHA: k as large as q): the bytes
    # the eager layer moves beyond the fused one, per kernel family; timed at one byte per ns
    model = load_model(str(ROOT / "workloads" / "models" / "llama2-13b.yaml"))
    gpu = GpuSpec("unit", {"bf16": 1e9}, 80, 1.25)  # at 80% of 1.25 GB/s: one byte per ns
    cm = replace(A100, elementwise_overhead_ns=0.0, gemm_overhead_ns=0.0)
    r, h, f, s, d = 4096, 5120, 13824, 4096, 128
    e, fe = r * h, r * f
    # the fused norm: forward reads x, writes y (4e); backward reads x, dy, writes dx (6e)
    norms = 2 * ((36 * e + 24 * r + 2 * h) - 4 * e) + 2 * ((92 * e + 40 * r + 4 * h) - 6 * e)
    # q and k (MHA: k = q), forward and backward: eager's three kernels replace Transformer
    # Engine's fused one (reads and writes the tensor, reads the fp32 frequencies)
    rope = 2 * 2 * (20 * e + 8 * s * d // 2) - 2 * 2 * (4 * e + 4 * s * d)
    swiglu = (10 * fe - 6 * fe) + (18 * fe - 10 * fe)
    # the recipe's hidden_dropout 0: the fused layer's residual add (6e) forward and autograd's
    # sum of the residual's two gradients (6e) backward; eager: the same add forward and its
    # gradient accumulate backward
    residual = 2 * (6 * e - 6 * e) + 2 * (6 * e - 6 * e)
    dgrad_adds = 3 * 6 * e
    # Megatron-Core's QKV split (fused layer only; torchtitan has separate wq/wk/wv): the copy
    # of v forward (4e, MHA) and the cat of dq, dk, dv backward (12e)
    split = -(4 * e + 12 * e)
    ew = [op for row in layer_rows(model, True, micro_batch=1).values() for op in row.ops()
          if op.flops == 0 and op.kind.value == "elementwise"]
    eew = [op for row in layer_rows(model, False, micro_batch=1).values() for op in row.ops()
           if op.flops == 0 and op.kind.value == "elementwise"]
    extra = sum(op.bytes for op in eew) - sum(op.bytes for op in ew)
    assert extra == norms + rope + swiglu + residual + dgrad_adds + split
    assert (ops_time_ns(eew, gpu, cm, "bf16") - ops_time_ns(ew, gpu, cm, "bf16")
            == pytest.approx(extra, abs=2))


@pytest.mark.parametrize(("model", "kw", "field"), [
    ("gpt2-medium", {}, "no_compile"),  # LayerNorm, GeLU, learned positions
    ("mixtral-8x7b", {}, "no_compile"),  # MoE layers
    ("llama3-8b", {"dtype": "fp8"}, "no_compile"),
    ("llama3-8b", {"attention_backend": "unfused"}, "no_compile"),
    ("llama3-8b", {"tp": 2, "sequence_parallel": True, "tp_comm_overlap": True},
     "tp_comm_overlap"),
])
def test_no_compile_refused_where_it_cannot_apply(model, kw, field):
    spec = load_model(str(ROOT / "workloads" / "models" / f"{model}.yaml"))
    par = make_par(tp=kw.pop("tp", 1), global_batch=1, compile=False, **kw)
    with pytest.raises(UsageError) as err:
        build_model_plan(spec, par)
    assert err.value.field == field


def test_norm_type_refused_when_compiled():
    spec = load_model(str(ROOT / "workloads" / "models" / "llama3-8b.yaml"))
    with pytest.raises(UsageError) as err:
        build_model_plan(spec, make_par(global_batch=1, norm_type="fused_rmsnorm"))
    assert err.value.field == "norm_type"


@pytest.mark.parametrize("flag", [["--no-compile"], ["--compile"],
                                  ["--norm-type", "fused_rmsnorm"]])
def test_refused_with_a_workload_file(flag, capsys):
    args = ["--workload", str(ROOT / "workloads" / "aicb-gpt13b-tp8-pp8-512gpu.txt"),
            "--topo", "dgx-a100-512", *flag]
    assert main(args) == 2
    assert flag[0] in capsys.readouterr().err


def test_cli_states_the_mode(capsys):
    base = ["--model", "llama3-8b", "--topo", "dgx-a100-1024", "--nodes", "1", "--tp", "1",
            "--global-batch", "8", "--fsdp", "--verbose"]
    assert main(base) == 0
    fused = capsys.readouterr().out
    assert main([*base, "--no-compile"]) == 0
    eager = capsys.readouterr().out
    assert "element-wise kernels fused as Megatron-Core" in fused
    assert "--no-compile: PyTorch eager" in eager

    def it(out):
        return float(out.split("iteration time")[1].split("ms")[0])

    assert it(eager) > it(fused)

"""Megatron-Core's rotary position embedding (sim/models/features/rope.py): the kernels of a tiny
model's layer with bytes worked out by hand from the tensor shapes (Transformer Engine's fused
kernel and Megatron-Core's unfused torch expression), their exact roofline time, CP and TP sizes,
eager runs counting only their own RoPE, unfused never faster, the report's assumption line and
the refusals of --no-rope-fusion."""

import json
from dataclasses import replace

import pytest
from conftest import ROOT, SEED_512, SEED_OPTABLE
from par_support import make_par

from sim.cli import main
from sim.errors import UsageError
from sim.models import build_model_plan, load_model
from sim.models.compute import A100, H100, ops_time_ns
from sim.models.vocab.spec import ModelSpec
from sim.topology.gpu import GpuSpec

# a GPU of round bandwidth: at 80% of 2000 GB/s, 1600 bytes per ns
GPU = GpuSpec("round", {"bf16": 100.0}, 80, 2000)
H100_80 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
# 2 layers, sequence 8, hidden 16: 2 query heads of dim 8, 1 kv head (GQA)
TINY = ModelSpec("tiny-rope", layers=2, hidden=16, heads=2, vocab=128, seq_len=8, ffn_hidden=32,
                 kv_heads=1, gated_mlp=True, bias=False, norm="rmsnorm",
                 position_embedding="rope", tied_embeddings=False)


def qkv_row(model, **kw):
    """Layer 0's attn_qkv row of a one-stage plan (micro batch 1)."""
    par = make_par(tp=kw.pop("tp", 1), global_batch=1, **kw)
    plan = build_model_plan(model, par)
    return next(r for r in plan.stages[0].rows() if r.name == "layer0_attn_qkv")


def rope_listing(ops):
    return [(op.name, op.bytes) for op in ops if op.name.startswith("rope_")]


def test_fused_kernels_hand_derived():
    # n = 8 tokens; q: 8 × 16 = 128 elements, k: 8 × 8 = 64; frequencies 8 positions × d 8 = 64
    # fp32. One kernel per tensor and direction reads and writes the tensor (2 + 2 bytes per
    # element) and reads the frequencies (4 bytes each)
    row = qkv_row(TINY)
    # (then Megatron-Core's QKV-split copies of q and v: tests/test_layers_autograd_glue.py)
    assert [op.name for op in row.fwd] == ["qkv", "rope_q", "rope_k", "qkv_split_query_copy",
                                           "qkv_split_value_copy", "flash_attn"]
    assert rope_listing(row.fwd) == [("rope_q", 128 * 4 + 64 * 4), ("rope_k", 64 * 4 + 64 * 4)]
    assert rope_listing(row.ig) == [("rope_q_grad", 768), ("rope_k_grad", 512)]
    assert [op.name for op in row.ig][-1] == "qkv_dgrad"
    # 2 kernels × 2 µs + 1280 bytes at 1600 bytes/ns (0.8 ns) = 4000.8 ns → 4001 each way
    fwd = [op for op in row.fwd if op.name.startswith("rope_")]
    assert ops_time_ns(fwd, GPU, A100, "bf16") == 4001
    both_layers = [op for r in build_model_plan(TINY, make_par(global_batch=1)).stages[0]
                   .rows() for op in r.fwd + r.ig if op.name.startswith("rope_")]
    assert len(both_layers) == 8  # 2 layers × q, k × forward, backward


def test_unfused_kernels_hand_derived():
    # per tensor of X elements with P = 64 frequencies: forward cos, ·mscale, cast (8P, 8P,
    # 6P) and the same for sin; t·cos (4X + 2P), -x2 (2X), cat (4X), ·sin (4X + 2P), add
    # (6X), cat with the empty pass-through part (4X) = 24X + 48P; backward ·sin (4X + 2P),
    # neg (2X), chunk's cat (4X), ·cos (4X + 2P), the sum of t's two gradients (6X) = 20X + 4P
    row = qkv_row(TINY, apply_rope_fusion=False)
    q, k, p = 128, 64, 64
    fwd, ig = rope_listing(row.fwd), rope_listing(row.ig)
    assert fwd[:12] == [
        ("rope_q_cos", 8 * p), ("rope_q_cos_mscale", 8 * p), ("rope_q_cos_to_bf16", 6 * p),
        ("rope_q_sin", 8 * p), ("rope_q_sin_mscale", 8 * p), ("rope_q_sin_to_bf16", 6 * p),
        ("rope_q_mul_cos", 4 * q + 2 * p), ("rope_q_rotate_neg", 2 * q),
        ("rope_q_rotate_cat", 4 * q), ("rope_q_mul_sin", 4 * q + 2 * p), ("rope_q_add", 6 * q),
        ("rope_q_cat_pass", 4 * q)]
    assert ig[:5] == [
        ("rope_q_grad_mul_sin", 4 * q + 2 * p), ("rope_q_grad_rotate_neg", 2 * q),
        ("rope_q_grad_chunk_cat", 4 * q), ("rope_q_grad_mul_cos", 4 * q + 2 * p),
        ("rope_q_grad_accumulate", 6 * q)]
    assert len(fwd) == 24 and len(ig) == 10
    assert sum(b for _, b in fwd) == (24 * q + 48 * p) + (24 * k + 48 * p) == 10752
    assert sum(b for _, b in ig) == (20 * q + 4 * p) + (20 * k + 4 * p) == 4352
    # 24 kernels × 2 µs + 10752 B at 1600 B/ns = 48006.72 ns; backward 10 × 2 µs + 2.72 ns
    assert ops_time_ns([o for o in row.fwd if o.name.startswith("rope_")], GPU, A100,
                       "bf16") == 48007
    assert ops_time_ns([o for o in row.ig if o.name.startswith("rope_")], GPU, A100,
                       "bf16") == 20003


def test_context_and_tensor_parallel_sizes():
    # TP 2 (2 kv heads so k splits), CP 2: n = 4 tokens of this CP rank; q 4 × 16/2 = 32,
    # k 4 × 16/2 = 32 elements; frequencies of the rank's 4 positions × 8 = 32
    model = replace(TINY, kv_heads=2)
    row = qkv_row(model, tp=2, cp=2)
    assert [(n, b) for n, b in rope_listing(row.fwd)] == [("rope_q", 32 * 4 + 32 * 4),
                                                          ("rope_k", 32 * 4 + 32 * 4)]


def test_models_without_rope_get_no_kernels():
    for pos in ("learned", "alibi"):
        row = qkv_row(replace(TINY, position_embedding=pos))
        assert rope_listing(row.fwd + row.ig) == []
    bloom = load_model(str(ROOT / "workloads/models/bloom-176b.yaml"))
    assert bloom.position_embedding == "alibi"


def test_eager_counts_only_its_own_rope():
    row = qkv_row(TINY, compile=False)
    names = [op.name for op in row.fwd + row.ig]
    assert not {"rope_q", "rope_k", "rope_q_grad", "rope_k_grad"} & set(names)
    assert names.count("rope_q_complex_mul") == 1 and names.count("rope_k_grad_complex_mul") == 1


def _layer_ns(model, gpu, cm, **kw) -> int:
    par = make_par(tp=kw.pop("tp", 1), global_batch=kw.get("micro_batch", 1), **kw)
    rows = build_model_plan(model, par).stages[0].rows()
    return sum(ops_time_ns(r.ops(), gpu, cm, "bf16") for r in rows if r.tags.get("layer") == 0)


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-70b", "nemotron-8b", "mixtral-8x7b"])
@pytest.mark.parametrize("kw", [{}, {"tp": 8, "sequence_parallel": True},
                                {"recompute": "full", "micro_batch": 2}, {"cp": 2}])
def test_unfused_never_faster_and_rope_never_free(name, kw):
    model = load_model(str(ROOT / "workloads" / "models" / f"{name}.yaml"))
    for gpu, cm in ((GPU, A100), (H100_80, H100)):
        fused = _layer_ns(model, gpu, cm, **kw)
        unfused = _layer_ns(model, gpu, cm, apply_rope_fusion=False, **kw)
        none = _layer_ns(replace(model, position_embedding="learned"), gpu, cm, **kw)
        assert none < fused < unfused


def _run(tmp_path, *extra):
    out = tmp_path / "r.json"
    code = main(["--model", str(ROOT / "tests/data/tiny-llama-2layer.yaml"), "--topo",
                 "tiny-2x2", "--tp", "1", "--global-batch", "4", *extra, "--json", str(out),
                 "--quiet"])
    return code, (json.loads(out.read_text()) if code == 0 else None)


def test_report_states_the_rope_kernels(tmp_path):
    code, rep = _run(tmp_path)
    assert code == 0
    line = next(a for a in rep["assumptions"] if a.startswith("RoPE:"))
    # 32 tokens, q 32 × 64, k the same (MHA), 32 × 16 fp32 frequencies, 2 directions
    nbytes = 2 * (2 * 2 * (2048 + 2048) + 2 * 4 * 512)
    assert line.startswith("RoPE: fused TE kernel (Megatron-Core apply_rope_fusion, the "
                           "default), q and k, fwd+bwd")
    assert f"({nbytes:,} bytes in all;" in line
    code, rep2 = _run(tmp_path, "--no-rope-fusion")
    assert code == 0
    assert any(a.startswith("RoPE: --no-rope-fusion, Megatron-Core's unfused")
               for a in rep2["assumptions"])
    assert rep2["iteration_time_s"] > rep["iteration_time_s"]


@pytest.mark.parametrize(("args", "says"), [
    (["--model", "gpt2-medium", "--tp", "1"], "learned positions"),
    (["--model", "llama3-8b", "--tp", "1", "--no-compile", "--fsdp"], "--no-compile"),
    (["--workload", str(SEED_512)], "a workload file fixes its compute times"),
    (["--workload", str(SEED_OPTABLE)], "a workload file fixes its compute times"),
    (["--workload", str(ROOT / "tests/data/aicb-zero3-2layer.csv"), "--model",
      str(ROOT / "tests/data/tiny-llama-2layer.yaml")], "without Megatron-Core's RoPE option"),
])
def test_no_rope_fusion_refused_where_it_changes_nothing(capsys, args, says):
    model_run = "--workload" not in args
    code = main([*args, "--topo", "dgx-a100-1024", "--no-rope-fusion",
                 *(["--gpus", "8", "--global-batch", "8"] if model_run else [])])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-rope-fusion" in err[0] and says in err[0]


def test_check_refuses_without_rope():
    par = make_par(global_batch=1, apply_rope_fusion=False)
    with pytest.raises(UsageError, match="no rotary embedding"):
        build_model_plan(replace(TINY, position_embedding="alibi"), par)
    assert build_model_plan(TINY, par).stages  # a RoPE model takes it

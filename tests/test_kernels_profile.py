"""simrun profile without a GPU: the kernels a model and layout need, the standard sweep, and
tables written by the writer round-trip through the reader and the compute model."""

import pytest
from conftest import WORKLOADS
from par_support import make_par

from sim.kernels.lookup import TableLookup
from sim.kernels.table import read_table, write_table
from sim.models import load_model
from sim.models.compute import H100, Timer
from sim.models.layers import transformer_layer_rows
from sim.models.vocab.dims import Dims
from sim.profiling.profile import (
    KernelSpec,
    kernels_for,
    missing_requirement,
    standard_kernels,
    table_from_times,
)
from sim.topology.gpu import GpuSpec

H100_SXM = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)


def _by_kind(specs):
    out = {}
    for s in specs:
        out.setdefault(s.kind, []).append(dict(s.shape))
    return out


def test_gpt3_tp8_kernels_are_the_layer_gemms_attention_and_elementwise():
    """GPT-3 175B, TP 8, micro-batch 1, s = 2048 (n = 2048 tokens, h = 12288): the four linear
    layers' forward, input-grad and weight-grad GEMMs (weight grad as (k, tokens, n)), the
    logits GEMMs (vocab 51200 / 8 = 6400), flash attention at 12 heads per GPU, LayerNorm,
    GeLU on 6144 columns, dropout-add, the residual-gradient add, and AdamW."""
    model = load_model(WORKLOADS / "models" / "gpt3-175b.yaml")
    par = make_par(tp=8, flash_attention=True)
    k = _by_kind(kernels_for(model, par))
    gemms = {(g["m"], g["k"], g["n"]) for g in k["gemm_bf16"]}
    n, h = 2048, 12288
    expected = set()
    for a, b in ((h, 4608), (1536, h), (h, 6144), (6144, h), (h, 6400)):
        expected |= {(n, a, b), (n, b, a), (a, n, b)}
    assert gemms == expected
    attn = {"b": 1, "s": 2048, "hq": 12, "hkv": 12, "d": 128, "causal": 1}
    assert k["attn_flash_fwd"] == [attn] and k["attn_flash_bwd"] == [attn]
    assert k["layernorm_fwd"] == [{"tokens": n, "h": h}] == k["layernorm_bwd"]
    assert k["gelu_fwd"] == [{"tokens": n, "h": 6144}] == k["gelu_bwd"]
    assert k["dropout_add"] == [{"tokens": n, "h": h}]
    assert k["add"] == [{"tokens": n, "h": h}]  # autograd's sum of the residual gradients
    assert k["adamw_fused_fp32"] == [{"params": 50_000_000}]
    assert set(k) == {"gemm_bf16", "attn_flash_fwd", "attn_flash_bwd", "layernorm_fwd",
                      "layernorm_bwd", "gelu_fwd", "gelu_bwd", "dropout_add", "add",
                      "adamw_fused_fp32"}


def test_fp8_and_backend_choose_the_kinds():
    model = load_model(WORKLOADS / "models" / "llama3-8b.yaml")
    k = _by_kind(kernels_for(model, make_par(dtype="fp8", attention_backend="fused")))
    assert "gemm_fp8" in k
    # only the output layer's GEMMs run in bf16 (Megatron-Core's output layer is outside TE)
    n, h, v = 8192, 4096, 128256
    assert sorted(tuple(g.values()) for g in k["gemm_bf16"]) == sorted(
        [(n, h, v), (n, v, h), (h, n, v)])
    assert k["attn_cudnn_fwd"] == [{"b": 1, "s": 8192, "hq": 32, "hkv": 8, "d": 128,
                                    "causal": 1}]
    assert "swiglu_fwd" in k and "rmsnorm_fwd" in k
    unfused = _by_kind(kernels_for(model, make_par(attention_backend="unfused")))
    assert not any(kind.startswith("attn_") for kind in unfused)


def test_standard_sweep_is_fixed_and_distinct():
    specs = standard_kernels()
    # 5 GEMM kinds on 4 × 10 shapes, 2 backends × 2 directions on 14 causal and 4 unmasked
    # attention shapes, 8 memory-bound kinds on 5 shapes, SwiGLU both ways on 2, AdamW on 3
    assert len(specs) == len(set(specs)) == 5 * 4 * 10 + 2 * 2 * (14 + 4) + 8 * 5 + 2 * 2 + 3
    assert specs == sorted(specs)


def test_standard_sweep_is_the_shipped_tables_grid_with_mha_twins():
    """Every GEMM and attention shape of the shipped H100 table is in the sweep (so a profile on
    another GPU can be compared row by row), attention rows in the table's column order (b, s,
    hq, hkv, d); three MHA twins of GQA rows differ from them only in the KV-head count."""
    from sim.kernels.table import shipped_table

    table = shipped_table("h100-sxm.csv")
    std = {(s.kind, s.shape) for s in standard_kernels()}
    for r in table.rows:
        if r.kind in ("gemm_bf16", "gemm_fp8") or r.kind.startswith(("attn_flash", "attn_cudnn")):
            assert (r.kind, r.shape) in std, r
    attn = {tuple(v for _, v in s.shape) for s in standard_kernels()
            if s.kind == "attn_cudnn_fwd"}
    for _b, s, hq, hkv, _d, _causal in sorted(attn):
        assert hkv <= hq and s >= 1024
    twins = {(b, s, hq, d) for b, s, hq, hkv, d, c in attn if hkv == hq and c} & {
        (b, s, hq, d) for b, s, hq, hkv, d, c in attn if hkv < hq and c}
    assert twins == {(1, 4096, 32, 128), (1, 4096, 64, 128), (1, 8192, 32, 128)}


def test_table_written_by_the_writer_round_trips_into_the_compute_model(tmp_path):
    """Distinct times (10 ms and up: slower than every kernel's peak rate, which the reader
    checks) for every kernel of a Llama-like layer, written as a profile table, read back: the
    compute model then takes every one of those kernels from it."""
    model = load_model(WORKLOADS / "models" / "llama3-8b.yaml")
    par = make_par(flash_attention=True)
    specs = kernels_for(model, par)
    times = [round(10 + 0.001 * (i + 1), 6) for i in range(len(specs))]
    table = table_from_times("H100-SXM5-80GB", specs, times, {"source": "test"})
    write_table(table, tmp_path / "p.csv")
    back = read_table(tmp_path / "p.csv")
    assert [(r.kind, r.shape, r.time_ms) for r in back.rows] == [
        (s.kind, s.shape, t) for s, t in zip(specs, times, strict=True)]
    rows = transformer_layer_rows(model, par, Dims.of(model, par), 0)
    timer = Timer(H100_SXM, H100, TableLookup(back, slots=132), "flash")
    for r in rows:
        for op in (*r.fwd, *r.ig, *r.wg):
            t, how = timer.op_ns(op, "bf16")
            if op.kernel:
                assert how == "measured shape", op.name
    assert isinstance(specs[0], KernelSpec)


def test_missing_torch_is_one_line():
    try:
        import torch  # noqa: F401  (CI has no PyTorch)
    except ImportError:
        pass
    else:
        pytest.skip("PyTorch is installed here")
    assert missing_requirement() == ("simrun profile needs PyTorch with CUDA: PyTorch is not "
                                     "installed (pip install 'simrun[profile]')")

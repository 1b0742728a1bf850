"""Transformer Engine's MXFP8 block scaling (``--fp8-recipe mxfp8``,
sim/models/features/mxfp8.py): quantise-kernel bytes of a tiny layer derived by hand (2 B read,
1 + 1 B written and one E8M0 scale byte per 32 elements in each direction: 65/16 B per
element), their roofline time, no amax machinery, Megatron-Bridge's FP8-parameter path, and
the refusal on a GPU without MXFP8 tensor cores."""

from __future__ import annotations

import pytest
from par_support import make_par

from sim.cli import main
from sim.models.compute import H100, op_time_ns
from sim.models.layers import transformer_layer_rows
from sim.models.vocab.dims import Dims
from sim.models.vocab.spec import ModelSpec
from sim.topology.gpu import GpuSpec

TINY = ModelSpec("tiny", layers=2, hidden=64, heads=4, vocab=1024, seq_len=32)
H, F, QKV = 64, 256, 3 * 64
# B200 catalogue figures (sim/data/gpus.csv): fp8 4500 dense TFLOP/s, 8000 GB/s
B200 = GpuSpec("B200", {"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0}, 180, 8000)


def _ops(rows) -> dict[str, tuple[str, int]]:
    """{op name: (phase, bytes)} of the quantisation kernels among ``rows``."""
    return {op.name: (phase, op.bytes) for r in rows
            for phase in ("fwd", "ig", "wg", "first_fwd") for op in getattr(r, phase)
            if op.kernel.startswith("fp8_")}


def _layer(tp: int = 1, sp: bool = False, **kw):
    par = make_par(tp=tp, micro_batch=2, global_batch=2, dtype="fp8", fp8_recipe="mxfp8",
                   sequence_parallel=sp, **kw)
    return transformer_layer_rows(TINY, par, Dims.of(TINY, par), 0)


def q(elements: int) -> int:
    """Bytes of one MXFP8 quantisation of ``elements`` bf16 values, both directions:
    2 (read) + 1 + 1 (FP8 copies) + 2/32 (E8M0 scales) = 65/16 B per element."""
    return 2 * elements + 2 * elements + 2 * elements // 32


def test_tp1_bytes_by_hand():
    n = 64  # 2 sequences × 32 tokens
    assert _ops(_layer()) == {
        # every operand, LayerNormLinear inputs included (the norm writes bf16: TE fuses
        # norm + MXFP8 only through cuDNN), quantised once before its GEMM
        "attn_qkv_input_mxfp8_quantize": ("fwd", q(n * H)),
        "attn_proj_input_mxfp8_quantize": ("fwd", q(n * H)),
        "mlp_fc1_input_mxfp8_quantize": ("fwd", q(n * H)),
        "mlp_fc2_input_mxfp8_quantize": ("fwd", q(n * F)),
        "attn_qkv_grad_output_mxfp8_quantize": ("ig", q(n * QKV)),
        "attn_proj_grad_output_mxfp8_quantize": ("ig", q(n * H)),
        "mlp_fc1_grad_output_mxfp8_quantize": ("ig", q(n * F)),
        "mlp_fc2_grad_output_mxfp8_quantize": ("ig", q(n * H)),
        # weights once per iteration, both directions
        "attn_qkv_weight_mxfp8_quantize": ("first_fwd", q(H * QKV)),
        "attn_proj_weight_mxfp8_quantize": ("first_fwd", q(H * H)),
        "mlp_fc1_weight_mxfp8_quantize": ("first_fwd", q(H * F)),
        "mlp_fc2_weight_mxfp8_quantize": ("first_fwd", q(F * H)),
    }
    assert q(n * H) == 65 * n * H // 16


def test_tp2_sp_gathered_operands_quantised_on_the_local_rows_without_transpose():
    n, t = 64, 2
    got = _ops(_layer(tp=2, sp=True))
    # gathered: qkv/fc1 inputs and proj/fc2 output gradients, on n/t rows; nothing in wgrad
    assert got["attn_qkv_input_mxfp8_quantize"] == ("fwd", q(n // t * H))
    assert got["mlp_fc1_input_mxfp8_quantize"] == ("fwd", q(n // t * H))
    assert got["attn_proj_grad_output_mxfp8_quantize"] == ("ig", q(n // t * H))
    assert got["mlp_fc2_grad_output_mxfp8_quantize"] == ("ig", q(n // t * H))
    # not gathered: the TP-split tensors
    assert got["mlp_fc2_input_mxfp8_quantize"] == ("fwd", q(n * F // t))
    assert got["attn_qkv_grad_output_mxfp8_quantize"] == ("ig", q(n * QKV // t))
    assert not [k for k, (ph, _) in got.items() if ph == "wg"]
    assert len(got) == 12  # no amax pass, no zeroing/scale kernels, no transposes


def _small_comms(rows) -> list[str]:
    """Rows issuing a collective of at most 4 bytes (an fp32 amax)."""
    return [r.name for r in rows for c in (r.fwd_comm, r.ig_comm)
            if c is not None and c.size_bytes <= 4]


def test_no_amax_reduction_rows():
    """Current scaling all-reduces the amax of the gathered operands in TP (4 B each);
    MXFP8 scales come from each 32-element block inside the quantise kernel."""
    par = make_par(tp=2, micro_batch=2, global_batch=2, dtype="fp8",
                   fp8_recipe="tensorwise", sequence_parallel=True)
    assert _small_comms(transformer_layer_rows(TINY, par, Dims.of(TINY, par), 0))
    rows = _layer(tp=2, sp=True)
    assert not _small_comms(rows)
    assert not [r.name for r in rows if "amax" in r.name]


def test_quantise_time_at_hbm_bandwidth():
    """Roofline: a 8192 × 8192 quantisation moves 65/16 · 2^26 B = 272,629,760 B; at B200's
    8000 GB/s × H100's memory efficiency plus one element-wise launch overhead."""
    rows = _layer()
    op = next(o for r in rows for o in r.fwd if o.name == "attn_proj_input_mxfp8_quantize")
    big = type(op)(op.name, op.kind, 0, q(8192 * 8192), kernel=op.kernel, shape=(8192, 8192))
    assert big.bytes == 272_629_760
    want = 272_629_760 / (8000e9 * H100.memory_efficiency) * 1e9 + H100.elementwise_overhead_ns
    assert op_time_ns(big, B200, H100, "fp8") == pytest.approx(want, rel=1e-12)


def test_gemms_at_the_fp8_peak():
    """Where no table answers, an MXFP8 GEMM is timed by the roofline as any FP8 GEMM: flops /
    (fp8 peak × fp8 efficiency) (the table's times carry the block-scaled ratio:
    tests/test_compute_transfer.py)."""
    rows = _layer()
    gemm = next(o for r in rows for o in r.fwd if o.kernel == "gemm")
    assert gemm.flops == 2 * 64 * 64 * QKV
    want = max(gemm.flops / (4500e12 * H100.fp8_gemm_efficiency), gemm.bytes / (
        8000e9 * H100.memory_efficiency)) * 1e9 + H100.gemm_overhead_ns
    assert op_time_ns(gemm, B200, H100, "fp8") == pytest.approx(want, rel=1e-12)


def test_fp8_param_gather_is_the_bf16_gather_then_quantise_path():
    """Megatron-Bridge's MXFP8 recipe (fp8_param_gather + reuse_grad_buf_for_mxfp8_param_ag):
    the weights are gathered in bf16 and quantised after the gather: no FP8 parameters
    (1-byte gathers), the same first-forward quantisation as without the flag."""
    with_flag = _layer(fp8_param_gather=True, distributed_optimizer=True)
    assert _ops(with_flag) == _ops(_layer(distributed_optimizer=True))
    assert not any(r.fp8_params for r in with_flag)


RUN = ["--model", "gpt2-medium", "--gpus", "8", "--tp", "2", "--global-batch", "8",
       "--dtype", "fp8", "--fp8-recipe", "mxfp8", "--quiet"]


def test_refused_on_hopper_naming_gpu_and_recipe(capsys):
    assert main([*RUN, "--topo", "dgx-h100-1024"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "--fp8-recipe" in err[0] and "mxfp8" in err[0] and "H100-SXM5-80GB" in err[0]


def test_runs_on_blackwell_and_says_so(tmp_path):
    out = tmp_path / "r.json"
    assert main([*RUN, "--topo", "dgx-b200", "--json", str(out)]) == 0
    text = out.read_text()
    assert "--fp8-recipe mxfp8: Transformer Engine quantisation" in text
    assert "65/16" in text or "4.0625 B" in text


def test_refused_before_the_memory_check(capsys):
    """Llama 3 8B DP 8 without the distributed optimizer does not fit an 80 GB H100; the
    recipe the GPU cannot run is the error, not the memory."""
    rc = main(["--model", "llama3-8b", "--topo", "dgx-h100-1024", "--gpus", "8",
               "--global-batch", "16", "--dtype", "fp8", "--fp8-recipe", "mxfp8", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "has no MXFP8 path" in err[0], err

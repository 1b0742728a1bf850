"""Transformer Engine's NVFP4 training (``--fp4-format e2m1``, sim/models/features/nvfp4.py,
nvfp4_params.py): quantise-kernel bytes of a tiny layer derived by hand (an RHT amax pass of
2 B per element, then one kernel reading 2 B and writing two FP4 copies of 0.5 B with one
E4M3 scale byte per 16 values each: 25/8 B per element), the GEMMs in fp4 at the catalogue's
fp4 peak by the transfer rule's closed form, the TP amax all-reduce of gathered operands, the
FP4 parameters, the catalogue's peaks and the refusals."""

from __future__ import annotations

import json

import pytest
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, GroupKind
from sim.kernels.gpus import find
from sim.models.compute import H100, op_time_ns
from sim.models.features import nvfp4_params
from sim.models.layers import transformer_layer_rows
from sim.models.vocab.dims import Dims
from sim.models.vocab.ops import OpKind
from sim.models.vocab.spec import ModelSpec
from sim.topology.gpu import GpuSpec

TINY = ModelSpec("tiny", layers=2, hidden=64, heads=4, vocab=1024, seq_len=32)
H, F, QKV = 64, 256, 3 * 64
N = 64  # 2 sequences × 32 tokens
# B200 catalogue figures (sim/data/gpus.csv): fp8 4500, fp4 9000 dense TFLOP/s, 8000 GB/s
B200 = GpuSpec("B200", {"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0, "fp4": 9000.0}, 180,
               8000)


def q(e: int) -> int:
    """Bytes of the fused NVFP4 quantisation of ``e`` bf16 values: read 2, write 0.5 + 0.5
    and 1/16 + 1/16 (E4M3 scales) per element = 25/8 B."""
    return 2 * e + e // 2 + e // 2 + e // 16 + e // 16


def a(e: int) -> int:
    """Bytes of an amax pass (one bf16 read)."""
    return 2 * e


def _ops(rows) -> dict[str, tuple[str, int]]:
    return {op.name: (phase, op.bytes) for r in rows
            for phase in ("fwd", "ig", "wg", "first_fwd") for op in getattr(r, phase)
            if op.kernel.startswith("nvfp4_")}


def _rows(tp: int = 1, sp: bool = False, **kw):
    par = make_par(tp=tp, micro_batch=2, global_batch=2, fp4="e2m1", sequence_parallel=sp,
                   **kw)
    return transformer_layer_rows(TINY, par, Dims.of(TINY, par), 0)


def test_tp1_bytes_by_hand():
    assert q(N * H) == 25 * N * H // 8
    want = {}
    for lin, k, n in (("attn_qkv", H, QKV), ("attn_proj", H, H), ("mlp_fc1", H, F),
                      ("mlp_fc2", F, H)):
        want[f"{lin}_input_nvfp4_rht_amax"] = ("fwd", a(N * k))
        want[f"{lin}_input_nvfp4_quantize"] = ("fwd", q(N * k))
        want[f"{lin}_grad_output_nvfp4_rht_amax"] = ("ig", a(N * n))
        want[f"{lin}_grad_output_nvfp4_quantize"] = ("ig", q(N * n))
        want[f"{lin}_weight_nvfp4_amax"] = ("first_fwd", a(k * n))  # 2D, no RHT
        want[f"{lin}_weight_nvfp4_quantize"] = ("first_fwd", q(k * n))
    assert _ops(_rows()) == want


def test_the_linears_gemms_run_in_fp4_and_nothing_else_does():
    rows = _rows()
    fp4 = {op.name for r in rows for ph in ("fwd", "ig", "wg") for op in getattr(r, ph)
           if op.dtype == "fp4"}
    assert fp4 == {"qkv", "qkv_dgrad", "qkv_wgrad", "proj", "proj_dgrad", "proj_wgrad",
                   "fc1", "fc1_dgrad", "fc1_wgrad", "fc2", "fc2_dgrad", "fc2_wgrad"}
    others = [op for r in rows for ph in ("fwd", "ig", "wg") for op in getattr(r, ph)
              if op.kind is not OpKind.GEMM and op.kind is not OpKind.ELEMENTWISE]
    assert all(op.dtype != "fp4" for op in others)  # attention stays bf16


def test_tp2_sp_gathered_operands_amax_reduced_in_tp_and_quantised_locally():
    t = 2
    rows = _rows(tp=t, sp=True)
    got = _ops(rows)
    # gathered: qkv/fc1 inputs and proj/fc2 output gradients, on N/t rows
    assert got["attn_qkv_input_nvfp4_quantize"] == ("fwd", q(N // t * H))
    assert got["mlp_fc2_grad_output_nvfp4_quantize"] == ("ig", q(N // t * H))
    # not gathered: the TP-split tensors, their amax in the linear's own phase
    assert got["mlp_fc2_input_nvfp4_rht_amax"] == ("fwd", a(N * F // t))
    assert got["attn_qkv_grad_output_nvfp4_quantize"] == ("ig", q(N * QKV // t))
    names = [r.name.removeprefix("layer0_") for r in rows]
    i = names.index("attn_qkv")
    red = rows[i - 1]  # the reduction row runs just before the column-parallel linear
    assert red.name == "layer0_attn_qkv_input_amax_reduction"
    assert [o.bytes for o in red.fwd] == [a(N // t * H)]
    c = red.fwd_comm
    assert (c.kind, c.group, c.size_bytes, c.blocking) == (CollKind.ALLREDUCE, GroupKind.TP,
                                                           8, True)
    after = rows[names.index("mlp_fc2") + 1]  # after a row-parallel linear (reverse in bwd)
    assert after.name == "layer0_mlp_fc2_grad_output_amax_reduction"
    assert [o.bytes for o in after.ig] == [a(N // t * H)] and after.ig_comm.size_bytes == 8
    assert sum(1 for r in rows if r.name.endswith("_amax_reduction")) == 4


def test_one_fp4_gemm_is_the_transfer_rules_closed_form():
    """flops / (fp4 peak × H100's measured fp8 efficiency) + H100's GEMM overhead."""
    gemm = next(o for r in _rows() for o in r.fwd if o.name == "qkv")
    assert gemm.flops == 2 * N * H * QKV and gemm.dtype == "fp4"
    want = max(gemm.flops / (9000e12 * 0.61), gemm.bytes / (8000e9 * 0.80)) * 1e9 + 6000.0
    assert op_time_ns(gemm, B200, H100, "bf16") == pytest.approx(want, rel=1e-12)
    big = type(gemm)("g", OpKind.GEMM, 2 * 8192 ** 3, 0, kernel="gemm", shape=(8192,) * 3,
                     dtype="fp4")
    # 2·8192³ FLOP at 0.61 × 9000 TFLOP/s = 200.275... µs, plus 6 µs
    assert op_time_ns(big, B200, H100, "bf16") == pytest.approx(
        2 * 8192 ** 3 / 5490e12 * 1e9 + 6000.0, rel=1e-12)


def test_quantise_time_at_hbm_bandwidth():
    op = next(o for r in _rows() for o in r.fwd if o.name == "attn_proj_input_nvfp4_quantize")
    want = q(N * H) / (8000e9 * 0.80) * 1e9 + 2000.0
    assert op_time_ns(op, B200, H100, "bf16") == pytest.approx(want, rel=1e-12)


def test_fp4_param_gather_bytes_and_the_weights_path():
    # 0.5 B per FP4 parameter (rounded up), 2 per other
    assert nvfp4_params.gather_bytes(10, 4) == 2 + 12
    assert nvfp4_params.gather_bytes(7, 7) == 4
    rows = _rows(fp4_param_gather=True, distributed_optimizer=True, dp=2)
    ops = _ops(rows)
    assert not [k for k in ops if "_weight_nvfp4_" in k]  # no first-forward quantisation
    assert sum(r.fp8_params for r in rows) == H * QKV + H * H + H * F + F * H
    rows = _rows(fp4_param_gather=True, distributed_optimizer=True, overlap_param_gather=True,
                 dp=2)
    # the column-wise copy after the gather: read and write 0.5 + 1/16 B per parameter
    assert _ops(rows)["attn_qkv_weight_nvfp4_transpose"] == ("first_fwd", 18 * H * QKV // 16)


def test_post_step_amax_reductions():
    """One fp32 per 16 × 16 tile of the whole weights, one per weight tensor."""
    comms = nvfp4_params.amax_reductions(512 * 256, 3, GroupKind.DP, 4)
    assert [c.size_bytes for c in comms] == [512 * 4, 3 * 4]
    assert all(c.blocking for c in comms)
    assert nvfp4_params.amax_reductions(512, 3, GroupKind.DP, 1) == []
    before, after = nvfp4_params.quantize_ops(1600)
    assert [o.bytes for o in before] == [2 * 1600] and [o.bytes for o in after] == [
        2 * 1600 + 800]


def test_catalogue_fp4_peaks():
    assert [find(g).peak_tflops.get("fp4") for g in ("B200", "GB200", "GB300")] == [
        9000, 10000, 15000]
    for g in ("A100-SXM4-80GB", "H100-SXM5-80GB", "H200", "MI300X"):
        assert "fp4" not in find(g).peak_tflops
    assert "third-party" in find("GB300").peaks_from


RUN = ["--model", "gpt2-medium", "--gpus", "8", "--tp", "2", "--global-batch", "8",
       "--fp4-format", "e2m1", "--quiet"]


@pytest.mark.parametrize(("extra", "says"), [
    (["--topo", "dgx-h100-1024"], "GPU H100-SXM5-80GB (family H100) has no NVFP4 path"),
    (["--topo", "dgx-b200", "--dtype", "fp8"], "mutually exclusive"),
    (["--topo", "dgx-b200", "--dtype", "fp16"], "modelled with --dtype bf16"),
    (["--topo", "dgx-b200", "--fp4-recipe", "custom"], "custom (a user-supplied"),
    (["--topo", "dgx-b200", "--fp4-param-gather"], "needs --distributed-optimizer"),
])
def test_refusals_are_one_line(capsys, extra, says):
    assert main([*RUN, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_moe_refused(capsys):
    assert main(["--model", "mixtral-8x7b", "--topo", "dgx-b200", "--gpus", "64", "--ep", "8",
                 "--global-batch", "64", "--fp4-format", "e2m1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NVFP4 with MoE layers" in err[0], err


def test_runs_on_blackwell_with_the_fp4_peak_as_mfu_reference(tmp_path):
    out = tmp_path / "r.json"
    assert main([*RUN, "--topo", "dgx-b200", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["peak_tflops_per_gpu"] == 9000
    assert any(a.startswith("--fp4-format e2m1 --fp4-recipe nvfp4") for a in rep["assumptions"])

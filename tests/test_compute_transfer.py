"""The transfer rule (sim/models/compute_transfer.py) as it runs: a GPU without its own kernel
table times each operator by H100 SXM's table, rescaled per kernel by the datasheet peaks or
HBM bandwidth, H100's fitted per-kernel overhead kept unscaled.

Expected values are worked by hand from rows of sim/data/kernels/h100-sxm.csv (named per test),
the catalogue's datasheet figures (sim/data/gpus.csv: H100 SXM bf16 989.4, fp8 1979 TFLOP/s,
3350 GB/s; GB200 bf16 2500, fp8 5000, fp4 10000, 8000 GB/s; H200 H100's peaks, 4800 GB/s) and
H100's per-kernel overheads (sim/models/compute.py H100: 6 µs GEMMs and attention, 2 µs
element-wise): t = o + (t_H100 − o) · r.
"""

from __future__ import annotations

import pytest

from sim.models.compute import H100, op_time_ns
from sim.models.compute_setup import ComputeOptions, resolve_compute, timer_for
from sim.models.vocab.ops import FPROP, Op, OpKind, elementwise, gemm
from sim.topology.gpu import GpuSpec

GB200 = GpuSpec("GB200", {"bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0, "fp4": 10000.0,
                          "tf32": 1250.0, "fp32": 90.0}, 192, 8000)
H200 = GpuSpec("H200-SXM-141GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0, "tf32": 494.7,
                                  "fp32": 66.9}, 141, 4800)
H100_SXM = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)

# h100-sxm.csv rows: gemm_bf16 512,4096,16384 0.0969 ms; gemm_fp8 (split accumulator) the same
# shape 0.05843 ms, gemm_fp8_fastacc 0.054814 ms; rmsnorm_fwd tokens 8192 h 4096 0.06138 ms;
# attn_cudnn_fwd b 1 s 4096 hq 32 hkv 8 d 128 causal 0.25938 ms
GEMM_BF16_NS, GEMM_FP8_NS, GEMM_FP8_FAST_NS = 96900.0, 58430.0, 54814.0
RMSNORM_NS, ATTN_NS = 61380.0, 259380.0


def _timer(gpu, backend="fused"):
    return timer_for(gpu, resolve_compute(gpu), backend)


def _rmsnorm() -> Op:
    return elementwise("norm", 4 * 8192 * 4096, "rmsnorm_fwd", (8192, 4096))


def test_a_bf16_gemm_on_gb200_is_h100s_table_time_rescaled_by_the_bf16_peaks():
    t, how = _timer(GB200).op_ns(gemm("g", 512, 4096, 16384), "bf16")
    # 6000 + (96900 − 6000) × 989.4 / 2500 = 6000 + 90900 × 0.39576
    assert t == pytest.approx(6000 + 35974.584) and how == "measured shape"


def test_an_elementwise_kernel_on_gb200_is_rescaled_by_the_hbm_bandwidths():
    t, _ = _timer(GB200).op_ns(_rmsnorm(), "bf16")
    # 2000 + (61380 − 2000) × 3350 / 8000 = 2000 + 59380 × 0.41875
    assert t == pytest.approx(2000 + 24865.375)


def test_fp8_gemms_by_the_fp8_peaks_and_nvfp4_ones_from_h100s_fp8_time_at_the_fp4_peak():
    timer = _timer(GB200)
    op = gemm("g", 512, 4096, 16384)
    # a dgrad-like GEMM (no role): the split-accumulator gemm_fp8 row, × 1979 / 5000
    assert timer.op_ns(op, "fp8")[0] == pytest.approx(6000 + 52430 * 0.3958)
    # a forward GEMM: TE's fast-accumulation row, as in an H100 fp8 run
    fprop = gemm("f", 512, 4096, 16384, role=FPROP)
    assert timer.op_ns(fprop, "fp8")[0] == pytest.approx(6000 + 48814 * 0.3958)
    # NVFP4: H100's fp8 time × 1979 / 10000 (sim/models/features/nvfp4.py: H100's FP8 GEMM
    # efficiency at the fp4 peak)
    assert timer.op_ns(gemm("q", 512, 4096, 16384, dtype="fp4"), "bf16")[0] == pytest.approx(
        6000 + 52430 * 0.1979)


ATTN_SHAPE = (1, 32, 8, 4096, 128, 1)  # b, hq, hkv, s, d, causal
ATTN_BWD_NS = 821970.0  # h100-sxm.csv attn_cudnn_bwd, the same shape: 0.82197 ms
GB300 = GpuSpec("GB300", {"bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0, "fp4": 15000.0,
                          "tf32": 1250.0, "fp32": 80.0}, 288, 8000)

# Exponential rates (sim/data/gpus.csv exp_tera_per_s, 1e12 exponentials/s): H100 SXM
# 16 per SM per clock × 132 SMs × 1.83 GHz = 3.865 (FlashAttention-3, section 3.2 footnote 5);
# GB200 5, GB300 10.7 (the third-party per-GPU table named in the csv rows).
# H100's share of a fused attention kernel on exponentials at d = 128 (per score m·d matrix
# FLOPs at 989.4e12/s against one exponential at 3.865e12/s):
#   forward  (m = 4):  t_mma : t_exp = 512 / 989.4 : 1 / 3.865 = 0.5174853 : 0.2587322,
#                      f = 0.2587322 / 0.7762175 = 0.3333243
#   backward (m = 10): 1280 / 989.4 : 1 / 3.865 = 1.2937134 : 0.2587322, f = 0.1666611
F_FWD, F_BWD = 0.3333243, 0.1666611
PEAK_R = 989.4 / 2500  # 0.39576, GB200 and GB300 alike


def test_attention_in_an_fp8_run_is_rescaled_by_the_bf16_peaks_and_the_exponential_rates():
    op = Op("attn", OpKind.FLASH_FWD, 1, 1, kernel="attn_fwd", shape=ATTN_SHAPE)
    t, how = _timer(GB200).op_ns(op, "fp8")
    # r = (1 − f) × 989.4 / 2500 + f × 3.865 / 5 = 0.6666757 × 0.39576 + 0.3333243 × 0.773
    #   = 0.2638436 + 0.2576597 = 0.5215033;  6000 + 253380 × 0.5215033
    assert how == "measured shape"
    assert t == pytest.approx(6000 + 253380 * 0.5215033, rel=1e-6)


def test_gb300s_doubled_exponential_rate_shortens_attention_against_gb200s_at_equal_peaks():
    fwd = Op("attn", OpKind.FLASH_FWD, 1, 1, kernel="attn_fwd", shape=ATTN_SHAPE)
    bwd = Op("attn_grad", OpKind.FLASH_BWD, 1, 1, kernel="attn_bwd", shape=ATTN_SHAPE)
    gb300, gb200 = _timer(GB300), _timer(GB200)
    # forward: 0.6666757 × 0.39576 + 0.3333243 × 3.865 / 10.7 (0.3612150) = 0.3842453
    assert gb300.op_ns(fwd, "bf16")[0] == pytest.approx(6000 + 253380 * 0.3842453, rel=1e-6)
    # backward, H100's 821970 ns: GB200 0.8333389 × 0.39576 + 0.1666611 × 0.773 = 0.4586312;
    # GB300 0.8333389 × 0.39576 + 0.1666611 × 0.3612150 = 0.3900027
    assert gb200.op_ns(bwd, "bf16")[0] == pytest.approx(6000 + 815970 * 0.4586312, rel=1e-6)
    assert gb300.op_ns(bwd, "bf16")[0] == pytest.approx(6000 + 815970 * 0.3900027, rel=1e-6)
    assert resolve_compute(GB300).transfer.exp_share(fwd, "bf16") == pytest.approx(F_FWD, 1e-6)
    assert resolve_compute(GB300).transfer.exp_share(bwd, "bf16") == pytest.approx(F_BWD, 1e-6)


def test_a_gpu_without_a_published_exponential_rate_keeps_the_peak_ratio_for_attention():
    """H200 has no exp_tera_per_s in the catalogue: its attention keeps H100's table time
    (equal bf16 peaks); a GEMM on GB200 is not split."""
    op = Op("attn", OpKind.FLASH_FWD, 1, 1, kernel="attn_fwd", shape=ATTN_SHAPE)
    assert _timer(H200).op_ns(op, "bf16")[0] == pytest.approx(ATTN_NS)
    setup = resolve_compute(H200)
    assert setup.transfer.exp_share(op, "bf16") == 0.0
    assert any("no published rate for this GPU" in n for n in setup.notes)
    g = gemm("g", 512, 4096, 16384)
    assert resolve_compute(GB200).transfer.ratio(g, "bf16", GB200) == pytest.approx(PEAK_R)


def test_a_kernel_shorter_than_the_overhead_keeps_h100s_time():
    setup = resolve_compute(GB200)
    op = _rmsnorm()
    assert setup.transfer.kernel_ns(op, "bf16", GB200, 1500.0) == 1500.0  # all fixed cost
    assert setup.transfer.kernel_ns(op, "bf16", GB200, 2000.0) == 2000.0
    assert setup.transfer.kernel_ns(op, "bf16", GB200, 4000.0) == pytest.approx(
        2000 + 2000 * 0.41875)


def test_h200_keeps_h100s_gemm_times_and_scales_memory_bound_ones():
    timer = _timer(H200)
    assert timer.op_ns(gemm("g", 512, 4096, 16384), "bf16")[0] == pytest.approx(GEMM_BF16_NS)
    # 2000 + 59380 × 3350 / 4800
    assert timer.op_ns(_rmsnorm(), "bf16")[0] == pytest.approx(2000 + 41442.291667)


def test_the_sustained_load_factor_is_not_carried_to_another_gpu():
    h100 = resolve_compute(H100_SXM)
    assert h100.sustained("bf16")[0] == 1.046 and h100.sustained("fp8")[0] == 1.065
    gb = resolve_compute(GB200)
    for dtype in ("bf16", "fp8"):
        f, note = gb.sustained(dtype)
        assert f == 1.0 and "not applied" in note and "this run's GPU is GB200" in note
    # as an H100 run would time the op before its sustained factor: the table time itself
    t_h100 = timer_for(H100_SXM, h100, "fused").op_ns(gemm("g", 512, 4096, 16384), "bf16")[0]
    assert t_h100 == pytest.approx(GEMM_BF16_NS)


def test_what_the_table_misses_is_h100s_roofline_on_the_gpus_own_peaks():
    """Below the table's smallest GEMM the roofline times it: H100's efficiencies on GB200's
    peaks, which is H100's roofline time with its FLOP term × 989.4 / 2500."""
    timer = _timer(GB200)
    op = gemm("tiny", 64, 64, 64)
    t, how = timer.op_ns(op, "bf16")
    assert how == "roofline" and t == pytest.approx(op_time_ns(op, GB200, H100, "bf16"))
    flop_h100 = op.flops / (989.4e12 * 0.69) * 1e9
    bytes_h100 = op.bytes / (3350e9 * 0.80) * 1e9
    assert t == pytest.approx(max(flop_h100 * 989.4 / 2500, bytes_h100 * 3350 / 8000) + 6000)


def test_the_report_tallies_the_transferred_table_and_states_the_rule():
    setup = resolve_compute(GB200)
    assert setup.transfer is not None and setup.lookup.table.gpu == "H100-SXM5-80GB"
    rule = next(n for n in setup.notes if "transferred from H100 SXM" in n)
    assert "t = o + (t_H100 - o) x peak_H100 / peak_GPU" in rule and "6 µs" in rule
    assert "f x exp_H100 / exp_GPU with exp 3.865 / 5 1e12 exponentials/s" in rule
    timer = timer_for(GB200, setup, "fused")
    timer.ops_ns((gemm("g", 512, 4096, 16384), gemm("tiny", 64, 64, 64)), "bf16")
    line = timer.summary()
    assert "from the kernel table of H100-SXM5-80GB, transferred to GB200" in line
    roof = op_time_ns(gemm("tiny", 64, 64, 64), GB200, H100, "bf16")
    assert timer.table_ns == pytest.approx(6000 + 35974.584) and timer.roofline_ns == roof


def test_kernel_table_none_keeps_the_roofline_and_says_so():
    setup = resolve_compute(GB200, ComputeOptions(kernel_table="none"))
    assert setup.transfer is None and setup.lookup is None
    assert any("H100's is not transferred" in n for n in setup.notes)


def test_a100_and_h100_are_not_transferred():
    assert resolve_compute(H100_SXM).transfer is None
    a100 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0}, 80, 2039)
    assert resolve_compute(a100).transfer is None and resolve_compute(a100).lookup is None


def test_a_gb200_run_reports_the_transferred_share_and_what_its_peaks_move(tmp_path):
    """A whole run on gb200-nvl72: the report's sources name the transferred table, the
    summary says whose table it is, and a peak override is said to rescale the table's GEMMs
    (not to leave them alone, as on H100)."""
    import json

    from sim.cli import main

    out = tmp_path / "r.json"
    assert main(["--model", "llama3-8b", "--topo", "gb200-nvl72", "--tp", "2", "--gpus", "8",
                 "--global-batch", "32", "--distributed-optimizer", "--set",
                 "node.gpu.peak_tflops.bf16=2000", "--quiet", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    src = rep["compute_time_sources"]
    assert set(src) == {"transferred_table", "roofline"} and src["transferred_table"] > 0.5
    lines = rep["assumptions"]
    assert any("from the kernel table of H100-SXM5-80GB, transferred to GB200" in a
               for a in lines)
    assert any(a.startswith("sustained load: not applied") for a in lines)
    (what,) = [a for a in lines if a.startswith("effect of --set")]
    assert "rescale the times of its GEMMs and attention" in what
    assert f"roofline's share ({src['roofline'] * 100:.1f}%)" in what

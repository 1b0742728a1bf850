"""The transfer rule (sim/models/compute_transfer.py) as it runs: a GPU without its own kernel
table times each operator by H100 SXM's table, rescaled per kernel by the measured achievable
matmul rates (MAMF) where both GPUs have one, else the datasheet peaks, or by the HBM
bandwidth, H100's fitted per-kernel overhead kept unscaled.

Expected values are worked by hand from rows of sim/data/kernels/h100-sxm.csv (named per test),
the catalogue's figures (sim/data/gpus.csv: H100 SXM bf16 989.4, fp8 1979 TFLOP/s, 3350 GB/s,
MAMF bf16 794.5, fp8 1402.6; GB200 bf16 2500, fp8 5000, fp4 10000, 8000 GB/s, MAMF bf16 1822,
fp8 3615.6; B200 bf16 2250, fp8 4500, fp4 9000, MAMF bf16 1745, fp8 3432.5; GB300 MAMF bf16
1769 (B300 SXM's); H200 H100's peaks, 4800 GB/s, MAMF bf16 794.5, fp8 1453.4; H100 PCIe bf16
756, fp8 1513, no MAMF; MI300X bf16 1300, fp8 2600, MAMF bf16 668.4, no fp8 MAMF) and H100's
per-kernel overheads (sim/models/compute.py H100: 6 µs GEMMs and attention, 2 µs element-wise):
t = o + (t_H100 − o) · r.
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


B200 = GpuSpec("B200", {"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0, "fp4": 9000.0,
                        "tf32": 1100.0, "fp32": 80.0}, 180, 8000)
H100_PCIE = GpuSpec("H100-PCIe-80GB", {"bf16": 756.0, "fp16": 756.0, "fp8": 1513.0,
                                       "tf32": 378.0, "fp32": 51.0}, 80, 2000)
MI300X = GpuSpec("MI300X", {"bf16": 1300.0, "fp16": 1300.0, "fp8": 2600.0}, 192, 5300)
R_GB200_BF16 = 0.4360593  # 794.5 / 1822


def test_a_bf16_gemm_on_gb200_is_h100s_table_time_rescaled_by_the_achievable_rates():
    t, how = _timer(GB200).op_ns(gemm("g", 512, 4096, 16384), "bf16")
    # 6000 + (96900 − 6000) × 794.5 / 1822 = 6000 + 90900 × 0.4360593 = 6000 + 39637.79
    assert t == pytest.approx(6000 + 39637.79, rel=1e-6) and how == "measured shape"


def test_bf16_and_fp8_gemms_on_b200_and_gb200_by_the_mamf_ratio_in_their_precision():
    op = gemm("g", 512, 4096, 16384)
    b200, gb200 = _timer(B200), _timer(GB200)
    # B200 bf16: 6000 + 90900 × 794.5 / 1745 (0.4553009) = 6000 + 41386.85
    assert b200.op_ns(op, "bf16")[0] == pytest.approx(6000 + 41386.85, rel=1e-6)
    # B200 fp8 (split-accumulator row 58430 ns): 6000 + 52430 × 1402.6 / 3432.5 (0.4086235)
    assert b200.op_ns(op, "fp8")[0] == pytest.approx(6000 + 21424.13, rel=1e-6)
    # GB200 fp8: 6000 + 52430 × 1402.6 / 3615.6 (0.3879301) = 6000 + 20339.17
    assert gb200.op_ns(op, "fp8")[0] == pytest.approx(6000 + 20339.17, rel=1e-6)
    # fp16 at the bf16 rate's fraction of the fp16 peak (equal peaks: the bf16 ratio)
    assert gb200.op_ns(op, "fp16")[0] == pytest.approx(6000 + 39637.79, rel=1e-6)


def test_gpus_without_an_achievable_rate_keep_the_peak_ratio():
    """H100 PCIe has no MAMF row: the datasheet peaks; MI300X has a bf16 rate (TunableOp on)
    but no fp8 one: its fp8 GEMMs run at its bf16 fraction (668.4 / 1300) of its fp8 peak."""
    op = gemm("g", 512, 4096, 16384)
    pcie, mi = _timer(H100_PCIE), _timer(MI300X)
    # 6000 + 90900 × 989.4 / 756 (1.3087302) = 6000 + 118963.57
    assert pcie.op_ns(op, "bf16")[0] == pytest.approx(6000 + 118963.57, rel=1e-6)
    # 6000 + 52430 × 1979 / 1513 (1.3079974) = 6000 + 68578.30
    assert pcie.op_ns(op, "fp8")[0] == pytest.approx(6000 + 68578.30, rel=1e-6)
    # MI300X bf16: 6000 + 90900 × 794.5 / 668.4 (1.1886595) = 6000 + 108049.15
    assert mi.op_ns(op, "bf16")[0] == pytest.approx(6000 + 108049.15, rel=1e-6)
    # MI300X fp8: H100 1402.6 against 2600 × 668.4 / 1300 = 1336.8 TFLOP/s:
    # 6000 + 52430 × 1402.6 / 1336.8 (1.0492220) = 6000 + 55010.71
    assert mi.op_ns(op, "fp8")[0] == pytest.approx(6000 + 55010.71, rel=1e-6)
    pcie_rule = next(n for n in resolve_compute(H100_PCIE).notes if "transferred from" in n)
    assert "x peak_H100 / peak_GPU for GEMMs" in pcie_rule
    assert "no achievable matmul rate for this GPU" in pcie_rule
    mi_rule = next(n for n in resolve_compute(MI300X).notes if "transferred from" in n)
    assert "no fp8 rate measured on this GPU: its fp8 and NVFP4 GEMMs at its bf16" in mi_rule
    assert "(tf32, fp32) x peak_H100 / peak_GPU" in mi_rule
    assert "PYTORCH_TUNABLEOP_ENABLED=1" in mi_rule


def test_a_peak_set_for_the_run_keeps_the_gpus_measured_fraction():
    """GB200 at bf16 2000 (--set): its rate is 1822 / 2500 of it, 1457.6 TFLOP/s."""
    gpu = GpuSpec("GB200", {**GB200.peak_tflops, "bf16": 2000.0}, 192, 8000)
    # 6000 + 90900 × 794.5 / 1457.6 (0.5450741) = 6000 + 49547.24
    assert _timer(gpu).op_ns(gemm("g", 512, 4096, 16384), "bf16")[0] == pytest.approx(
        6000 + 49547.24, rel=1e-6)


def test_an_elementwise_kernel_on_gb200_is_rescaled_by_the_hbm_bandwidths():
    t, _ = _timer(GB200).op_ns(_rmsnorm(), "bf16")
    # 2000 + (61380 − 2000) × 3350 / 8000 = 2000 + 59380 × 0.41875
    assert t == pytest.approx(2000 + 24865.375)


def test_fp8_gemms_by_the_fp8_rates_and_nvfp4_ones_by_the_measured_block_scaled_ratios():
    timer = _timer(GB200)
    op = gemm("g", 512, 4096, 16384)
    # a dgrad-like GEMM (no role): the split-accumulator gemm_fp8 row, × 1402.6 / 3615.6
    assert timer.op_ns(op, "fp8")[0] == pytest.approx(6000 + 52430 * 0.3879301, rel=1e-6)
    # a forward GEMM: TE's fast-accumulation row, as in an H100 fp8 run, the same ratio
    fprop = gemm("f", 512, 4096, 16384, role=FPROP)
    assert timer.op_ns(fprop, "fp8")[0] == pytest.approx(6000 + 48814 * 0.3879301, rel=1e-6)
    # NVFP4 (sim/data/blockscaled_gemm.csv, B300 per-layer totals: FP8 current 6.812, MXFP8
    # 7.161, NVFP4 3.764 ms; Blackwell Ultra fp4 / fp8 peak 3): at the MXFP8 rate (per-tensor
    # fp8 rate / (7.161 / 6.812)) × the GPU's fp4 / fp8 peak × (7.161 / 3.764 / 3 = 0.6341658):
    # the per-tensor ratio × 1.0512331 / (2 × 0.6341658) = × 3 × 3.764 / (2 × 6.812) = × 0.8288315
    # on GB200 (fp4 10000 / fp8 5000): 0.3879301 × 0.8288315 = 0.3215287
    assert timer.op_ns(gemm("q", 512, 4096, 16384, dtype="fp4"), "bf16")[0] == pytest.approx(
        6000 + 52430 * 0.3215287, rel=1e-6)
    # B200 (fp4 9000 / fp8 4500 = 2): × 1402.6 / 3432.5 = 0.4086235, × 0.8288315 = 0.3386800
    assert _timer(B200).op_ns(gemm("q", 512, 4096, 16384, dtype="fp4"), "bf16")[
        0] == pytest.approx(6000 + 52430 * 0.3386800, rel=1e-6)


R_GB300_FP8 = 0.4182745  # 1402.6 / 3353.3 (GB300's fp8 MAMF: B300 SXM's row)


def test_mxfp8_gemms_take_the_measured_multiple_of_the_per_tensor_fp8_time():
    """--fp8-recipe mxfp8: the per-tensor ratio × 7.161 / 6.812 = 1.0512331 (the fixed part o
    unscaled); delayed and tensorwise (FP8 current scaling) keep the per-tensor ratio."""
    op, fprop = gemm("g", 512, 4096, 16384), gemm("f", 512, 4096, 16384, role=FPROP)
    for gpu, r in ((GB200, 0.3879301), (GB300, R_GB300_FP8)):
        mx = timer_for(gpu, resolve_compute(gpu), "fused", "mxfp8")
        assert mx.op_ns(op, "fp8")[0] == pytest.approx(6000 + 52430 * r * 1.0512331, rel=1e-6)
        assert mx.op_ns(fprop, "fp8")[0] == pytest.approx(6000 + 48814 * r * 1.0512331,
                                                           rel=1e-6)
        for recipe in ("delayed", "tensorwise", ""):
            t = timer_for(gpu, resolve_compute(gpu), "fused", recipe)
            assert t.op_ns(op, "fp8")[0] == pytest.approx(6000 + 52430 * r, rel=1e-6)
    # GB200: 0.3879301 × 1.0512331 = 0.4078049 → 27381.2 ns; GB300: 0.4397040 → 29053.7 ns
    mx = timer_for(GB200, resolve_compute(GB200), "fused", "mxfp8")
    assert mx.op_ns(op, "fp8")[0] == pytest.approx(27381.2, abs=0.1)
    # a bf16 GEMM of an mxfp8 run (the output layer) and its attention do not move
    bf = _timer(GB200)
    assert mx.op_ns(gemm("o", 512, 4096, 16384, dtype="bf16"), "fp8") == bf.op_ns(
        gemm("o", 512, 4096, 16384, dtype="bf16"), "fp8")


def test_nvfp4_on_gb300_runs_at_1_902_times_its_mxfp8_rate():
    """GB300 (fp4 15000 / fp8 5000 = 3, the measuring GPU's ratio): NVFP4 at 3 × 0.6341658 =
    1.9024973 × the MXFP8 rate, i.e. the per-tensor fp8 time × 3.764 / 6.812 = 0.5525543;
    GB200 (ratio 2): 1.2683316 × its MXFP8 rate."""
    q = gemm("q", 512, 4096, 16384, dtype="fp4")
    t = _timer(GB300).op_ns(q, "bf16")[0]
    assert t == pytest.approx(6000 + 52430 * R_GB300_FP8 * 0.5525543, rel=1e-6)
    assert t == pytest.approx(18117.6, abs=0.1)
    mx = timer_for(GB300, resolve_compute(GB300), "fused", "mxfp8")
    t_mx = mx.op_ns(gemm("g", 512, 4096, 16384), "fp8")[0]
    assert (t_mx - 6000) / (t - 6000) == pytest.approx(1.9024973, rel=1e-6)
    mx = timer_for(GB200, resolve_compute(GB200), "fused", "mxfp8")
    t_mx = mx.op_ns(gemm("g", 512, 4096, 16384), "fp8")[0]
    t = _timer(GB200).op_ns(q, "bf16")[0]
    assert (t_mx - 6000) / (t - 6000) == pytest.approx(1.2683316, rel=1e-6)


def test_the_block_scaled_ratios_come_from_the_b300_table_and_are_stated_in_the_rule():
    from sim.models.blockscaled import measured
    from sim.models.compute_transfer import rule

    b = measured()
    assert b.mxfp8_time == pytest.approx(7.161 / 6.812)
    assert b.nvfp4_efficiency == pytest.approx(7.161 / 3.764 / 3)
    assert b.peak_ratio == 3.0 and b.gpu == "NVIDIA B300 SXM6 AC"
    text = rule()
    for part in ("MXFP8 (--fp8-recipe mxfp8) r_fp8 x 1.0512", "peak_fp8 x 0.634",
                 "one measurement on one NVIDIA B300 SXM6 AC", "d0067d0da6cb",
                 "gemm_profiling.rst lines 144-148", "--pre-quantize",
                 "MXFP8 7.161 ms / FP8 current 6.812 ms", "1.902x the MXFP8 rate",
                 "assumed for every data-center Blackwell GPU", "sim/data/blockscaled_gemm.csv"):
        assert part in text, part


def test_a_malformed_block_scaled_table_is_refused_naming_line_and_field():
    from sim.errors import InputError
    from sim.models.blockscaled import parse

    head = "# c\ngpu,peaks_of,precision,fprop_ms,dgrad_ms,wgrad_ms,total_ms\n"
    rows = ["B300,GB300,fp8_current,1,1,1,6.812", "B300,GB300,mxfp8,1,1,1,7.161",
            "B300,GB300,nvfp4,1,1,1,3.764"]
    assert parse(head + "\n".join(rows)).mxfp8_time == pytest.approx(7.161 / 6.812)
    with pytest.raises(InputError, match=r"blockscaled_gemm.csv:4: total_ms: not a number"):
        parse(head + "\n".join([rows[0], rows[1].replace("7.161", "x"), rows[2]]))
    with pytest.raises(InputError, match=r"precision: no row for nvfp4"):
        parse(head + "\n".join(rows[:2]))
    with pytest.raises(InputError, match=r"peaks_of: 'H100-SXM' is not a catalogue GPU"):
        parse(head + "\n".join(r.replace("GB300", "H100-SXM") for r in rows))


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
# the tensor-core part by the bf16 achievable rates: GB200 794.5 / 1822 = 0.4360593, GB300
# (B300 SXM's rate) 794.5 / 1769 = 0.4491238


def test_attention_in_an_fp8_run_is_rescaled_by_the_bf16_rates_and_the_exponential_rates():
    op = Op("attn", OpKind.FLASH_FWD, 1, 1, kernel="attn_fwd", shape=ATTN_SHAPE)
    t, how = _timer(GB200).op_ns(op, "fp8")
    # r = (1 − f) × 794.5 / 1822 + f × 3.865 / 5 = 0.6666757 × 0.4360593 + 0.3333243 × 0.773
    #   = 0.2907101 + 0.2576597 = 0.5483698;  6000 + 253380 × 0.5483698
    assert how == "measured shape"
    assert t == pytest.approx(6000 + 253380 * 0.5483698, rel=1e-6)


def test_gb300s_doubled_exponential_rate_shortens_attention_against_gb200s():
    fwd = Op("attn", OpKind.FLASH_FWD, 1, 1, kernel="attn_fwd", shape=ATTN_SHAPE)
    bwd = Op("attn_grad", OpKind.FLASH_BWD, 1, 1, kernel="attn_bwd", shape=ATTN_SHAPE)
    gb300, gb200 = _timer(GB300), _timer(GB200)
    # forward: 0.6666757 × 0.4491238 + 0.3333243 × 3.865 / 10.7 (0.3612150) = 0.4198216
    assert gb300.op_ns(fwd, "bf16")[0] == pytest.approx(6000 + 253380 * 0.4198216, rel=1e-6)
    # backward, H100's 821970 ns: GB200 0.8333389 × 0.4360593 + 0.1666611 × 0.773 = 0.4922142;
    # GB300 0.8333389 × 0.4491238 + 0.1666611 × 0.3612150 = 0.4344728
    assert gb200.op_ns(bwd, "bf16")[0] == pytest.approx(6000 + 815970 * 0.4922142, rel=1e-6)
    assert gb300.op_ns(bwd, "bf16")[0] == pytest.approx(6000 + 815970 * 0.4344728, rel=1e-6)
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
    assert resolve_compute(GB200).transfer.ratio(g, "bf16", GB200) == pytest.approx(
        R_GB200_BF16, rel=1e-6)


def test_a_kernel_shorter_than_the_overhead_keeps_h100s_time():
    setup = resolve_compute(GB200)
    op = _rmsnorm()
    assert setup.transfer.kernel_ns(op, "bf16", GB200, 1500.0) == 1500.0  # all fixed cost
    assert setup.transfer.kernel_ns(op, "bf16", GB200, 2000.0) == 2000.0
    assert setup.transfer.kernel_ns(op, "bf16", GB200, 4000.0) == pytest.approx(
        2000 + 2000 * 0.41875)


def test_h200_keeps_h100s_bf16_gemm_times_and_scales_memory_bound_ones():
    """bf16: H200's rate is H100's row ('H200 is the same'); fp8: measured on H200, 1453.4."""
    timer = _timer(H200)
    assert timer.op_ns(gemm("g", 512, 4096, 16384), "bf16")[0] == pytest.approx(GEMM_BF16_NS)
    # 6000 + 52430 × 1402.6 / 1453.4 (0.9650475) = 6000 + 50597.44
    assert timer.op_ns(gemm("g", 512, 4096, 16384), "fp8")[0] == pytest.approx(
        6000 + 50597.44, rel=1e-6)
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
    assert "t = o + (t_H100 - o) x MAMF_H100 / MAMF_GPU" in rule and "6 µs" in rule
    assert "stas00/ml-engineering 744d01e1" in rule
    assert "Maximum Achievable Matmul FLOPS comparison table" in rule
    assert "H100 SXM bf16 794.5, fp8 1402.6, GB200 bf16 1822, fp8 3615.6" in rule
    assert "MXFP8 (--fp8-recipe mxfp8) r_fp8 x 1.0512" in rule
    assert "f x exp_H100 / exp_GPU with exp 3.865 / 5 1e12 exponentials/s" in rule
    gb300 = next(n for n in resolve_compute(GB300).notes if "transferred from" in n)
    assert "GB300 bf16 1769, fp8 3353.3 (ASSUMED, not measured on GB300" in gb300
    assert "NVIDIA B300 SXM rows stand for it" in gb300
    timer = timer_for(GB200, setup, "fused")
    timer.ops_ns((gemm("g", 512, 4096, 16384), gemm("tiny", 64, 64, 64)), "bf16")
    line = timer.summary()
    assert "from the kernel table of H100-SXM5-80GB, transferred to GB200" in line
    roof = op_time_ns(gemm("tiny", 64, 64, 64), GB200, H100, "bf16")
    assert timer.table_ns == pytest.approx(6000 + 39637.79, rel=1e-6)
    assert timer.roofline_ns == roof


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

"""Per-op predictions from the shipped H100 table: equal to the table at measured shapes,
monotone between them, the stated behaviour outside the measured range, and the roofline
re-derived from the table within ±10% of it on large GEMMs."""

import math

import pytest

from sim.kernels.derive import derive
from sim.kernels.lookup import BYTES_PER_ELEMENT, EXACT, HELD, INTERPOLATED, TableLookup
from sim.kernels.table import shipped_table
from sim.models.compute import H100, op_time_ns
from sim.models.vocab.ops import gemm
from sim.topology.gpu import GpuSpec

H100_SXM = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
TABLE = shipped_table("h100-sxm.csv")


@pytest.fixture(scope="module")
def lk():
    return TableLookup(TABLE, slots=132)


def test_gemms_equal_the_table_at_measured_shapes_and_their_transposes(lk):
    for r in TABLE.rows:
        if r.kind.startswith("gemm_"):
            dt = r.kind.split("_")[1]
            m, k, n = r.get("m"), r.get("k"), r.get("n")
            for shape in ((m, k, n), (n, k, m)):
                hit = lk.gemm_ns(dt, *shape, kind=r.kind)
                assert hit.how == EXACT and hit.time_ns == pytest.approx(r.time_ms * 1e6)


def test_a_gemm_kind_the_table_lacks_is_answered_by_the_dtypes_rows(lk):
    """A table without fast-accumulation or fp32-accumulation rows (an older or a user's
    table) times those GEMMs by its plain ``gemm_<dtype>`` rows (the report says so)."""
    base = next(r for r in TABLE.rows if r.kind == "gemm_fp8")
    shape = (base.get("m"), base.get("k"), base.get("n"))
    no_fast = TableLookup(type(TABLE)(TABLE.gpu, [r for r in TABLE.rows
                                                  if r.kind != "gemm_fp8_fastacc"]), slots=132)
    assert not no_fast.has("gemm_fp8_fastacc") and lk.has("gemm_fp8_fastacc")
    assert no_fast.gemm_ns("fp8", *shape, kind="gemm_fp8_fastacc").time_ns == pytest.approx(
        base.time_ms * 1e6)
    fast = next(r for r in TABLE.rows if r.kind == "gemm_fp8_fastacc" and r.shape == base.shape)
    assert lk.gemm_ns("fp8", *shape, kind="gemm_fp8_fastacc").time_ns == pytest.approx(
        fast.time_ms * 1e6)


def test_attention_and_memory_kernels_equal_the_table_at_measured_shapes(lk):
    from sim.kernels.attention import AttnShape

    n = 0
    for r in TABLE.rows:
        if r.kind.startswith("attn_"):
            _, backend, way = r.kind.split("_")
            sh = AttnShape(r.get("b"), r.get("hq"), r.get("s"), r.get("d"),
                           bool(r.get("causal")), way == "bwd", hkv=r.get("hkv"))
            hit = lk.attention_ns(backend, sh)
        elif r.kind in BYTES_PER_ELEMENT and r.kind != "adamw_fused_fp32":
            shape = (r.get("tokens"), r.get("h"))
            hit = lk.memory_ns(r.kind, shape[0] * shape[1], shape)
        elif r.kind == "adamw_fused_fp32":
            hit = lk.memory_ns(r.kind, r.get("params"))
        else:
            continue
        n += 1
        assert hit.how == EXACT and hit.time_ns == pytest.approx(r.time_ms * 1e6), r
    # attention (flash and cuDNN on 14 causal and 4 unmasked shapes, memory-efficient on 8),
    # norms / activations / adds (7 kinds on 5 shapes), AdamW
    assert n == 4 * (14 + 4) + 2 * 8 + 7 * 5 + 3


def test_gemm_interpolates_monotonically_along_a_measured_column(lk):
    """qkv-like (m, 12288, 4608): measured at m = 2048 and 8192; in between the time rises
    with m and the achieved FLOP/s stays between the two measured ones."""
    t0, t1 = lk.gemm_ns("bf16", 2048, 12288, 4608), lk.gemm_ns("bf16", 8192, 12288, 4608)
    r0, r1 = 2 * 2048 * 12288 * 4608 / t0.time_ns, 2 * 8192 * 12288 * 4608 / t1.time_ns
    prev = t0.time_ns
    for m in range(2048 + 256, 8192, 256):
        hit = lk.gemm_ns("bf16", m, 12288, 4608)
        assert hit.how == INTERPOLATED
        assert prev < hit.time_ns < t1.time_ns
        rate = 2 * m * 12288 * 4608 / hit.time_ns
        assert min(r0, r1) - 1e-9 <= rate <= max(r0, r1) + 1e-9
        prev = hit.time_ns


def test_gemm_curve_is_monotone_in_flops_and_never_extrapolates(lk):
    """Unmeasured shapes use the efficiency curve in log-FLOPs: time rises with the size;
    below the smallest measured GEMM (1.07 GFLOP) the table gives no answer (roofline); above
    the largest (17.6 TFLOP) the largest octave's rate is held."""
    prev = 0.0
    for m in (1100, 1500, 2500, 3000, 5000, 7000, 12000, 20000):
        hit = lk.gemm_ns("bf16", m, m, m + 1)
        assert hit.how == INTERPOLATED and hit.time_ns > prev
        prev = hit.time_ns
    assert lk.gemm_ns("bf16", 256, 512, 512) is None
    big = lk.gemm_ns("bf16", 65536, 20000, 20000)
    assert big.how == HELD
    largest = max(TABLE.of_kind("gemm_bf16"), key=lambda r: r.get("m") * r.get("k") * r.get("n"))
    assert (largest.get("m"), largest.get("k")) == (32768, 16384)  # alone in its octave
    rate = 2 * 32768 * 16384 * 16384 / (largest.time_ms * 1e6)
    assert big.time_ns == pytest.approx(2 * 65536 * 20000 * 20000 / rate)


def test_memory_kernels_interpolate_in_log_bytes(lk):
    """layernorm_fwd measured at 8.4M, 33.6M (two shapes), 25.2M and 100.7M elements: between
    25.2M and 33.6M the bandwidth is interpolated; times rise with size; below 8.4M: None."""
    t_lo = lk.memory_ns("layernorm_fwd", 2048 * 12288)
    t_hi = lk.memory_ns("layernorm_fwd", 8192 * 4096)
    mid = lk.memory_ns("layernorm_fwd", 28_000_000)
    assert mid.how == INTERPOLATED and t_lo.time_ns < mid.time_ns < t_hi.time_ns
    assert lk.memory_ns("layernorm_fwd", 1000 * 1024) is None
    assert lk.memory_ns("rmsnorm_bwd", 8192 * 4096) is None  # not measured: roofline


def test_roofline_and_table_agree_within_10_percent_on_large_gemms():
    """Every measured GEMM of ≥ 1 TFLOP (bf16 and fp8): the H100 roofline within ±10%."""
    worst = 0.0
    for kind, dt, eg in (("gemm_bf16", "bf16", 2), ("gemm_fp8", "fp8", 1)):
        for r in TABLE.of_kind(kind):
            m, k, n = r.get("m"), r.get("k"), r.get("n")
            if 2 * m * k * n < 1e12:
                continue
            ratio = op_time_ns(gemm("g", m, k, n, eg), H100_SXM, H100, dt) / (r.time_ms * 1e6)
            worst = max(worst, abs(math.log(ratio)))
            assert 0.90 <= ratio <= 1.10, (kind, m, k, n, ratio)
    assert worst > 0.05  # the spread is real: one efficiency cannot fit every shape exactly


def test_h100_roofline_constants_are_the_ones_derived_from_the_table():
    d = derive(TABLE, H100_SXM.peak_tflops, H100_SXM.hbm_GBps)
    assert H100.gemm_efficiency == pytest.approx(d["gemm_efficiency"], abs=0.005)
    assert H100.fp8_gemm_efficiency == pytest.approx(d["fp8_gemm_efficiency"], abs=0.005)
    assert H100.gemm_overhead_ns == pytest.approx(d["gemm_overhead_ns"], rel=0.1)
    assert H100.flash_fwd_efficiency == pytest.approx(d["flash_fwd_efficiency"], abs=0.005)
    assert H100.flash_bwd_efficiency == pytest.approx(d["flash_bwd_efficiency"], abs=0.005)
    assert H100.memory_efficiency == pytest.approx(d["memory_efficiency"], abs=0.005)

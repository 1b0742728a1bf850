"""Workload files measured on another GPU: compute times scaled by the stated rule (the compute
models' time ratio of a 8192³ bf16 GEMM), or by --compute-scale, or refused."""

import pytest

from sim.errors import UsageError
from sim.models.compute_setup import scale_workload, source_compute_scale
from sim.program.workload import Layer, Phase, Workload, WorkloadHeader
from sim.topology.gpu import GpuSpec

H100_SXM = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
A100_80 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)
UNKNOWN = GpuSpec("test-gpu", {"bf16": 100.0}, 16, 1000)


def test_a100_file_on_h100_is_scaled_by_the_reference_gemm_ratio():
    """H100: the 8192³ bf16 GEMM measured (1.58405 ms, shipped table); A100: its roofline,
    2·8192³ / (0.69 · 312 TFLOP/s) + 4 µs = 5.111 ms (η_gemm 0.69: the Table 4 fit,
    sim/models/compute.py). Ratio 0.3099."""
    f, note = source_compute_scale("A100-SXM4-80GB", H100_SXM)
    a100_ns = 2 * 8192**3 / (0.69 * 312e12) * 1e9 + 4000
    assert f == pytest.approx(1.58405e6 / a100_ns, rel=1e-9)
    assert f == pytest.approx(0.3099, abs=1e-4)
    assert "A100-SXM4-80GB (the file's gpu header field) scaled by 0.3099" in note
    f2, note2 = source_compute_scale(None, H100_SXM, source_gpu="A100-SXM4-40GB")
    assert f2 == pytest.approx(f) and "(--source-gpu)" in note2


def test_same_gpu_or_unnamed_keeps_the_times():
    f, note = source_compute_scale("A100-SXM4-80GB", A100_80)
    assert f == 1.0 and note == ("compute times as in the workload file, measured on "
                                 "A100-SXM4-80GB (the file's gpu header field), the topology's "
                                 "GPU")
    f, note = source_compute_scale(None, H100_SXM)
    assert f == 1.0 and "does not name the GPU" in note and "--source-gpu" in note
    assert source_compute_scale(None, UNKNOWN) == (1.0, None)


def test_refusals_and_the_explicit_factor():
    with pytest.raises(UsageError, match="not in the GPU catalogue"):
        source_compute_scale("V100", H100_SXM)
    f, note = source_compute_scale("A100-SXM4-80GB", UNKNOWN)
    assert f == 1.0 and note.startswith("WARNING: compute times measured on A100-SXM4-80GB")
    assert "--compute-scale" in note
    f, note = source_compute_scale("A100-SXM4-80GB", UNKNOWN, compute_scale=0.5)
    assert f == 0.5 and "--compute-scale" in note
    with pytest.raises(UsageError):
        source_compute_scale(None, H100_SXM, compute_scale=0.0)


def test_scale_workload_multiplies_every_compute_time():
    wl = Workload("w", "aicb", WorkloadHeader(), [
        Layer("a", forward=Phase(1000), input_grad=Phase(2001), weight_grad=Phase(3))])
    out = scale_workload(wl, 0.5)
    x = out.layers[0]
    assert (x.forward.compute_ns, x.input_grad.compute_ns, x.weight_grad.compute_ns) == (
        500, 1000, 2)
    assert scale_workload(wl, 1.0) is wl

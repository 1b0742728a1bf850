"""GPU families: the catalogue, how a topology's GPU resolves to a compute model (measured
table, datasheet-only, unknown), and what model-driven reports say about it."""

from dataclasses import replace

import pytest
from conftest import WORKLOADS
from par_support import make_par

from sim.errors import UsageError
from sim.kernels.gpus import catalog, describe, find
from sim.models import load_model
from sim.models.compute import A100, GENERIC, H100
from sim.models.compute_setup import ComputeOptions, resolve_compute
from sim.models.generator import generate
from sim.topology.gpu import GpuSpec

H100_SXM = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
A100_80 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)
UNKNOWN = GpuSpec("test-gpu", {"bf16": 100.0}, 16, 1000)


def test_catalogue_lists_the_families_with_sources():
    names = [g.name for g in catalog()]
    assert names == ["A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-80GB", "H100-SXM5-80GB",
                     "H100-PCIe-80GB", "H200-SXM-141GB", "B200", "GB200", "GB300", "MI300X"]
    for g in catalog():
        assert g.status in ("measured", "datasheet-only") and g.source and g.nvlink
        assert g.peak_tflops["bf16"] > 0 and g.hbm_GBps > 0 and g.hbm_GB > 0
        assert (g.status == "measured") == bool(g.kernel_table)
    assert [g.name for g in catalog() if g.status == "measured"] == ["H100-SXM5-80GB"]
    assert find("H200").hbm_GB == 141 and find("h100 80gb hbm3").name == "H100-SXM5-80GB"
    assert find("B200").sms is None  # not found in a published source: left empty


def test_known_gpus_get_their_family_and_h100_its_measured_table():
    s = resolve_compute(H100_SXM)
    assert s.cm is H100 and s.lookup is not None and s.entry.status == "measured"
    assert resolve_compute(H100_SXM, ComputeOptions(kernel_table="none")).lookup is None
    a = resolve_compute(A100_80)
    assert a.cm is A100 and a.lookup is None and a.notes == []
    b = resolve_compute(GpuSpec("B200", {"bf16": 2250.0}, 180, 8000))
    # no table measured on B200: H100's measured efficiencies transferred, the rule printed
    assert replace(b.cm, family="x") == replace(H100, family="x")
    assert "transferred from H100" in b.cm.family and "not measured" in b.cm.family
    assert any("transferred from H100 SXM" in n and "MAMF_H100 / MAMF_GPU" in n for n in b.notes)


def test_catalogue_achievable_matmul_rates():
    """mamf_bf16 / mamf_fp8 as read in stas00/ml-engineering 744d01e1, compute/accelerator/
    README.md 'Maximum Achievable Matmul FLOPS comparison table' (TFLOP/s)."""
    want = {"H100-SXM5-80GB": {"bf16": 794.5, "fp8": 1402.6},
            "H200-SXM-141GB": {"bf16": 794.5, "fp8": 1453.4},
            "B200": {"bf16": 1745.0, "fp8": 3432.5}, "GB200": {"bf16": 1822.0, "fp8": 3615.6},
            "GB300": {"bf16": 1769.0, "fp8": 3353.3}, "MI300X": {"bf16": 668.4}}
    assert {g.name: g.mamf_tflops for g in catalog() if g.mamf_tflops} == want
    assert find("GB300").mamf_from.startswith("ASSUMED") and "B300 SXM" in find("GB300").mamf_from
    assert "PYTORCH_TUNABLEOP_ENABLED=1" in find("MI300X").mamf_from
    assert "'H200 is the same'" in find("H200").mamf_from


def test_unknown_gpu_is_refused_or_needs_compute_efficiency():
    with pytest.raises(UsageError) as e:
        resolve_compute(UNKNOWN)
    msg = str(e.value)
    assert "test-gpu" in msg and "H100-SXM5-80GB" in msg and "--compute-efficiency" in msg
    s = resolve_compute(UNKNOWN, ComputeOptions(compute_efficiency=0.6))
    assert s.cm.gemm_efficiency == 0.6
    assert s.cm.flash_fwd_efficiency == pytest.approx(GENERIC.flash_fwd_efficiency * 0.6 / 0.75)
    assert s.notes[0].startswith("WARNING: GPU test-gpu is not in the GPU catalogue")
    with pytest.raises(UsageError, match="fraction"):
        resolve_compute(UNKNOWN, ComputeOptions(compute_efficiency=1.5))


def test_a_gpu_declared_in_its_topology_uses_the_declared_efficiency():
    declared = resolve_compute(replace(UNKNOWN, compute_efficiency=0.75))
    assert replace(declared.cm, family="x") == replace(GENERIC, family="x")
    assert "test-gpu" in declared.cm.family and "not measured" in declared.cm.family
    assert declared.notes[0].startswith("GPU test-gpu is not in the GPU catalogue: declared in "
                                        "the topology")
    half = resolve_compute(replace(UNKNOWN, compute_efficiency=0.375))
    assert half.cm.gemm_efficiency == 0.375
    assert half.cm.flash_bwd_efficiency == pytest.approx(GENERIC.flash_bwd_efficiency / 2)
    flag = resolve_compute(replace(UNKNOWN, compute_efficiency=0.75),
                           ComputeOptions(compute_efficiency=0.5))
    assert flag.cm.gemm_efficiency == 0.5 and flag.notes[0].startswith("WARNING")


def _program(gpu):
    model = load_model(WORKLOADS / "models" / "gpt3-175b.yaml")
    par = make_par(tp=8, pp=8, dp=1, micro_batch=1, global_batch=8, flash_attention=True)
    return generate(model, par, gpu)


def test_h100_report_says_measured_and_how_much_came_from_the_table():
    text = "\n".join(_program(H100_SXM).assumptions)
    assert "GPU H100-SXM5-80GB (measured: kernel table sim/data/kernels/h100-sxm.csv" in text
    assert "kernel table sim/data/kernels/h100-sxm.csv: 334 kernels" in text
    share = [a for a in _program(H100_SXM).assumptions if a.startswith("compute time per")]
    assert len(share) == 1 and "from the kernel table" in share[0] and "roofline" in share[0]


def test_a100_report_says_datasheet_only_and_roofline_only():
    notes = _program(A100_80).assumptions
    gpu = [a for a in notes if a.startswith("GPU A100-SXM4-80GB")]
    assert len(gpu) == 1 and gpu[0].startswith("GPU A100-SXM4-80GB (datasheet-only: no kernel "
                                               "table measured on it")
    assert "peaks from vendor datasheet" in gpu[0]
    assert "compute time: all from the roofline" in "\n".join(notes)
    assert not any(a.startswith("compute time per iteration") for a in notes)


def test_every_family_says_measured_or_datasheet_only_and_what_its_peaks_rest_on():
    for g in catalog():
        line = describe(g)
        assert line.startswith(f"GPU {g.name} ({g.status}:")
        assert g.peaks_from in line
    for name in ("B200", "GB200", "MI300X"):
        g = find(name)
        assert g.peaks_from == "third-party summary (vendor datasheet not found)"
        assert g.source.startswith("VENDOR DATASHEET NOT FOUND")


def test_transfer_rule_rescales_h100_by_datasheet_peaks_and_bandwidth():
    """The stated rule, by hand: a compute-bound GEMM keeps H100's fraction of peak, so its
    time (less the fixed per-kernel overhead) scales by peak_H100 / peak_GPU; an element-wise
    kernel keeps H100's fraction of HBM bandwidth, so it scales by HBM_H100 / HBM_GPU."""
    from sim.models.compute import op_time_ns
    from sim.models.vocab.ops import Op, OpKind, gemm

    gb300 = find("GB300")
    assert gb300.hbm_GB == 288 and gb300.family == "B200"
    assert find("B200").hbm_GB == 180 and find("GB200").hbm_GB == 192
    b200 = GpuSpec("B200", {"bf16": 2250.0, "fp8": 4500.0}, 180, 8000)
    h100 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp8": 1979.0}, 80, 3350)
    cm = resolve_compute(b200).cm
    big = gemm("big", 16384, 16384, 16384)
    for dt, ph, pb in (("bf16", 989.4, 2250.0), ("fp8", 1979.0, 4500.0)):
        t_h = op_time_ns(big, h100, H100, dt) - H100.gemm_overhead_ns
        t_b = op_time_ns(big, b200, cm, dt) - H100.gemm_overhead_ns
        assert t_b == pytest.approx(t_h * ph / pb, rel=1e-9)
    add = Op("add", OpKind.ELEMENTWISE, 0, 1 << 30)
    t_h = op_time_ns(add, h100, H100, "bf16") - H100.elementwise_overhead_ns
    t_b = op_time_ns(add, b200, cm, "bf16") - H100.elementwise_overhead_ns
    assert t_b == pytest.approx(t_h * 3350 / 8000, rel=1e-9)

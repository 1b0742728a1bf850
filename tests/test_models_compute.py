"""Roofline compute model: per-layer times of the 22B GPT against Korthikanti et al. Table 4
(simulated as the 2022 Megatron-LM ran it, sim/validation/table4.py), the A100 GEMM efficiency
fitted to them, and the physical shape of the efficiency curves."""

from __future__ import annotations

import pytest

from sim.errors import UsageError
from sim.models.compute import (
    A100,
    H100,
    gemm_efficiency,
    op_time_ns,
)
from sim.models.compute_setup import resolve_compute
from sim.models.vocab.ops import Op, OpKind, gemm
from sim.topology.gpu import GpuSpec
from sim.validation import table4

# docs/hardware.md: A100 SXM 80 GB: 312 TFLOP/s BF16 dense, 2.039 TB/s HBM; H100 SXM: 989.4 BF16,
# 1979 FP8, 3.35 TB/s.
A100_80 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)
H100_80 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)

# the residuals of the fit (scripts/calibrate_a100.py, shipped η_gemm 0.69) are −2.1%…+1.5%
TOLERANCE = 0.03


@pytest.fixture(scope="module")
def shipped_table():
    """{configuration: (model fwd ms, model bwd ms)} of the shipped A100 model."""
    return {label: (mf, mb) for label, _, _, mf, mb in table4.table()}


@pytest.mark.parametrize("label, sp, recompute, fwd_ms, bwd_ms", table4.TABLE_4,
                         ids=[c[0] for c in table4.TABLE_4])
def test_22b_layer_times_match_table_4(shipped_table, label, sp, recompute, fwd_ms, bwd_ms):
    fwd, bwd = shipped_table[label]
    assert fwd == pytest.approx(fwd_ms, rel=TOLERANCE), label
    assert bwd == pytest.approx(bwd_ms, rel=TOLERANCE), label


def test_shipped_a100_gemm_efficiency_is_the_table_4_fit():
    """The calibration cannot go stale silently: the shipped value is the fit, rounded to 0.01
    (scripts/calibrate_a100.py; about 2 s), and below the best published A100 bf16 matmul
    (271.2 / 312 TFLOP/s, stas00/ml-engineering compute/accelerator/README.md, 744d01e1)."""
    fit = table4.fit_gemm_efficiency()
    assert round(fit, 2) == A100.gemm_efficiency
    assert A100.gemm_efficiency < 271.2 / 312


def test_table_4_layer_is_read_off_the_timeline_of_the_middle_layer():
    """The forward of a layer without sequence parallelism, recomputation or overlap is its
    compute spans plus its two blocking all-reduces (Megatron's f/g operators): nothing else
    lies between one layer's first span and the next layer's."""
    res = table4.simulate_row(False, "none")
    fwd, _ = table4.layer_times_ns(res.spans)
    mine = [s for s in res.spans if s.label.startswith(f"layer{table4.LAYER}_")
            and s.kind in ("forward", "comm") and ".input_grad" not in s.label
            and ".weight_grad" not in s.label]
    assert sum(1 for s in mine if s.kind == "comm") == 2
    assert fwd == sum(s.end_ns - s.start_ns for s in mine)


def test_table_4_baseline_forward_is_the_operators_plus_two_isolated_all_reduces():
    """The same forward from the product's functions directly: the generator's layer operators
    timed by the A100 roofline (``ops_time_ns``) plus two 96 MiB all-reduces in the 8-GPU TP
    group, each costed by the network model's ``isolated`` (what the engine merges with
    compute for TP collectives)."""
    from sim import api
    from sim.comm import CollKind, GroupKind
    from sim.models.compute import ops_time_ns
    from sim.models.layers import Dims, transformer_layer_rows
    from sim.network.base import CommRequest
    from sim.parallel.config import Training
    from sim.scenario import steps

    training = Training(global_batch=4, micro_batch=4, recompute="none", dtype="bf16",
                        attention_backend="unfused", async_tensor_model_parallel_allreduce=True)
    prepared = api.prepare_model("gpt-22b", "dgx-a100-1024", api.LayoutRequest(tp=8, pp=1, dp=1),
                                 training, ignore_memory=True)
    run = prepared.model_run
    rows = transformer_layer_rows(run.model, run.par, Dims.of(run.model, run.par), table4.LAYER)
    compute = sum(ops_time_ns(r.fwd, A100_80, A100, "bf16") for r in rows)
    comms = [r.fwd_comm for r in rows if r.fwd_comm is not None]
    size = 4 * 2048 * 6144 * 2  # b·s·h bf16 activations: 96 MiB
    assert [(c.kind, c.size_bytes) for c in comms] == [(CollKind.ALLREDUCE, size)] * 2
    ar = steps.network(prepared).isolated(
        CommRequest(CollKind.ALLREDUCE, GroupKind.TP, tuple(range(8)), size))
    fwd, _ = table4.layer_times_ns(table4.simulate_row(False, "none").spans)
    assert fwd == pytest.approx(compute + 2 * ar.duration_ns, abs=len(rows) + 2)


def test_22b_recompute_costs_have_the_measured_ordering(shipped_table):
    """Full recompute adds about a forward pass to the backward; selective a small fraction."""
    fwd, base = shipped_table["baseline"]
    full = shipped_table["full recompute"][1]
    sel = shipped_table["selective recompute"][1]
    assert full - base == pytest.approx(fwd, rel=0.05)  # measured: 19.5 − 11.9 = 7.6 ≈ 7.7
    assert 0.05 < (sel - base) / base < 0.15  # measured: 13.2 / 11.9 − 1 = 11%


def test_gemm_efficiency_curve_rises_with_size_and_stays_physical():
    sizes = [2 * n**3 for n in (256, 512, 1024, 2048, 4096, 8192)]
    effs = [gemm_efficiency(f, A100_80, A100, "bf16") for f in sizes]
    assert effs == sorted(effs)
    assert all(0 < e < A100.gemm_efficiency for e in effs)
    # η_eff = η·t_c/(t_c + 4 µs), t_c = F/(η·312 TFLOP/s): with η = 0.69, 1024³ (2.147 GFLOP,
    # t_c = 9.97 µs) runs at 0.69 · 9.97/13.97 = 0.492; 4096³ (t_c = 638.4 µs) at 0.686
    assert effs[2] == pytest.approx(0.492, abs=0.001)
    assert effs[4] == pytest.approx(0.686, abs=0.001)
    # half of η where F = η · P · o_gemm = 0.69 · 312e12 · 4e-6 = 861.1 MFLOP
    assert gemm_efficiency(861.12e6, A100_80, A100, "bf16") == pytest.approx(0.345, rel=1e-3)


def test_roofline_memory_bound_operators():
    # an element-wise kernel moving 1 GB at 80% of 2039 GB/s, plus the 2 µs kernel overhead
    op = Op("x", OpKind.ELEMENTWISE, 0, 10**9)
    assert op_time_ns(op, A100_80, A100, "bf16") == pytest.approx(1e9 / (2039e9 * 0.8) * 1e9 + 2000)
    # a GEMM with k = 64 over huge m, n is memory-bound: the byte term wins
    g = gemm("thin", 65536, 64, 65536)
    t_bytes = g.bytes / (2039e9 * 0.8) * 1e9 + A100.gemm_overhead_ns
    assert op_time_ns(g, A100_80, A100, "bf16") == pytest.approx(t_bytes)


def test_h100_is_faster_but_not_by_the_full_peak_ratio():
    big = gemm("big", 8192, 8192, 8192)
    t_a = op_time_ns(big, A100_80, A100, "bf16")
    t_h = op_time_ns(big, H100_80, H100, "bf16")
    assert 2.3 < t_a / t_h < 989.4 / 312.0
    assert op_time_ns(big, H100_80, H100, "fp8") < t_h


def test_family_lookup():
    assert resolve_compute(A100_80).cm is A100
    assert resolve_compute(H100_80).cm is H100
    assert resolve_compute(GpuSpec("MI300X", {"bf16": 1300.0}, 192, 5300)).cm.family.startswith(
        "MI300X: transferred from H100")
    with pytest.raises(UsageError, match="not in the GPU catalogue"):
        resolve_compute(GpuSpec("test-gpu", {"bf16": 100.0}, 16, 1000))

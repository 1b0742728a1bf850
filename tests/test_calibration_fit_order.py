"""Which knob one measured run identifies (sim/calibration/fit.py share_order): the knob that
acts on the largest share of the run's time, checked on closed-form runs (the time is a sum of
kernel classes' times, each divided by its knob), so the fitted value is known exactly."""

import pytest

from sim.calibration.fit import MeasuredRun, fit_knobs
from sim.calibration.knobs import Knobs


def _run(gemm_s: float, attn_s: float, mem_s: float, truth: Knobs) -> MeasuredRun:
    def predict(k: Knobs) -> float:
        return (gemm_s / k.gemm_efficiency_scale + attn_s / k.attention_scale
                + mem_s / k.memory_bound_scale)

    return MeasuredRun("made", predict(truth), predict, "closed form")


def test_dense_step_identifies_the_gemm_scale():
    # 70% GEMM, 10% attention, 20% memory-bound; measured under GEMM scale 0.9
    fit = fit_knobs([_run(0.7, 0.1, 0.2, Knobs(gemm_efficiency_scale=0.9))])
    assert fit.identified == ("gemm_efficiency_scale",)
    assert fit.knobs.gemm_efficiency_scale == pytest.approx(0.9, rel=1e-4)
    assert "largest first" in fit.not_identified["memory_bound_scale"]


def test_memory_bound_step_identifies_the_memory_bound_scale():
    # a step whose memory-bound kernels hold the largest share (37% against 29% of GEMMs, as
    # simrun times a small MoE layer): the run's time is attributed to them; made at 0.8
    fit = fit_knobs([_run(0.29, 0.16, 0.37, Knobs(memory_bound_scale=0.8))])
    assert fit.identified == ("memory_bound_scale",)
    assert fit.knobs.memory_bound_scale == pytest.approx(0.8, rel=1e-4)
    assert fit.knobs.gemm_efficiency_scale == 1.0
    assert fit.residuals[0][3] == pytest.approx(0.0, abs=1e-3)


def test_two_runs_take_the_two_largest_shares():
    # the closed form has no network and no launches: neither knob moves it; GEMM and
    # memory-bound tie at 50% (the table's order keeps GEMM first), attention (30%) is third
    fit = fit_knobs([_run(0.5, 0.3, 0.2, Knobs(gemm_efficiency_scale=1.1)),
                     _run(0.2, 0.3, 0.5, Knobs(gemm_efficiency_scale=1.1))])
    assert fit.identified == ("gemm_efficiency_scale", "memory_bound_scale")
    assert {"network_busbw_factor", "kernel_overhead_us"} <= set(fit.not_identified)
    assert fit.knobs.gemm_efficiency_scale == pytest.approx(1.1, rel=1e-3)
    assert fit.knobs.memory_bound_scale == pytest.approx(1.0, rel=1e-3)
    assert "at most 2 knobs" in fit.not_identified["attention_scale"]

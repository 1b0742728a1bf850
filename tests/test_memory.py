"""Per-GPU memory model: Korthikanti's activation formulas, in-flight microbatches per schedule,
model states, and feasibility of GPT-3 175B layouts on 80 GB GPUs."""

from __future__ import annotations

import pytest
from conftest import WORKLOADS
from par_support import make_par

from sim.models import build_model_plan, load_model
from sim.models.memory import check_memory, inflight_activation_bytes, layer_activation_bytes
from sim.pipeline.schedules import schedule_table
from sim.topology.gpu import GpuSpec

MODELS = WORKLOADS / "models"
A100_80 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)
GPT175 = load_model(MODELS / "gpt3-175b.yaml")


def test_175b_tp1_pp1_is_infeasible():
    rep = check_memory(GPT175, make_par(tp=1, pp=1, global_batch=1), A100_80)
    assert not rep.feasible
    assert "exceeds the 80.0 GB" in rep.reason and "stage 0" in rep.reason
    # 2 + 4 + 12 bytes per parameter for ~174.6e9 parameters alone
    assert rep.peak.weights_bytes + rep.peak.grads_bytes + rep.peak.optimizer_bytes \
        == 18 * 174_615_846_912


def test_175b_tp8_pp8_is_feasible():
    """Korthikanti et al.'s 175B run: TP 8, PP 8, interleaved (3 chunks), sequence parallel +
    selective recompute, micro batch 1."""
    par = make_par(tp=8, pp=8, vpp=3, global_batch=64, sequence_parallel=True,
                         recompute="selective")
    rep = check_memory(GPT175, par, A100_80)
    assert rep.feasible, rep.reason
    assert rep.peak.total_bytes < 80e9
    assert "fits in" in rep.reason


def test_175b_tp8_pp8_without_recompute_does_not_fit():
    """Without recomputation or SP the s²-sized attention activations blow the budget — why the
    paper needed selective recompute."""
    par = make_par(tp=8, pp=8, vpp=3, global_batch=64)
    assert not check_memory(GPT175, par, A100_80).feasible


@pytest.mark.parametrize("tp, sp, recompute, formula", [
    # Korthikanti et al. Table 2 (bytes per layer per microbatch), s=2048, b=2, h=12288, a=96
    (1, False, "none", lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h)),
    (8, False, "none", lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    (8, True, "none", lambda s, b, h, a, t: s * b * h * (34 / t + 5 * a * s / (h * t))),
    (8, False, "selective", lambda s, b, h, a, t: s * b * h * (10 + 24 / t)),
    (8, True, "selective", lambda s, b, h, a, t: s * b * h * 34 / t),
    (8, False, "full", lambda s, b, h, a, t: 2 * s * b * h),
    (8, True, "full", lambda s, b, h, a, t: 2 * s * b * h / t),
])
def test_layer_activations_equal_korthikanti(tp, sp, recompute, formula):
    par = make_par(tp=tp, micro_batch=2, global_batch=2, sequence_parallel=sp,
                         recompute=recompute, attention_backend="unfused")
    got = layer_activation_bytes(GPT175, par)
    assert got == pytest.approx(formula(2048, 2, 12288, 96, tp), rel=1e-12)


def test_flash_attention_drops_the_score_term():
    """No s×s term; the fused kernel's fp32 softmax statistics (4·a·s·b/t) instead."""
    par = make_par(tp=8, micro_batch=1, global_batch=1, sequence_parallel=True,
                         flash_attention=True)
    assert layer_activation_bytes(GPT175, par) == 34 * 2048 * 12288 // 8 + 4 * 96 * 2048 // 8


@pytest.mark.parametrize("p, m", [(4, 8), (8, 3), (1, 5)])
def test_1f1b_stage_r_holds_min_p_minus_r_microbatches(p, m):
    for r, ops in enumerate(schedule_table("1f1b", p, m)):
        peak, live = inflight_activation_bytes([1000], ops)
        assert live == min(p - r, m) and peak == 1000 * min(p - r, m)


def test_gpipe_holds_all_microbatches():
    for ops in schedule_table("gpipe", 4, 6):
        assert inflight_activation_bytes([1], ops) == (6, 6)


@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (8, 3, 16), (4, 4, 4)])
def test_interleaved_first_stage_factor(p, v, m):
    """Megatron: the first stage holds p microbatches' worth of its layers × (1 + (p−1)/(p·v)),
    i.e. p·v + p − 1 chunk activations (warmup 2(p−1) + (v−1)·p plus one), capped by the
    M·v chunk-microbatches of the iteration (the (4, 4, 4) case runs all forwards first)."""
    ops = schedule_table("interleaved", p, m, v)[0]
    unit = 1000  # bytes per chunk per microbatch
    peak, live = inflight_activation_bytes([unit] * v, ops)
    expected = min(p * v + p - 1, m * v)
    assert (peak, live) == (unit * expected, expected)
    if expected < m * v:
        assert peak == pytest.approx(unit * v * p * (1 + (p - 1) / (p * v)))


def test_model_states_per_parameter():
    """18 bytes per parameter without, 6 + 12/d with the distributed optimizer."""
    par = make_par(tp=8, pp=8, dp=16, global_batch=128)
    plan = build_model_plan(GPT175, par)
    p0 = plan.stages[0].params
    plain = check_memory(GPT175, par, A100_80, plan=plan).stages[0]
    assert (plain.weights_bytes, plain.grads_bytes, plain.optimizer_bytes) == \
        (2 * p0, 4 * p0, 12 * p0)
    par_d = make_par(tp=8, pp=8, dp=16, global_batch=128, distributed_optimizer=True)
    dist = check_memory(GPT175, par_d, A100_80).stages[0]
    assert dist.optimizer_bytes == 12 * -(-p0 // 16)


def test_stage_activation_totals_1f1b():
    """Stage r of a 1F1B 175B run (TP 8, PP 8, selective + SP, b = 1) holds min(8 − r, M)
    microbatches of its 12 layers at 34·s·b·h/t bytes each, plus the first stage's embedding
    dropout mask and the last stage's output buffers; one-off 2 GB reserved."""
    par = make_par(tp=8, pp=8, global_batch=16, sequence_parallel=True,
                         recompute="selective")
    rep = check_memory(GPT175, par, A100_80)
    s, b, h, t, V = 2048, 1, 12288, 8, 51200
    layer = 34 * s * b * h // t
    for r, st in enumerate(rep.stages):
        extra = 0
        if r == 0:
            extra = s * b * h // t
        if r == 7:
            extra = 4 * s * b * h // t + 4 * s * b * V // t
        assert st.inflight_microbatches == 8 - r
        assert st.activations_bytes == (8 - r) * (12 * layer + extra)
        assert st.reserved_bytes == 2_000_000_000


def test_moe_expert_states_divide_by_ep():
    m = load_model(MODELS / "mixtral-8x7b.yaml")
    par = make_par(tp=2, pp=4, dp=8, ep=8, global_batch=64, sequence_parallel=True,
                         distributed_optimizer=True)
    plan = build_model_plan(m, par)
    st = check_memory(m, par, A100_80, plan=plan).stages[1]
    dense, expert = plan.stages[1].params, plan.stages[1].expert_params
    assert expert == 8 * (4096 * 2 * 14336 + 14336 * 4096) // 2  # 1 local expert, 8 layers
    assert st.optimizer_bytes == 12 * (-(-dense // 8) + expert)  # DP_EP group has 1 rank

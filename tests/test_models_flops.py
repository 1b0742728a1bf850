"""Per-operator FLOP accounting of the generator versus the closed forms of docs/calibration.md
sections B and C.

The plan's operators (the same objects the generator times) are summed over an iteration:
per-GPU FLOPs × TP ranks × DP replicas × microbatches.
"""

from __future__ import annotations

import pytest
from conftest import WORKLOADS
from par_support import make_par

from sim.models import build_model_plan, load_model, model_flops_per_iteration
from sim.models.flops import (
    achieved_throughput,
    hardware_flops_per_iteration,
    korthikanti_model_flops,
    korthikanti_selective_hardware_flops,
    narayanan_full_recompute_flops,
)

MODELS = WORKLOADS / "models"

# docs/calibration.md section B: (spec, TP, PP, GPUs, global batch, micro batch, vpp)
TABLE_B = [
    ("gpt-22b", 8, 1, 8, 4, 4, 1),
    ("gpt3-175b", 8, 8, 64, 64, 1, 3),
    ("gpt-530b", 8, 35, 280, 280, 1, 3),
    ("gpt-1t", 8, 64, 512, 512, 1, 1),  # vpp 1 here: 128 layers / 64 stages = 2 per stage
]


def _plan(name, tp, pp, gpus, batch, mb, vpp, recompute, sp, dp=None):
    model = load_model(MODELS / f"{name}.yaml")
    dp = dp or gpus // (tp * pp)
    par = make_par(tp=tp, pp=pp, dp=dp, vpp=vpp, micro_batch=mb, global_batch=batch,
                         sequence_parallel=sp, recompute=recompute,
                         attention_backend="unfused")  # Korthikanti et al.'s 2022 kernels
    return model, build_model_plan(model, par)


@pytest.mark.parametrize("case", TABLE_B, ids=[c[0] for c in TABLE_B])
@pytest.mark.parametrize("recompute, sp", [("full", False), ("selective", True)])
def test_generated_flops_equal_closed_forms(case, recompute, sp):
    name, tp, pp, gpus, batch, mb, vpp = case
    model, plan = _plan(*case, recompute=recompute, sp=sp)
    B, L, s, h, V = batch, model.layers, model.seq_len, model.hidden, model.vocab
    model_f, hw_f = plan.iteration_flops()
    # Korthikanti et al.: 72·B·L·s·h²·(1 + s/(6h) + V/(12hL)), whatever the recompute setting
    assert model_f == korthikanti_model_flops(B, L, s, h, V)
    assert model_f == model_flops_per_iteration(model, B)
    assert model_f == pytest.approx(
        72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L)), rel=1e-12)
    if recompute == "full":
        # Narayanan et al.: 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)), exactly
        assert hw_f == narayanan_full_recompute_flops(B, L, s, h, V)
        assert hw_f == pytest.approx(
            96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h)), rel=1e-12)
    else:
        # Selective recompute re-runs QKᵀ and PV (4·b·s²·h per layer and microbatch):
        # 72·B·L·s·h²·(1 + 2s/(9h) + V/(12hL)).
        assert hw_f == korthikanti_model_flops(B, L, s, h, V) + 4 * B * L * s * s * h
        assert hw_f == pytest.approx(
            72 * B * L * s * h**2 * (1 + 2 * s / (9 * h) + V / (12 * h * L)), rel=1e-12)
        # The paper's s/(3h) form counts 8·B·L·s²·h more than is executed (documented).
        assert korthikanti_selective_hardware_flops(B, L, s, h, V) - hw_f == 8 * B * L * s * s * h
    assert hw_f == hardware_flops_per_iteration(model, B, recompute)


def test_flops_do_not_depend_on_layout():
    """Same model and global batch, different TP/PP/DP/micro-batch: identical totals (the 22B
    vocabulary 51200 needs no padding up to TP 8)."""
    totals = set()
    for tp, pp, dp, mb, vpp in [(1, 1, 1, 8, 1), (2, 2, 2, 1, 1), (4, 2, 1, 2, 2), (8, 4, 1, 1, 1)]:
        _, plan = _plan("gpt-22b", tp, pp, tp * pp * dp, 8, mb, vpp, "none", False, dp=dp)
        totals.add(plan.iteration_flops())
    assert len(totals) == 1


def test_padded_vocabulary_enters_the_generated_logits():
    """GPT-2's 50257-token vocabulary is padded to a multiple of 128·tp (50688 at TP 4, as in
    seed 000's embedding shard 12672 × 4): the logits GEMMs use the padded size."""
    model, plan = _plan("gpt2-medium", 4, 1, 4, 4, 1, 1, "none", False)
    assert plan.dims.v == 50688
    assert plan.iteration_flops()[0] == model_flops_per_iteration(model, 4, vocab=50688)


@pytest.mark.parametrize("name", ["llama2-70b", "mixtral-8x7b", "moe-gpt-small", "llama3-8b",
                                  "qwen3-30b-a3b"])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("flash", [False, True])
def test_non_gpt_models_match_general_closed_form(name, recompute, flash):
    model = load_model(MODELS / f"{name}.yaml")
    moe = model.moe is not None
    par = make_par(tp=4, pp=2, dp=4, ep=2 if moe else 1, micro_batch=1, global_batch=16,
                         sequence_parallel=True, recompute=recompute, flash_attention=flash,
                         attention_backend="" if flash else "unfused")
    plan = build_model_plan(model, par)
    v = plan.dims.v  # padded vocabulary the generator uses
    model_f, hw_f = plan.iteration_flops()
    assert model_f == model_flops_per_iteration(model, 16, vocab=v)
    assert hw_f == hardware_flops_per_iteration(model, 16, recompute, flash, vocab=v)


def test_llama_forward_flops_per_token_by_hand():
    """Llama-2-70B forward per token per layer: QKV 2·h·(h + 2·1024), proj 2h², SwiGLU
    3 × 2·h·f, attention 4·s·h; logits 2·h·V. ×3 for forward + backward."""
    m = load_model(MODELS / "llama2-70b.yaml")
    h, f, s, V, L = 8192, 28672, 4096, 32000, 80
    per_layer = 2 * h * (h + 2 * 1024) + 2 * h * h + 3 * 2 * h * f + 4 * s * h
    assert model_flops_per_iteration(m, 1) == 3 * s * (L * per_layer + 2 * h * V)


def test_kv_channels_widen_q_and_the_projection_by_hand():
    """Qwen3-30B-A3B (kv_channels 128 ≠ hidden/heads = 64): Q is 32·128 = 4096 wide, K and V
    4·128 = 512, the projection 4096 → 2048, the attention core 4·s·4096; MoE top-8 of 768-wide
    SwiGLU experts plus the 2048×128 router. Forward per token per layer, ×3 for fwd + bwd."""
    m = load_model(MODELS / "qwen3-30b-a3b.yaml")
    h, q, kv, s, V, L, fe = 2048, 4096, 512, 4096, 151936, 48, 768
    per_layer = (2 * h * (q + 2 * kv) + 2 * q * h + 8 * 3 * 2 * h * fe + 2 * h * 128
                 + 4 * s * q)
    assert (m.head_dim, m.q_hidden, m.kv_hidden) == (128, q, kv)
    assert model_flops_per_iteration(m, 1) == 3 * s * (L * per_layer + 2 * h * V)
    # the generated operators carry the same widths (one GPU: TP 1, EP 1)
    par = make_par(tp=1, pp=1, dp=1, micro_batch=1, global_batch=1)
    plan = build_model_plan(m, par)
    assert plan.iteration_flops()[0] == model_flops_per_iteration(m, 1, vocab=plan.dims.v)


@pytest.mark.parametrize("model, time_s, mfu_paper, hfu_paper, batch, gpus", [
    ("gpt-22b", 1.10, 0.415, 0.437, 4, 8),
    ("gpt3-175b", 13.75, 0.514, 0.528, 64, 64),
    ("gpt-530b", 37.83, 0.560, 0.570, 280, 280),
    ("gpt-1t", 71.49, 0.563, 0.570, 512, 512),
])
def test_mfu_of_measured_iterations_matches_paper(model, time_s, mfu_paper, hfu_paper, batch,
                                                  gpus):
    """achieved_throughput on the measured iteration times reproduces the paper's MFU column
    (and, with the paper's own selective-recompute formula, its HFU column)."""
    m = load_model(MODELS / f"{model}.yaml")
    tflops, mfu = achieved_throughput(model_flops_per_iteration(m, batch), time_s, gpus, 312.0)
    assert mfu == pytest.approx(mfu_paper, abs=0.006)
    assert tflops == pytest.approx(mfu * 312.0)
    hw = korthikanti_selective_hardware_flops(batch, m.layers, m.seq_len, m.hidden, m.vocab)
    _, hfu = achieved_throughput(hw, time_s, gpus, 312.0)
    assert hfu == pytest.approx(hfu_paper, abs=0.006)


def test_achieved_throughput_rejects_nonpositive_time():
    with pytest.raises(ValueError):
        achieved_throughput(1, 0.0, 8, 312.0)

"""Sweeps over the new dimensions: context parallelism, ZeRO stage and schedule, with the same
feasibility rules as a single run."""

from conftest import ROOT

from sim.cli.sweep import parse_schedules
from sim.models.parallel import Training
from sim.models.spec import load_model
from sim.sweep.space import Space, SweepPoint, enumerate_layouts

MODEL = load_model(ROOT / "workloads/models/llama3-8b.yaml")


def test_cp_zero_schedule_dimensions_enumerated_with_reasons():
    space = Space(gpus=16, tp=(2,), pp=(1, 2), cp=(1, 2), zero=(0, 3),
                  schedule=parse_schedules("1f1b,zb-h1"))
    ok, skipped = enumerate_layouts(MODEL, space, Training(global_batch=32,
                                                           flash_attention=True), 8)
    keys = {lay.key for lay in ok}
    # tp2-pp1: dp = 16/(2·1·cp); ZeRO-3 fine without PP; zb-h1 needs M >= p (p = 1: fine)
    assert "tp2-pp1-dp8-vpp1-mb1" + "-1f1b" in keys
    assert "tp2-pp1-dp4-vpp1-mb1-cp2-zero3-zb-h1" in keys
    assert "tp2-pp2-dp2-vpp1-mb1-cp2-zb-h1" in keys
    reasons = dict(skipped)
    # ZeRO stage 3 with pipeline parallelism is refused, as in a single run
    assert "pipeline engine" in reasons["tp2-pp2-dp4-vpp1-mb1-zero3-1f1b"]
    assert all(lay.tp * lay.pp * lay.dp * lay.cp == 16 for lay in ok)


def test_cp_needs_fused_attention_in_a_sweep_too():
    space = Space(gpus=8, tp=(2,), pp=(1,), cp=(2,))
    ok, skipped = enumerate_layouts(MODEL, space, Training(global_batch=8), 8)
    assert ok == []
    assert "fused attention" in skipped[0][1]


def test_default_keys_unchanged():
    assert SweepPoint(8, 8, 16, 3, 1).key == "tp8-pp8-dp16-vpp3-mb1"
    assert SweepPoint(1, 2, 4, cp=2, zero=1, schedule="zb-h1").key == (
        "tp1-pp2-dp4-vpp1-mb1-cp2-zero1-zb-h1")

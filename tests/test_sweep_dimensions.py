"""Sweeps over the new dimensions: context parallelism, ZeRO stage and schedule, with the same
feasibility rules as a single run."""

import csv
import io

from conftest import ROOT

from sim.cli.sweep import parse_schedules
from sim.models.vocab.spec import load_model
from sim.parallel.config import Training
from sim.sweep.output import csv_text, ranked
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
    ok, skipped = enumerate_layouts(MODEL, space, Training(global_batch=8,
                                                           attention_backend="unfused"), 8)
    assert ok == []
    assert "fused attention" in skipped[0][1]


def test_default_keys_unchanged():
    assert SweepPoint(8, 8, 16, 3, 1).key == "tp8-pp8-dp16-vpp3-mb1"
    assert SweepPoint(1, 2, 4, cp=2, zero=1, schedule="zb-h1").key == (
        "tp1-pp2-dp4-vpp1-mb1-cp2-zero1-zb-h1")


def test_zb_v_in_a_sweep_gets_its_two_chunks_unless_vpp_is_given():
    # as in a single run: --schedule zb-v alone runs vpp 2; an explicit vpp 1 is refused
    train = Training(global_batch=32, flash_attention=True)
    ok, _ = enumerate_layouts(MODEL, Space(gpus=16, tp=(2,), pp=(2, 4),
                                           schedule=parse_schedules("1f1b,zb-v")), train, 8)
    assert sorted(lay.key for lay in ok) == [
        "tp2-pp2-dp4-vpp1-mb1-1f1b", "tp2-pp2-dp4-vpp2-mb1-zb-v",
        "tp2-pp4-dp2-vpp1-mb1-1f1b", "tp2-pp4-dp2-vpp2-mb1-zb-v"]
    ok, skipped = enumerate_layouts(MODEL, Space(gpus=16, tp=(2,), pp=(4,), vpp=(1,),
                                                 schedule=("zb-v",)), train, 8)
    assert ok == [] and "two model chunks per stage" in dict(skipped)[
        "tp2-pp4-dp2-vpp1-mb1-zb-v"]
    # micro batch 1: pp 4 (dp 4) M = 8 ≥ 2p-1 = 7, pp 8 (dp 2) M = 16 ≥ 15; micro batch 2
    # halves M below 2p-1: refused with the single run's reason
    ok, skipped = enumerate_layouts(MODEL, Space(gpus=16, tp=(1,), pp=(4, 8), micro_batch=(1, 2),
                                                 schedule=("zb-v",)), train, 8)
    assert [lay.key for lay in ok] == ["tp1-pp4-dp4-vpp2-mb1-zb-v", "tp1-pp8-dp2-vpp2-mb1-zb-v"]
    reasons = dict(skipped)
    assert "at least 2p−1 = 15 microbatches (got 8)" in reasons["tp1-pp8-dp2-vpp2-mb2-zb-v"]
    assert "at least 2p−1 = 7 microbatches (got 4)" in reasons["tp1-pp4-dp4-vpp2-mb2-zb-v"]


def test_results_csv_has_cp_and_zero_columns():
    rows = ranked([
        {"layout": "tp2-pp1-dp4-vpp1-mb1-cp2-zero3-zb-h1", "status": "ok", "tp": 2, "pp": 1,
         "dp": 4, "vpp": 1, "ep": 1, "cp": 2, "zero": 3, "micro_batch": 1,
         "schedule": "zb-h1", "iteration_time_s": 2.0},
        {"layout": "tp2-pp1-dp8-vpp1-mb1", "status": "ok", "tp": 2, "pp": 1, "dp": 8,
         "vpp": 1, "ep": 1, "micro_batch": 1, "schedule": "1f1b", "iteration_time_s": 1.0}])
    lines = list(csv.DictReader(io.StringIO(csv_text(rows))))
    assert [(r["layout"], r["cp"], r["zero"], r["schedule"]) for r in lines] == [
        ("tp2-pp1-dp8-vpp1-mb1", "1", "0", "1f1b"),
        ("tp2-pp1-dp4-vpp1-mb1-cp2-zero3-zb-h1", "2", "3", "zb-h1")]
    assert "cp" not in rows[0] and rows[1]["cp"] == 2  # results.json rows: as before


def test_sweep_attention_backend_flag_reaches_the_training_options():
    # the sweep shares the run's --attention-backend: unfused makes every CP layout infeasible
    from sim.cli.args import training_of
    from sim.cli.sweep import build_parser

    base = ["--model", "llama3-8b", "--topo", "dgx-h100-1024", "--gpus", "8", "--tp", "2",
            "--global-batch", "8", "--out", "s"]
    for extra, backend in (([], ""), (["--attention-backend", "unfused"], "unfused")):
        train = training_of(build_parser().parse_args(base + extra), 1)
        assert train.attention_backend == backend
        ok, skipped = enumerate_layouts(MODEL, Space(gpus=8, tp=(2,), pp=(1,), cp=(2,)),
                                        train, 8)
        assert (ok == [] and "fused attention" in skipped[0][1]) == (backend == "unfused")

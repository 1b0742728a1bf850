"""Uneven pipeline stages (Megatron-Core's split rules) and BLOOM-176B's layout."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from par_support import make_par

from sim.errors import UsageError
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import load_model
from sim.parallel.split import PipelineSplit, stage_layer_counts, virtual_stage_layers


def test_even_split_is_unchanged():
    assert virtual_stage_layers(96, 8, 3, PipelineSplit()) == [4] * 24
    with pytest.raises(UsageError, match="cannot be split evenly"):
        virtual_stage_layers(70, 12, 1, PipelineSplit())


def test_first_and_last_stage_layers():
    # 70 layers, first 4, last 6: 60 left over 10 stages -> 6 each
    counts = virtual_stage_layers(70, 12, 1, PipelineSplit(4, 6))
    assert counts == [4] + [6] * 10 + [6]
    assert virtual_stage_layers(10, 3, 1, PipelineSplit(first_stage_layers=2)) == [2, 4, 4]
    assert virtual_stage_layers(10, 2, 1, PipelineSplit(3, 7)) == [3, 7]
    # with a virtual pipeline: each stage's layers divided over its v chunks, virtual stage
    # c·p + r; stage 0 holds 2 layers (1 per chunk), stages 1-2 hold 4 (2 per chunk)
    assert virtual_stage_layers(10, 3, 2, PipelineSplit(first_stage_layers=2)) == [
        1, 2, 2, 1, 2, 2]
    with pytest.raises(UsageError, match="not divisible by the virtual pipeline") as e:
        virtual_stage_layers(11, 3, 2, PipelineSplit(first_stage_layers=3))
    assert e.value.field == "first_stage_layers"
    with pytest.raises(UsageError, match="cannot be split evenly"):
        virtual_stage_layers(70, 12, 1, PipelineSplit(first_stage_layers=5))


def test_embedding_and_loss_accounted_as_layers():
    # BLOOM: 70 + 2 = 72 = 12 x 6 -> 5, 6 x 10, 5
    counts = virtual_stage_layers(70, 12, 1, PipelineSplit(account_for_embedding=True,
                                                           account_for_loss=True))
    assert counts == [5] + [6] * 10 + [5]
    assert virtual_stage_layers(7, 4, 1, PipelineSplit(account_for_embedding=True)) == [
        1, 2, 2, 2]
    # with v = 2: 15 + 1 = 16 over 8 virtual stages; virtual stage 0 (chunk 0 of stage 0) -1
    vc = virtual_stage_layers(15, 4, 2, PipelineSplit(account_for_embedding=True))
    assert vc == [1, 2, 2, 2, 2, 2, 2, 2]
    assert stage_layer_counts(vc, 4) == [3, 4, 4, 4]
    with pytest.raises(UsageError, match="cannot be combined"):
        virtual_stage_layers(70, 12, 1, PipelineSplit(5, 5, account_for_embedding=True))


@pytest.mark.parametrize("p, v, emb, loss, flag", [
    (2, 1, True, True, "account_for_loss_in_pipeline_split"),  # 26/2 = 13: 12 + 12
    (1, 2, True, True, "account_for_loss_in_pipeline_split"),  # one stage, two chunks
    (1, 1, True, False, "account_for_embedding_in_pipeline_split"),  # 25/1: 24
    (1, 1, False, True, "account_for_loss_in_pipeline_split"),
])
def test_accounting_that_gives_the_even_split_is_refused(p, v, emb, loss, flag):
    """24 layers: embedding and loss counted on two virtual stages give (24 + 2)/2 − 1 = 12 on
    each, the even split; on one virtual stage there is nothing to split. Either would change
    nothing, so the flag is refused (exit 2 naming it), not silently accepted."""
    with pytest.raises(UsageError) as e:
        virtual_stage_layers(24, p, v, PipelineSplit(account_for_embedding=emb,
                                                      account_for_loss=loss))
    assert e.value.field == flag and "would change nothing" in str(e.value)
    # on four virtual stages the same flags do split unevenly: (22 + 2)/4 = 6 → 5, 6, 6, 5
    assert virtual_stage_layers(22, 2, 2, PipelineSplit(account_for_embedding=True,
                                                        account_for_loss=True)) == [5, 6, 6, 5]


def test_plan_places_layers_by_the_split():
    model = load_model(ROOT / "workloads/models/bloom-176b.yaml")
    par = make_par(tp=4, pp=12, dp=8, micro_batch=2, global_batch=2048,
                         split=PipelineSplit(account_for_embedding=True, account_for_loss=True))
    plan = build_model_plan(model, par)
    assert [len(st.layers[0]) for st in plan.stages] == [5] + [6] * 10 + [5]
    assert plan.stages[0].layers[0] == [0, 1, 2, 3, 4]
    assert plan.stages[11].layers[0] == list(range(65, 70))
    ids = [i for st in plan.stages for i in st.layers[0]]
    assert ids == list(range(70))


def test_bloom_layout_simulates_with_the_split_printed(tmp_path):
    out = tmp_path / "bloom.json"
    cmd = [sys.executable, "-m", "sim.cli", "--model", "workloads/models/bloom-176b.yaml",
           "--topo", "topologies/dgx-a100-512.yaml", "--nodes", "48", "--tp", "4", "--pp",
           "12", "--dp", "8", "--micro-batch", "2", "--global-batch", "192", "--recompute",
           "full", "--distributed-optimizer", "--account-for-embedding-in-pipeline-split",
           "--account-for-loss-in-pipeline-split", "--json", str(out), "--verbose"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "transformer layers per stage 5/6/6/6/6/6/6/6/6/6/6/5" in res.stdout
    rep = json.loads(out.read_text())
    assert rep["pipeline_stages"] == 12
    assert any("5/6/6/6/6/6/6/6/6/6/6/5" in a for a in rep["assumptions"])
    # without an uneven split, 70 layers on 12 stages is refused (exit 2, one line)
    bad = subprocess.run(cmd[:-4] + ["--json", str(out)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert bad.returncode == 2 and "cannot be split evenly" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1

"""DualPipe with a model spec: two stages per rank (layers, embedding and output rows, twice
the parameters), the refusals it needs, its assumption line, the sweep's schedule dimension
and the timeline's boxes (docs/schedules.md)."""

import pytest
from conftest import ROOT
from par_support import make_par

from sim.engine import simulate
from sim.errors import UsageError
from sim.models.generator import embedding_grad_comm
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import ModelSpec, load_model
from sim.network.simple import FreeNetwork
from sim.parallel.config import Training
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.viz.boxes import timeline_boxes

TINY = ModelSpec("tiny", layers=8, hidden=256, heads=4, vocab=1000, seq_len=128)


def _par(**kw):
    base = dict(tp=1, pp=4, dp=1, vpp=2, global_batch=8, micro_batch=1, schedule="dualpipe")
    return make_par(**{**base, **kw})


def test_every_rank_holds_stage_r_and_stage_p_minus_1_minus_r():
    # GPT-2 medium, 24 layers on 4 stages: 6 layers per stage; rank r runs stage r (chunk 0,
    # first direction) and stage 3-r (chunk 1, second direction)
    model = load_model(str(ROOT / "workloads/models/gpt2-medium.yaml"))
    plan = build_model_plan(model, _par())
    s = [list(range(6 * i, 6 * i + 6)) for i in range(4)]
    assert [st.layers for st in plan.stages] == [[s[0], s[3]], [s[1], s[2]], [s[2], s[1]],
                                                 [s[3], s[0]]]
    # embedding rows where stage 0 runs (rank 0 chunk 0, rank 3 chunk 1), output rows where
    # stage 3 runs (rank 3 chunk 0, rank 0 chunk 1)
    names = [[{r.name for r in rows} for rows in st.chunks] for st in plan.stages]
    emb = [(r, c) for r in range(4) for c in (0, 1) if "embedding" in names[r][c]]
    assert emb == [(0, 0), (3, 1)]
    out = [(r, c) for r in range(4) for c in (0, 1)
           if any("output" in n or "loss" in n for n in names[r][c])]
    assert out == [(0, 1), (3, 0)]


def test_parameters_twice_and_no_embedding_group():
    # the whole model twice over the pipeline (every stage on two ranks); tied embeddings: the
    # ranks holding the input embedding hold the output layer too, so Megatron's embedding
    # group has nothing to reduce (the copies' gradient sum is not modelled: docs)
    one = sum(st.params for st in build_model_plan(TINY, _par(vpp=1, schedule="1f1b")).stages)
    dual_plan = build_model_plan(TINY, _par())
    assert sum(st.params for st in dual_plan.stages) == 2 * one - 2 * 1024 * 256
    assert [embedding_grad_comm(dual_plan, s) for s in range(4)] == [None] * 4


def test_dualpipe_refusals():
    with pytest.raises(UsageError, match=r"at least 2p = 8 \(got 4\)"):
        build_model_plan(TINY, _par(global_batch=4))
    with pytest.raises(UsageError, match="even pipeline size"):
        build_model_plan(ModelSpec("t", layers=9, hidden=256, heads=4, vocab=1000,
                                   seq_len=128), _par(pp=3, global_batch=12))


def test_uneven_split_on_both_ranks_of_a_stage():
    # Megatron-Core's --decoder-first-pipeline-num-layers: stage 0 (2 of 11 layers, then 3
    # each) runs on rank 0 (direction 0) and on rank 3 (direction 1)
    from sim.parallel.split import PipelineSplit
    model = ModelSpec("t", layers=11, hidden=256, heads=4, vocab=1000, seq_len=128)
    plan = build_model_plan(model, _par(split=PipelineSplit(first_stage_layers=2)))
    assert [st.layers for st in plan.stages] == [
        [[0, 1], [8, 9, 10]], [[2, 3, 4], [5, 6, 7]], [[5, 6, 7], [2, 3, 4]],
        [[8, 9, 10], [0, 1]]]


def test_workload_file_refused(capsys):
    # a workload file holds one stage's rows per rank: DualPipe needs two (exit 2, one line)
    from sim.cli import main
    rc = main(["--workload", "aicb-gpt-h16384-tp8-pp16-dp8-1024gpu", "--topo", "dgx-a100-1024",
               "--schedule", "dualpipe", "--microbatches", "32", "--quiet"])
    assert rc == 2
    assert "dualpipe schedule runs two model stages per rank" in capsys.readouterr().err


def test_sweep_schedule_dimension_takes_dualpipe_with_its_rules():
    from sim.cli.sweep import parse_schedules
    from sim.sweep.space import Space, enumerate_layouts

    model = load_model(ROOT / "workloads/models/llama3-8b.yaml")
    space = Space(gpus=16, tp=(1,), pp=(1, 2, 4), schedule=parse_schedules("dualpipe"))
    ok, skipped = enumerate_layouts(model, space, Training(global_batch=32), 8)
    # PP 2 (DP 8, M 4 ≥ 4) fits the rules; PP 4 (DP 4, M 8 ≥ 8) too; PP 1 is not even
    assert [lay.key for lay in ok] == ["tp1-pp2-dp8-vpp2-mb1-dualpipe",
                                       "tp1-pp4-dp4-vpp2-mb1-dualpipe"]
    assert "even pipeline size" in dict(skipped)["tp1-pp1-dp16-vpp2-mb1-dualpipe"]


def test_timeline_boxes_whole_and_split_backwards():
    # p = 2, M = 4 (orders in tests/test_dualpipe.py): rank 0's whole backwards are single B
    # boxes, its input-gradient I1.0 a B box and the deferred W1.0 a W box; the F&B op is
    # its F box followed by its B box
    lay = Layer("layer", Phase(10), Phase(10), Phase(10))
    prog = PipelineProgram(tp=1, pp=2, dp=1, ep=1, vpp=2, microbatches=4, pp_bytes=0,
                           stages=[StageProgram(s, [(lay,), (lay,)]) for s in range(2)],
                           schedule="dualpipe")
    res = simulate(prog, FreeNetwork(), record_spans=True)
    ops = [(b.start_ns, b.end_ns, b.kind, f"{b.microbatch}.{b.chunk}")
           for b in timeline_boxes(res, [0]) if b.microbatch >= 0]
    assert ops == [(0, 10, "forward", "0.0"), (10, 20, "forward", "0.1"),
                   (20, 30, "forward", "1.0"), (30, 50, "backward", "0.1"),
                   (50, 60, "forward", "1.1"), (60, 80, "backward", "0.0"),
                   (80, 100, "backward", "1.1"), (100, 110, "backward", "1.0"),
                   (110, 120, "weight_grad", "1.0")]

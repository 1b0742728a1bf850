"""Megatron-Core's --pipeline-model-parallel-layout (sim/parallel/layer_layout.py): the parser
(Megatron-Core's grammar and refusals), the layers it puts on each (stage, chunk), a
hand-derived timeline of an uneven interleaved layout whose embedding and loss are chunks of
their own, and Llama 3 405B on PP 16 × 8 chunks as its authors split it."""

import json
import re

import pytest
from conftest import ROOT, TOPOLOGIES

from sim.cli import main
from sim.engine import simulate
from sim.errors import UsageError
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import load_model
from sim.network.simple import FreeNetwork
from sim.parallel.config import Training
from sim.parallel.layer_layout import FLAG, parse_layout
from sim.parallel.layout import LayoutRequest
from sim.parallel.split import PipelineSplit, virtual_stage_layers
from sim.pipeline.registry import schedule_type
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.scenario.model_run import parallel_config

LLAMA_405B = ROOT / "workloads" / "models" / "llama3-405b.yaml"
# Llama 3 405B's split (Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783, §3.3.2: one
# transformer layer fewer on the first and the last stage, "the first model chunk on the first
# stage has only the embedding, and the last model chunk on the last stage has only output
# projection and loss calculation"). NVIDIA's recipes run it with Megatron-Core's equivalent
# flags, not a layout string: NVIDIA-NeMo/Megatron-Bridge
# src/megatron/bridge/recipes/llama/llama31_405b.py at 3594df948093cdb3c5ef4846e5d95f8c4a8584eb
# (account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True), with
# PP 16 × VPP 8 in its performance recipe llama31_405b_pretrain_128gpu_gb200_nvfp4_config, and
# mlcommons/training_results_v5.1 NVIDIA llama31_405b configs (ASYM_PP_EMBED / ASYM_PP_LOSS).
# No published layout string was found; on 16 × 8 = 128 virtual stages those flags give one
# item per virtual stage, written as a layout:
LLAMA_405B_LAYOUT = "E|(t|)*126,L"


def stages(text):
    return list(parse_layout(text).stages)


# -- the grammar (Megatron-Core parse_str_to_list) ---------------------------------------------


def test_megatrons_documented_examples():
    # TransformerConfig.pipeline_model_parallel_layout's docstring: DeepSeek-V3 on PP 16 × 2
    assert stages("Et*3|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]
    assert stages("E|(tt|)*2,(t|)*4,mL") == ["E", "tt", "tt", "t", "t", "t", "t", "mL"]
    # Megatron-LM's unit tests of PipelineParallelLayerLayout
    assert stages("Et|t*4|t|tL") == ["Et", "tttt", "t", "tL"]
    assert stages("E|t*6|t|L") == ["E", "tttttt", "t", "L"]
    assert stages("E|t|t*2|t||(t|)*2,t*2,L") == ["E", "t", "tt", "t", "", "t", "t", "ttL"]


def test_repetition_commas_and_empty_stages():
    assert stages("E,t,t|t,L") == ["Ett", "tL"]  # commas are cosmetic
    assert stages("(E|)*1t*10|L") == ["E", "t" * 10, "L"]
    assert stages("E||L") == ["E", "", "L"]  # an empty virtual stage, as Megatron-Core allows
    assert stages("Et*0|L") == ["E", "L"]  # x*0: none
    assert stages("(t|)*3") == ["t", "t", "t", ""]


def test_virtual_pipeline_size_and_layers_per_virtual_stage():
    lay = parse_layout("E|tt|t|t|tt|L")
    assert lay.virtual_pipeline_size(2) == 3 and lay.virtual_pipeline_size(3) == 2
    assert lay.decoder_layers() == [0, 2, 1, 1, 2, 0]
    assert lay.describe(2) == "rank 0: E | t | t*2; rank 1: t*2 | t | L"
    with pytest.raises(UsageError, match="lists 6 virtual stages, not a multiple of the "
                                         "pipeline-parallel size 4") as e:
        lay.virtual_pipeline_size(4)
    assert e.value.field == "pipeline_model_parallel_layout"


@pytest.mark.parametrize("text, where", [
    ("Et|x|L", "cannot read 'x' at character 4 of 'Et|x|L'"),
    ("Et|(tt|L", "cannot read '(' at character 4"),  # no closing parenthesis
    ("Et|tt)|L", "cannot read ')' at character 6"),
    ("Et|t**2|L", "cannot read '*' at character 5"),
    ("((t|)*2)*2", "cannot read '(' at character 2"),  # Megatron-Core has no nesting
    ("Et|t*|L", "cannot read '*' at character 5"),
    ("E|t 3|L", "cannot read ' ' at character 4"),
])
def test_unreadable_characters_are_named_with_their_position(text, where):
    with pytest.raises(UsageError, match=re.escape(where)) as e:
        parse_layout(text)
    assert e.value.field == "pipeline_model_parallel_layout"
    assert "\n" not in e.value.format()


def test_empty_and_runaway_layouts_are_refused():
    with pytest.raises(UsageError, match="empty layout"):
        parse_layout("  ")
    with pytest.raises(UsageError, match="repetition at character 3 of 'E|t\\*99999999999' "
                                         "expands past 1,000,000 layers"):
        parse_layout("E|t*99999999999")
    assert parse_layout(None) is None


@pytest.mark.parametrize("text, message", [
    ("t|EtL", "the first layer must be the embedding E, got 't'"),
    ("||", "the first layer must be the embedding E, got nothing"),
    ("Et|tt", "the last layer must be the loss L, got 't'"),
    ("EL|ttL", "the output layer and loss L must appear exactly once, it appears 2 times"),
    ("Et|EtL", "the embedding E must appear exactly once, it appears 2 times"),
    ("Et|tmL", "1 MTP layer m, but the model has no MTP layer"),
    ("Et|tL", "holds 2 transformer layers t, but the model has 3"),
    ("|Ettt|L", "empty virtual stages before the embedding"),
    ("Ettt|L|", "empty virtual stages before the embedding or after the loss"),
])
def test_megatrons_checks_of_the_layers(text, message):
    with pytest.raises(UsageError, match=message) as e:
        parse_layout(text).check(3)
    assert e.value.field == "pipeline_model_parallel_layout"


def test_virtual_stage_layers_from_the_layout():
    split = PipelineSplit(layout=parse_layout("E|tt|t|t|tt|L"))
    assert split.uneven
    assert virtual_stage_layers(6, 2, 3, split) == [0, 2, 1, 1, 2, 0]
    with pytest.raises(UsageError, match="lists 6 virtual stages, but PP × virtual pipeline "
                                         "size = 2 × 2 = 4"):
        virtual_stage_layers(6, 2, 2, split)
    both = PipelineSplit(first_stage_layers=2, layout=parse_layout("E|tt|t|t|tt|L"))
    with pytest.raises(UsageError, match="cannot be combined with --decoder-first") as e:
        virtual_stage_layers(6, 2, 3, both)
    assert e.value.field == "pipeline_model_parallel_layout"
    assert split.virtual_pipeline_size(2, None) == 3
    assert PipelineSplit().virtual_pipeline_size(2, None) is None
    with pytest.raises(UsageError, match="leave --vpp out"):
        split.virtual_pipeline_size(2, 3)


# -- a hand-derived timeline --------------------------------------------------------------------

# One virtual stage per item of "E|tt|t|t|tt|L" on p = 2 stages (v = 3 chunks each): vs i is
# chunk i // 2 of stage i % 2, so stage 0 holds E | t | tt and stage 1 holds tt | t | L: uneven
# chunks, and the embedding and the loss as chunks of their own. Per microbatch, a transformer
# layer takes forward 10 ns and backward 20 (input-grad 10 + weight-grad 10); the embedding
# 5 + (5 + 5); the output layer and loss 15 + (15 + 15). Free network (transfers take no time).
# Chunk times (F, B): s0c0 E 5, 10; s1c0 tt 20, 40; s0c1 t 10, 20; s1c1 t 10, 20;
# s0c2 tt 20, 40; s1c2 L 15, 30.
#
# Interleaved 1F1B, M = 2, N = 2: table (mb, chunk) = (0,0) (1,0) (0,1) (1,1) (0,2) (1,2).
# Stage 0 warms up with min(2(p-1) + (v-1)N, 6) = 6 forwards (all), then the 6 backwards;
# stage 1 with 4 forwards, 2 steady (F, B) pairs, then 4 backwards. Each op starts when its
# stage is free and its input exists (F on vs k: F of vs k-1 done; B on vs k: B of vs k+1
# done, or for the last vs its own F):
#   stage 0: F0.0 0-5, F1.0 5-10, F0.1 25-35 (vs1 F0 ends 25), F1.1 45-55 (vs1 F1 ends 45),
#            F0.2 55-75 (vs3 F0 ends 55), F1.2 75-95, B0.2 120-160 (vs5 B0 ends 120),
#            B1.2 165-205 (vs5 B1 ends 165), B0.1 205-225, B1.1 225-245 (vs3 B1 ends 225),
#            B0.0 265-275 (vs1 B0 ends 265), B1.0 305-315 (vs1 B1 ends 305)
#   stage 1: F0.0 5-25, F1.0 25-45, F0.1 45-55 (vs2 F0 ends 35), F1.1 55-65 (vs2 F1 ends 55),
#            F0.2 75-90 (vs4 F0 ends 75), B0.2 90-120, F1.2 120-135 (vs4 F1 ends 95),
#            B1.2 135-165, B0.1 165-185 (vs4 B0 ends 160), B1.1 205-225 (vs4 B1 ends 205),
#            B0.0 225-265 (vs2 B0 ends 225), B1.0 265-305 (vs2 B1 ends 245)
# Iteration: 315 ns. Busy: stage 0 2·(5+10+10+20+20+40) = 210, stage 1 2·(20+40+10+20+15+30)
# = 270.
EXPECTED = {
    0: [("F", 0, 0, 0, 5), ("F", 1, 0, 5, 10), ("F", 0, 1, 25, 35), ("F", 1, 1, 45, 55),
        ("F", 0, 2, 55, 75), ("F", 1, 2, 75, 95), ("B", 0, 2, 120, 160), ("B", 1, 2, 165, 205),
        ("B", 0, 1, 205, 225), ("B", 1, 1, 225, 245), ("B", 0, 0, 265, 275),
        ("B", 1, 0, 305, 315)],
    1: [("F", 0, 0, 5, 25), ("F", 1, 0, 25, 45), ("F", 0, 1, 45, 55), ("F", 1, 1, 55, 65),
        ("F", 0, 2, 75, 90), ("B", 0, 2, 90, 120), ("F", 1, 2, 120, 135), ("B", 1, 2, 135, 165),
        ("B", 0, 1, 165, 185), ("B", 1, 1, 205, 225), ("B", 0, 0, 225, 265),
        ("B", 1, 0, 265, 305)],
}


def _layout_program(text: str, p: int, m: int) -> PipelineProgram:
    """A synthetic program whose chunks hold what ``text`` puts on each (stage, chunk), placed
    by the split and the interleaved schedule's virtual-stage mapping."""
    lay = parse_layout(text)
    v = lay.virtual_pipeline_size(p)
    counts = virtual_stage_layers(6, p, v, PipelineSplit(layout=lay))
    typ = schedule_type("interleaved")
    rows = {"E": Layer("embedding", Phase(5), Phase(5), Phase(5)),
            "t": Layer("layer", Phase(10), Phase(10), Phase(10)),
            "L": Layer("output", Phase(15), Phase(15), Phase(15))}
    chunks = [[()] * v for _ in range(p)]
    for vs, items in enumerate(lay.stages):
        stage, chunk = typ.stage_chunk(p, vs)
        assert items.count("t") == counts[vs]
        chunks[stage][chunk] = tuple(rows[ch] for ch in items)
    return PipelineProgram(tp=1, pp=p, dp=1, ep=1, vpp=v, microbatches=m, pp_bytes=0,
                           stages=[StageProgram(s, chunks[s]) for s in range(p)],
                           schedule="interleaved")


def test_hand_derived_timeline_uneven_interleaved_with_embedding_and_loss_chunks():
    res = simulate(_layout_program("E|tt|t|t|tt|L", 2, 2), FreeNetwork(), record_spans=True)
    ops: dict = {}
    for s in res.spans:
        if s.stream != "compute" or s.kind not in ("forward", "input_grad", "weight_grad"):
            continue
        key = (s.rank, "F" if s.kind == "forward" else "B", s.microbatch, s.chunk)
        lo, hi = ops.get(key, (s.start_ns, s.end_ns))
        ops[key] = (min(lo, s.start_ns), max(hi, s.end_ns))
    for rank, want in EXPECTED.items():
        got = sorted(((k[1], k[2], k[3], *t) for k, t in ops.items() if k[0] == rank),
                     key=lambda x: x[3])
        assert got == want, rank
    assert res.iteration_ns == 315
    assert [st.compute_ns for st in res.ranks] == [210, 270]


# -- Llama 3 405B on 16 stages × 8 chunks ------------------------------------------------------


def _llama_405b(layout: str):
    model = load_model(LLAMA_405B)
    training = Training(global_batch=16, micro_batch=1,
                        split=PipelineSplit(layout=parse_layout(layout)))
    par = parallel_config(LayoutRequest(tp=8, pp=16, dp=1), training, model, 128)
    return model, par


def test_llama_405b_layers_per_stage_and_chunk():
    model, par = _llama_405b(LLAMA_405B_LAYOUT)
    assert (par.pp, par.vpp, par.layout.schedule_name) == (16, 8, "interleaved")
    plan = build_model_plan(model, par)
    per_chunk = [[len(ids) for ids in st.layers] for st in plan.stages]
    assert per_chunk[0] == [0] + [1] * 7  # chunk 0 of stage 0: the embedding alone
    assert per_chunk[15] == [1] * 7 + [0]  # chunk 7 of stage 15: output layer and loss alone
    assert all(row == [1] * 8 for row in per_chunk[1:15])
    assert [sum(row) for row in per_chunk] == [7] + [8] * 14 + [7]  # 126 = 7 + 14·8 + 7
    # layer i on virtual stage i + 1 = chunk (i + 1) // 16 of stage (i + 1) % 16
    assert plan.stages[1].layers[0] == [0] and plan.stages[0].layers[1] == [15]
    assert plan.stages[14].layers[7] == [125]
    names = [[r.name for r in chunk] for chunk in plan.stages[0].chunks]
    assert names[0] and all("embedding" in n for n in names[0])
    last = [r.name for r in plan.stages[15].chunks[7]]
    assert last and not any(n.startswith("layer") for n in last)


def test_llama_405b_simulates_with_the_layout(tmp_path, capsys):
    out = tmp_path / "run.json"
    rc = main(["--model", str(LLAMA_405B), "--topo", str(TOPOLOGIES / "dgx-h100-1024.yaml"),
               "--tp", "8", "--pp", "16", "--dp", "1", "--gpus", "128", "--global-batch", "16",
               "--pipeline-model-parallel-layout", LLAMA_405B_LAYOUT, "--ignore-memory",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    rep = json.loads(out.read_text())
    assert (rep["pipeline_stages"], rep["microbatches"]) == (16, 16)
    assert rep["schedule"] == "interleaved"
    assert rep["ideal_bubble_fraction"] == pytest.approx(15 / (8 * 16))
    assert "8 chunks per stage" in text
    assert any("pipeline layout 'E|(t|)*126,L'" in a and "rank 0: E | t | t | t" in a
               for a in rep["assumptions"])


def test_cli_refusals_are_one_line_exit_2(capsys):
    base = ["--model", str(LLAMA_405B), "--topo", str(TOPOLOGIES / "dgx-h100-1024.yaml"),
            "--tp", "8", "--pp", "16", "--dp", "1", "--gpus", "128", "--global-batch", "16",
            "--ignore-memory", "--pipeline-model-parallel-layout"]
    for extra, message in (
            (["E|(t|)*125,L"], "lists 127 virtual stages, not a multiple of the "
                               "pipeline-parallel size 16"),
            (["E|(t|)*126,x"], "cannot read 'x' at character 12"),
            (["E|(t|)*124,tt|L|"], "after the loss are not modelled"),
            ([LLAMA_405B_LAYOUT, "--vpp", "8"], "leave --vpp out"),
            ([LLAMA_405B_LAYOUT, "--account-for-loss-in-pipeline-split"],
             "cannot be combined with"),
            ([LLAMA_405B_LAYOUT, "--schedule", "zb-v"], "the zb-v schedule places its chunks "
                                                        "otherwise")):
        capsys.readouterr()
        rc = main(base + extra)
        err = capsys.readouterr().err.strip()
        assert rc == 2, extra
        assert len(err.splitlines()) == 1 and FLAG in err and message in err, err


def test_refused_with_a_workload_file(capsys):
    rc = main(["--workload", str(ROOT / "workloads" / "optable-gpt2-large-block.tsv"),
               "--topo", str(TOPOLOGIES / "tiny-2x2.yaml"),
               "--pipeline-model-parallel-layout", "E|t|L"])
    err = capsys.readouterr().err
    assert rc == 2 and "--pipeline-model-parallel-layout: applies to --model runs" in err

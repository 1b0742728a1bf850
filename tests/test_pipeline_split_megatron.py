"""Megatron-Core's uneven split (``get_num_layers_to_build`` / ``get_transformer_layer_offset`` in
megatron/core/transformer/, checks in ``TransformerConfig.__post_init__``), counts derived by hand
from its formula: with ``--account-for-embedding/loss-in-pipeline-split`` every virtual stage gets
``(L + e + l)/(p·v)``, less one on virtual stage 0 (e) and on the last (l), which may leave a
virtual stage with the embedding or the loss alone; with ``--decoder-first/last-pipeline-num-
layers`` the first / last stage holds N, each middle stage ``(L − N…)/(p − …)``, each stage's
count over its ``v`` chunks. Llama 3 405B as NVIDIA's recipe runs it (the flags, PP 16 × VPP 8)
equals the layout ``E|(t|)*126,L`` to the layer and to the ns."""

import pytest
from conftest import ROOT, TOPOLOGIES

from sim.api import prepare_model, run
from sim.cli import main
from sim.errors import UsageError
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import load_model
from sim.parallel.config import Training
from sim.parallel.layer_layout import parse_layout
from sim.parallel.layout import LayoutRequest
from sim.parallel.split import PipelineSplit, stage_layer_counts, virtual_stage_layers
from sim.scenario.model_run import parallel_config

EMB = "--account-for-embedding-in-pipeline-split"
LOSS = "--account-for-loss-in-pipeline-split"
FIRST = "--decoder-first-pipeline-num-layers"
# the options' names in the library's errors (the CLI names them by the flags above)
EMB_, LOSS_ = "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"
FIRST_ = "first_stage_layers"
BOTH = PipelineSplit(account_for_embedding=True, account_for_loss=True)
LLAMA_405B = ROOT / "workloads" / "models" / "llama3-405b.yaml"


@pytest.mark.parametrize("layers, p, v, split, want", [
    # 2 + 2 = 4 over 2 ranks: 2 each, 1 per chunk; virtual stage 0 and 3 lose one -> none left
    (2, 2, 2, BOTH, [0, 1, 1, 0]),
    # 3 + 1 = 4: 1 per virtual stage, virtual stage 0 (chunk 0 of stage 0) the embedding alone
    (3, 2, 2, PipelineSplit(account_for_embedding=True), [0, 1, 1, 1]),
    # 7 + 1 = 8 over 4 ranks × 2 chunks: 1 each, virtual stage 7 (chunk 1 of stage 3) the loss
    (7, 4, 2, PipelineSplit(account_for_loss=True), [1, 1, 1, 1, 1, 1, 1, 0]),
    # 10 + 2 = 12 over 3 ranks: 4 each, 2 per chunk; 1 on virtual stages 0 and 5
    (10, 3, 2, BOTH, [1, 2, 2, 2, 2, 1]),
])
def test_accounted_counts_as_megatrons_formula(layers, p, v, split, want):
    assert virtual_stage_layers(layers, p, v, split) == want


def test_accounted_zero_layer_chunks_numbered_as_megatron_offsets():
    """Megatron's offset of chunk ``c`` of rank ``r``: ``c·(L+e+l)/v + r·(L+e+l)/(p·v) − e``
    (not on virtual stage 0). 2 layers + 2 on 2 × 2: chunk 0 of rank 1 starts at 0 + 1 − 1 = 0,
    chunk 1 of rank 0 at 2 + 0 − 1 = 1."""
    counts = virtual_stage_layers(2, 2, 2, BOTH)
    starts = [sum(counts[:i]) for i in range(4)]
    assert (starts[1], counts[1]) == (0, 1)  # virtual stage 1 = chunk 0 of rank 1: layer 0
    assert (starts[2], counts[2]) == (1, 1)  # virtual stage 2 = chunk 1 of rank 0: layer 1
    assert stage_layer_counts(counts, 2) == [1, 1]


@pytest.mark.parametrize("layers, p, v, split, flag, message", [
    # 5 + 2 = 7 is not divisible by PP 2 (Megatron-Core's first check)
    (5, 2, 2, BOTH, EMB_, "7 cannot be split evenly over the 2 pipeline stages"),
    # 4 + 2 = 6 over 2 ranks: 3 per rank, not divisible by VPP 2 (its second check)
    (4, 2, 2, BOTH, EMB_, "gives 3 per stage, not divisible by the virtual pipeline size 2"),
    (6, 4, 1, PipelineSplit(account_for_loss=True), LOSS_, "7 cannot be split evenly over the 4"),
    # first stage 3 layers not divisible by VPP 2
    (11, 3, 2, PipelineSplit(first_stage_layers=3), FIRST_, "3 layers are not divisible by the "
                                                            "virtual pipeline size 2"),
    # 8 − 2 = 6 over 2 middle stages: 3 each, not divisible by VPP 2
    (8, 3, 2, PipelineSplit(first_stage_layers=2), "vpp", "each middle stage's 3 layers"),
    # 12 − 2 = 10 over 3 middle stages
    (12, 4, 2, PipelineSplit(first_stage_layers=2), FIRST_, "the 10 layers left for the 3 middle"),
    # 4 − 4 = 0 layers for 3 middle stages (Megatron-Core's "Mismatch")
    (4, 4, 1, PipelineSplit(first_stage_layers=4), FIRST_, "cannot be split evenly"),
    (8, 4, 1, PipelineSplit(first_stage_layers=0), FIRST_, "must be ≥ 1, got 0"),
    (10, 2, 1, PipelineSplit(3, 6), "last_stage_layers",
     "3 + 6 must equal the 10 layers"),
    (10, 4, 1, PipelineSplit(2, 2, account_for_loss=True), LOSS_, "cannot be combined"),
])
def test_megatrons_refusals_name_the_option(layers, p, v, split, flag, message):
    with pytest.raises(UsageError) as e:
        virtual_stage_layers(layers, p, v, split)
    assert e.value.field == flag and message in str(e.value)
    assert len(str(e.value).splitlines()) == 1


def test_first_stage_with_chunks_as_megatrons_offsets():
    """14 layers, first stage 2, 4 stages × 2 chunks: middle (14 − 2)/3 = 4 per stage, 2 per
    chunk; stage 0 1 per chunk. Megatron's offset of chunk c of rank r > 0:
    ``c·(1 + 12/2) + 1 + (r − 1)·(12/2 // 3)`` = 7c + 1 + 2(r − 1)."""
    counts = virtual_stage_layers(14, 4, 2, PipelineSplit(first_stage_layers=2))
    assert counts == [1, 2, 2, 2, 1, 2, 2, 2]
    starts = [sum(counts[:i]) for i in range(8)]
    megatron = [7 * c + (1 + 2 * (r - 1) if r else 0) for c in (0, 1) for r in range(4)]
    assert starts == megatron == [0, 1, 3, 5, 7, 8, 10, 12]


# -- Llama 3 405B: NVIDIA's flags = the layout string ------------------------------------------


def _par(split: PipelineSplit, vpp: int | None):
    training = Training(global_batch=16, micro_batch=1, split=split)
    return parallel_config(LayoutRequest(tp=8, pp=16, dp=1, vpp=vpp), training,
                           load_model(LLAMA_405B), 128)


def test_llama_405b_flags_place_the_layers_as_the_layout():
    model = load_model(LLAMA_405B)
    flags = build_model_plan(model, _par(BOTH, 8))
    layout = build_model_plan(model, _par(PipelineSplit(layout=parse_layout("E|(t|)*126,L")),
                                          None))
    assert flags.par.vpp == 8
    per_chunk = [[len(ids) for ids in st.layers] for st in flags.stages]
    # (126 + 2)/(16·8) = 1 per virtual stage; chunk 0 of stage 0 and chunk 7 of stage 15 lose it
    assert per_chunk[0] == [0] + [1] * 7 and per_chunk[15] == [1] * 7 + [0]
    assert all(row == [1] * 8 for row in per_chunk[1:15])
    assert [st.layers for st in flags.stages] == [st.layers for st in layout.stages]
    assert ([[r.name for r in chunk] for st in flags.stages for chunk in st.chunks]
            == [[r.name for r in chunk] for st in layout.stages for chunk in st.chunks])


def test_llama_405b_flags_simulate_as_the_layout():
    """The same iteration to the ns, and the same report but for the split's own line."""
    def outcome(split, vpp):
        lay = LayoutRequest(tp=8, pp=16, dp=1, vpp=vpp, gpus=128)
        return run(prepare_model(str(LLAMA_405B), str(TOPOLOGIES / "dgx-h100-1024.yaml"), lay,
                                 Training(global_batch=16, micro_batch=1, split=split),
                                 ignore_memory=True))
    flags = outcome(BOTH, 8)
    layout = outcome(PipelineSplit(layout=parse_layout("E|(t|)*126,L")), None)
    assert flags.iteration_ns == layout.iteration_ns > 0
    differ = [k for k in flags.report if flags.report[k] != layout.report[k]]
    assert differ == ["assumptions"]


def test_llama_405b_refusal_is_one_line_exit_2(capsys):
    """PP 16 × VPP 3: (126 + 2)/16 = 8 layers per stage, not divisible by 3 (Megatron-Core)."""
    rc = main(["--model", str(LLAMA_405B), "--topo", str(TOPOLOGIES / "dgx-h100-1024.yaml"),
               "--tp", "8", "--pp", "16", "--dp", "1", "--gpus", "128", "--global-batch", "16",
               "--vpp", "3", EMB, LOSS, "--ignore-memory"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert EMB in err and "8 per stage, not divisible by the virtual pipeline size 3" in err

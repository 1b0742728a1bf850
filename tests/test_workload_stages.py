"""From one representative rank's rows to every stage's program."""

import pytest
from conftest import SEED_512, SEED_1024, SEED_OPTABLE

from sim.errors import InputError, UsageError
from sim.workload.aicb import read_aicb
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program, layer_period


def test_seed_1024_structure():
    prog = build_program(read_workload(SEED_1024), LayoutOptions())
    assert (prog.tp, prog.pp, prog.dp, prog.microbatches, prog.vpp, prog.schedule) == (
        8, 16, 8, 16, 1, "1f1b")
    # block = embedding_layer, 8 x (attention_column, attention_row, mlp_column, mlp_row),
    # final_column: embedding on the first stage only, final_column on the last only.
    first, mid, last = prog.stages[0], prog.stages[5], prog.stages[15]
    assert [x.name for x in first.chunks[0]][:2] == ["embedding_layer", "attention_column"]
    assert len(first.chunks[0]) == 33 and len(mid.chunks[0]) == 32 and len(last.chunks[0]) == 33
    assert last.chunks[0][-1].name == "final_column"
    # 134217728-byte sequence-parallel collectives / TP 8
    assert prog.pp_bytes == 134217728 // 8
    assert any("derived" in a for a in prog.assumptions)
    # the DP reduce-scatter is in every stage's epilogue; cross-entropy only on the last
    assert any(t.label == "grad_param_comm.weight_grad" for t in mid.epilogue)
    assert not any(t.label.startswith("cross_entropy") for t in mid.epilogue)
    assert any(t.label.startswith("cross_entropy") for t in last.epilogue)
    assert any(t.label.startswith("embedding_grads") for t in first.epilogue)
    assert not any(t.label.startswith("embedding_grads") for t in mid.epilogue)


def test_row_placement_all_puts_every_row_everywhere():
    prog = build_program(read_workload(SEED_1024), LayoutOptions(row_placement="all"))
    assert all(len(s.chunks[0]) == 34 for s in prog.stages)


def test_seed_512_vpp_interpretation_and_overrides():
    prog = build_program(read_workload(SEED_512), LayoutOptions())
    assert (prog.pp, prog.dp, prog.microbatches, prog.vpp, prog.schedule) == (8, 8, 1, 1, "1f1b")
    assert any("header vpp = 8 cannot be a virtual pipeline size" in a for a in prog.assumptions)
    assert prog.pp_bytes == 20971520
    # with 8 microbatches the header's vpp is a valid virtual pipeline size: 40 layers / 8
    prog = build_program(read_workload(SEED_512), LayoutOptions(microbatches=8))
    assert (prog.vpp, prog.schedule) == (8, "interleaved")
    assert [len(c) for c in prog.stages[3].chunks] == [20] * 8
    assert prog.stages[0].chunks[0][0].name == "embedding_layer"
    with pytest.raises(UsageError, match="N=8 must lie in"):
        build_program(read_workload(SEED_512), LayoutOptions(vpp=8, schedule="interleaved"))
    with pytest.raises(UsageError, match="cannot be split into 3"):
        build_program(read_workload(SEED_512), LayoutOptions(vpp=3, microbatches=8))


def test_optable_defaults_are_stated():
    prog = build_program(read_workload(SEED_OPTABLE), LayoutOptions(default_gpus=16))
    assert (prog.tp, prog.pp, prog.dp, prog.microbatches) == (1, 1, 16, 1)
    assert any("not in the file, using 16" in a for a in prog.assumptions)


def test_gpus_must_be_a_multiple_of_tp_pp():
    with pytest.raises(UsageError, match="not a multiple"):
        build_program(read_workload(SEED_1024), LayoutOptions(all_gpus=1000))


def _rows(names):
    return [f"{n}\t-1\t10\tNONE\t0\t10\tNONE\t0\t10\tNONE\t0\t100" for n in names]


def test_ga_that_does_not_match_the_repeats_is_an_error():
    names = ["opt"] + ["a", "b"] * 3 + ["a"]
    text = "HYBRID_TRANSFORMER_FWD_IN_BCKWD ga: 2\n" + "\n".join(_rows(names)) + "\n"
    with pytest.raises(InputError, match="ga = 2"):
        build_program(read_aicb(text, "g.txt"), LayoutOptions())
    names = ["a", "b", "a", "c", "a", "b", "a", "c"]
    text = "HYBRID_TRANSFORMER_FWD_IN_BCKWD ga: 2\n" + "\n".join(_rows(names)) + "\n"
    prog = build_program(read_aicb(text, "g.txt"), LayoutOptions())
    assert [x.name for x in prog.stages[0].chunks[0]] == ["a", "b", "a", "c"]


def test_layer_period():
    assert layer_period(["a", "b", "c", "d"] * 8) == 4
    assert layer_period(["a", "b", "c"]) == 3
    assert layer_period(["x"] * 5) == 1

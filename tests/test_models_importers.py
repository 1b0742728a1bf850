"""Importers of the two model-description seeds and ``simrun inspect``."""

from __future__ import annotations

import hashlib

import pytest
from conftest import WORKLOADS
from par_support import make_par

from sim.cli.inspect import main
from sim.errors import InputError
from sim.models import generate, total_params
from sim.models.compute import A100, op_time_ns
from sim.models.inspect import detect_format
from sim.models.optimizer import ShampooBlock, block_step_flops, root_flops
from sim.models.vocab.module_tree import import_module_tree, to_model_spec
from sim.models.vocab.param_table import import_param_table
from sim.models.vocab.spec import ModelSpec
from sim.topology.gpu import GpuSpec

TABLE = WORKLOADS / "models" / "gpt2-pipe-stage-params-tp4.txt"
TREE = WORKLOADS / "models" / "megatron-core-gpt-12layer-tree.txt"
# SHA-256 of the seed files the project was created from (000_26f84279e2e38fad.txt and
# 001_90df8f1a29f01651.txt), recorded from the originals so that the check needs no file outside
# the repository.
SEED_SHA256 = {
    "000_26f84279e2e38fad.txt": "3bf48cb0c5ec3d8a2d8ba7edb8a6bd622e949bd65734bc6fe34424ee4be34a65",
    "001_90df8f1a29f01651.txt": "3b1109a5f67516c6b7c1d42967041f59d823950a961f15ef0e965d42fc2e604c",
}
A100_80 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)


def test_shipped_copies_equal_the_seeds():
    assert hashlib.sha256(TABLE.read_bytes()).hexdigest() == SEED_SHA256["000_26f84279e2e38fad.txt"]
    assert hashlib.sha256(TREE.read_bytes()).hexdigest() == SEED_SHA256["001_90df8f1a29f01651.txt"]


def test_param_table_inference():
    info = import_param_table(TABLE)
    assert (info.tp, info.hidden, info.ffn_hidden, info.seq_len) == (4, 1024, 4096, 1024)
    assert info.layers_in_stage == 4 and info.layer_ids == [2, 3, 4, 5]
    assert info.vocab_padded == 50688  # 12672 rows × TP 4


def test_param_table_exact_parameter_counts():
    """By hand from the shapes (h = 1024, t = 4): a layer holds 2 LayerNorms (2·2h), QKV
    3h²/t + 3h/t, projection h²/t + h (bias replicated), fc1 4h²/t + 4h/t, fc2 4h²/t + h."""
    h, t = 1024, 4
    layer = 4 * h + (3 * h * h // t + 3 * h // t) + (h * h // t + h) \
        + (4 * h * h // t + 4 * h // t) + (4 * h * h // t + h)
    assert layer == 3_153_664
    info = import_param_table(TABLE)
    assert info.params_per_layer == {i: layer for i in (2, 3, 4, 5)}
    assert info.embedding_params == 12672 * 1024 + 1024 * 1024
    assert info.params_per_gpu == 4 * layer + 12672 * 1024 + 1024 * 1024 == 26_639_360


def test_param_table_matches_generated_stage_parameters():
    """The generator's first stage of GPT-2 medium at TP 4, PP 6 holds the same 4 layers and
    the embeddings: its parameter count equals the table's exactly."""
    spec = ModelSpec("gpt2-medium", layers=24, hidden=1024, heads=16, vocab=50257, seq_len=1024)
    from sim.models import build_model_plan

    plan = build_model_plan(spec, make_par(tp=4, pp=6, global_batch=6))
    assert plan.stages[0].params == import_param_table(TABLE).params_per_gpu


def test_shampoo_work_by_hand():
    """32 blocks: per layer 2 × (384×1024) QKV, 2 × (1024×128) proj, 2 × (512×1024) fc1,
    2 × (1024×512) fc2, all owned by DP rank 0. Per block: statistics and preconditioning
    4m²n + 4mn², inverse 4th roots 40·m³ + 40·n³ (10 Newton steps × two n×n GEMMs)."""
    def block(m, n):
        return 4 * m * m * n + 4 * m * n * n + 40 * m**3 + 40 * n**3

    per_layer = 2 * block(384, 1024) + 2 * block(1024, 128) + 2 * block(512, 1024) \
        + 2 * block(1024, 512)
    assert per_layer == 388_291_887_104
    info = import_param_table(TABLE)
    assert info.owner_flops() == {0: 4 * per_layer}
    plan = info.shampoo
    assert len(plan.layer_blocks) == 8 and plan.embedding_blocks == ()
    assert plan.per_rank_flops(4, True, dp=2) == [4 * per_layer, 0]
    assert root_flops(1024) == 40 * 1024**3
    assert block_step_flops(ShampooBlock("x", 0, 384, 1024)) == block(384, 1024)


def test_shampoo_becomes_optimizer_work_on_the_owner():
    """Generating with the imported Shampoo plan adds the busiest owner's fp32 work to every
    stage's optimizer task, and all-gathers the roots in the DP group."""
    info = import_param_table(TABLE)
    spec = ModelSpec("gpt2-medium", layers=24, hidden=1024, heads=16, vocab=50257, seq_len=1024)
    par = make_par(tp=4, pp=6, dp=2, global_batch=12)
    adam = generate(spec, par, A100_80)
    shampoo = generate(spec, par, A100_80, optimizer=info.shampoo)
    per_layer_ns = sum(op_time_ns(op, A100_80, A100, "bf16") for op in
                       [info.shampoo.stage_op(1, False, 2)])
    for a, s in zip(adam.stages, shampoo.stages, strict=True):
        opt_a = next(t for t in a.epilogue if t.label == "optimizer")
        opt_s = next(t for t in s.epilogue if t.label == "optimizer")
        extra = opt_s.compute_ns - opt_a.compute_ns
        # 4 layers per stage at 19.5 TFLOP/s fp32 × 80%: ≈ 4 × 24.9 ms
        assert extra == pytest.approx(4 * per_layer_ns - 3 * A100.gemm_overhead_ns, rel=1e-6)
        gather = [t for t in s.epilogue if t.label == "shampoo_root_allgather"]
        assert gather and gather[0].comm.size_bytes == 4 * 4 * sum(
            b.rows**2 + b.cols**2 for b in info.shampoo.layer_blocks)
    assert any("Shampoo" in a for a in shampoo.assumptions)


def test_module_tree_finds_12_layers():
    info = import_module_tree(TREE)
    assert info.layers == 12 and info.layer_type == "TransformerLayer"
    assert info.root_type == "GPTModel"
    assert (info.norm, info.position_embedding) == ("layernorm", "learned")
    assert info.attention == "SelfAttention" and info.mlp == "MLP"
    assert info.has_output_layer and info.moe_experts is None


def test_module_tree_with_gpt2_small_sizes_gives_124m_parameters():
    spec = to_model_spec(import_module_tree(TREE), name="gpt2", hidden=768, heads=12,
                         vocab=50257, seq_len=1024)
    assert spec.layers == 12
    assert total_params(spec) == 124_439_808  # GPT-2 small, as published


@pytest.mark.parametrize("text, line", [
    ("Module: GPTModel\n  Submodule: a (X)\n    Module: Y\n", 3),  # type mismatch
    ("Module: GPTModel\n  nonsense here\n", 2),
    ("  Submodule: a (X)\n", 1),
])
def test_module_tree_errors_name_the_line(tmp_path, text, line):
    p = tmp_path / "tree.txt"
    p.write_text(text)
    with pytest.raises(InputError) as err:
        import_module_tree(p)
    assert err.value.line == line and err.value.file == str(p)


def test_module_tree_without_layers(tmp_path):
    p = tmp_path / "tree.txt"
    p.write_text("Module: GPTModel\n  Submodule: embedding (E)\n    Module: E\n")
    with pytest.raises(InputError, match="layers"):
        import_module_tree(p)


@pytest.mark.parametrize("row, field", [
    ("a;Linear();(3, x);0;[]", "shape"),
    ("a;Linear();(3, 4);zero;[]", "partitioning_ranks"),
    ("a;Linear();(3, 4);0;[torch.Size([3, 3])]", "precs"),
])
def test_param_table_errors_name_line_and_column(tmp_path, row, field):
    p = tmp_path / "t.txt"
    p.write_text("name;module;shape;partitioning_ranks;precs\n" + row + "\n")
    with pytest.raises(InputError) as err:
        import_param_table(p)
    assert (err.value.line, err.value.field) == (2, field)


def test_param_table_bad_header(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("name,module\n")
    with pytest.raises(InputError) as err:
        import_param_table(p)
    assert err.value.line == 1


def test_detect_format():
    assert detect_format(str(TABLE)) == "param-table"
    assert detect_format(str(TREE)) == "module-tree"
    assert detect_format(str(WORKLOADS / "models" / "gpt3-175b.yaml")) == "model-spec"


def test_inspect_param_table(capsys):
    assert main([str(TABLE), "--heads", "16", "--pp", "6"]) == 0
    out = capsys.readouterr().out
    for text in ("tensor parallel: 4", "hidden: 1024", "ffn_hidden: 4096",
                 "sequence length: 1024", "layers in this stage: 4", "26,639,360",
                 "Shampoo: 32 preconditioned blocks", "24 layers"):
        assert text in out


def test_inspect_module_tree_with_sizes(capsys):
    assert main([str(TREE), "--hidden", "768", "--heads", "12", "--vocab", "50257",
                 "--seq-len", "1024"]) == 0
    out = capsys.readouterr().out
    assert "layers: 12 × TransformerLayer" in out and "parameters: 124,439,808" in out


def test_inspect_model_spec(capsys):
    assert main([str(WORKLOADS / "models" / "gpt3-175b.yaml")]) == 0
    assert "parameters: 174,615,846,912" in capsys.readouterr().out


def test_inspect_bad_input_exit_code_2(tmp_path, capsys):
    p = tmp_path / "x.txt"
    p.write_text("hello\n")
    assert main([str(p)]) == 2
    err = capsys.readouterr().err
    assert "not a model description" in err and err.count("\n") == 1


def test_infer_returns_the_typed_result():
    from sim.models.inspect import infer
    from sim.models.vocab.module_tree import ModuleTreeInfo
    from sim.models.vocab.param_table import ParamTableInfo

    assert isinstance(infer(str(TABLE)), ParamTableInfo)
    tree = infer(str(TREE))
    assert isinstance(tree, ModuleTreeInfo) and tree.layers == 12
    assert any("tied" in n for n in tree.notes)
    assert isinstance(infer(str(WORKLOADS / "models" / "llama3-8b.yaml")), ModelSpec)

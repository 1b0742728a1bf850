"""Fuzzing the model-description readers: parameter table (seed 000 format), module tree (seed 001
format) and model spec YAML. Random and mutated inputs, in any encoding, either parse or raise
InputError whose one-line message names the file and the line or field — never another
exception, never a hang."""

from __future__ import annotations

import copy

import yaml
from conftest import WORKLOADS
from fuzz_support import check_reader, encoded, fuzz_settings, mutated_lines
from hypothesis import given
from hypothesis import strategies as st

from sim.models.inspect import describe, summary
from sim.models.vocab.module_tree import import_module_tree
from sim.models.vocab.param_table import import_param_table
from sim.models.vocab.spec import load_model

PARAM_SEED = (WORKLOADS / "models" / "gpt2-pipe-stage-params-tp4.txt").read_text()
TREE_SEED = (WORKLOADS / "models" / "megatron-core-gpt-12layer-tree.txt").read_text()
MODEL_FILES = sorted((WORKLOADS / "models").glob("*.yaml"))
MODEL_SEEDS = [p.read_text() for p in MODEL_FILES]
MODEL_DATA = [yaml.safe_load(t) for t in MODEL_SEEDS]
PARAM_TOKENS = ["(768, 1024)", "(3, 0)", "(1024)", "(1024,,)", "[torch.Size([384, 384]), "
                "torch.Size([1024, 1024])]", "torch.Size([4, 5])", "module.2.input_layernorm",
                "module.x.attention.query_key_value.weight", "FusedLayerNorm()", "(2, 3, 4)"]
TREE_TOKENS = ["Module: GPTModel", "Submodule: layers (ModuleList)", "(TransformerLayer)",
               "Submodule: 0 (TransformerLayer)", "Module: TransformerLayer", "Submodule:",
               "Submodule: mlp (MoELayer)"]


class _Args:
    hidden = heads = ffn_hidden = vocab = seq_len = layers = kv_heads = pp = name = None


def _param_table(path):
    info = import_param_table(path)
    info.lines()
    info.owner_flops()


def _module_tree(path):
    info = import_module_tree(path)
    info.lines()


def _model(path):
    summary(load_model(path))


@fuzz_settings(1200)
@given(data=encoded(mutated_lines([PARAM_SEED], ";", PARAM_TOKENS)))
def test_param_table_mutations(tmp_path_factory, data):
    check_reader(_param_table, tmp_path_factory.mktemp("p") / "params.txt", data)


@fuzz_settings(300)
@given(data=encoded(st.text(max_size=400).map(lambda t: ";".join(
    ("name", "module", "shape", "partitioning_ranks", "precs")) + "\n" + t)))
def test_param_table_random_text(tmp_path_factory, data):
    check_reader(_param_table, tmp_path_factory.mktemp("p") / "params.txt", data)


@fuzz_settings(1000)
@given(data=encoded(mutated_lines([TREE_SEED], None, TREE_TOKENS)))
def test_module_tree_mutations(tmp_path_factory, data):
    check_reader(_module_tree, tmp_path_factory.mktemp("t") / "tree.txt", data)


@fuzz_settings(300)
@given(data=st.one_of(st.binary(max_size=300),
                      encoded(st.text(max_size=300).map(lambda t: "Module: GPTModel\n" + t))))
def test_module_tree_random(tmp_path_factory, data):
    check_reader(_module_tree, tmp_path_factory.mktemp("t") / "tree.txt", data)


# ---- model spec YAML: structured mutations of the parsed mapping, then text mutations ----------
YAML_VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 3, 2**31, 2**63, 10**30, 10**400, 1.5, float("nan"),
                     float("inf"), -0.0, True, False, None, "", "x", "rope", "rmsnorm", [], {},
                     [1, 2], {"experts": 8}, {"experts": 8, "top_k": 9}, "1e400"]),
    st.integers(), st.text(max_size=10))


@st.composite
def mutated_model(draw) -> str:
    data = copy.deepcopy(draw(st.sampled_from(MODEL_DATA)))
    for _ in range(draw(st.integers(1, 3))):
        target = data
        if "moe" in data and isinstance(data["moe"], dict) and draw(st.booleans()):
            target = data["moe"]
        keys = sorted(target, key=str)
        op = draw(st.sampled_from(["set", "set", "del", "add"]))
        if op == "add" or not keys:
            target[draw(st.sampled_from(["hiden", "extra", "moe", "kv_heads", "ffn_hidden", "1"]))
                   ] = copy.deepcopy(draw(YAML_VALUES))
        elif op == "del":
            del target[draw(st.sampled_from(keys))]
        else:
            target[draw(st.sampled_from(keys))] = copy.deepcopy(draw(YAML_VALUES))
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@fuzz_settings(1000)
@given(data=encoded(mutated_model()))
def test_model_yaml_structured_mutations(tmp_path_factory, data):
    check_reader(_model, tmp_path_factory.mktemp("m") / "model.yaml", data)


@fuzz_settings(700)
@given(data=encoded(mutated_lines(MODEL_SEEDS, None, ["&a", "*a", "!!python/object:os.system",
                                                      "!!int", "!!bool", "2001-13-45", "{",
                                                      "[", "? ", "<<:", "---", "..."])))
def test_model_yaml_text_mutations(tmp_path_factory, data):
    check_reader(_model, tmp_path_factory.mktemp("m") / "model.yaml", data)


@fuzz_settings(300)
@given(data=st.one_of(st.binary(max_size=200), encoded(st.text(max_size=200))))
def test_inspect_random_files(tmp_path_factory, data):
    """``simrun inspect`` sniffs the format first (by extension / first line)."""
    d = tmp_path_factory.mktemp("i")
    for name in ("x.txt", "x.yaml"):
        check_reader(lambda p: describe(str(p), _Args()), d / name, data)


"""Dropout of the model spec (``hidden_dropout``, ``attention_dropout``; sim/models/layers.py):
at probability 0 PyTorch's ``dropout`` returns its input, so the fused bias-dropout-add is a
residual add with no backward kernel, the embedding and the unfused attention core have no
dropout kernel; bytes worked out by hand on a tiny layer, exact roofline times, the shipped
recipes' values, the spec's checks and the report's line."""

import json
from dataclasses import replace

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.errors import InputError
from sim.models import build_model_plan, load_model
from sim.models.compute import A100, ops_time_ns
from sim.models.vocab.spec import ModelSpec, model_from_dict
from sim.topology.gpu import GpuSpec

GPU = GpuSpec("round", {"bf16": 100.0}, 80, 2000)  # at 80%: 1600 bytes per ns
# 8 tokens, hidden 16 (e = 128 residual elements), 2 heads of 8
TINY = ModelSpec("tiny", layers=1, hidden=16, heads=2, vocab=128, seq_len=8, ffn_hidden=32,
                 gated_mlp=True, bias=False, norm="rmsnorm", position_embedding="rope",
                 tied_embeddings=False)


def rows(model, **kw):
    par = make_par(tp=kw.pop("tp", 1), global_batch=1, **kw)
    return {r.name: r for r in build_model_plan(model, par).stages[0].rows()}


def listing(ops, word):
    return [(op.name, op.kernel, op.bytes) for op in ops if word in op.name]


def test_bias_dropout_add_with_and_without_dropout():
    # with dropout: forward reads x and the residual, writes y (2 bytes each) and the 1-byte
    # mask: 7 × 128; backward reads dy and the mask, writes dx: 5 × 128
    r = rows(TINY)
    assert listing(r["layer0_mlp_norm"].fwd, "bda") == [("attn_bda", "dropout_add", 896)]
    assert listing(r["layer0_mlp_norm"].ig, "bda") == [("attn_bda_grad", "", 640)]
    assert listing(r["layer0_mlp_out"].fwd + r["layer0_mlp_out"].ig, "bda") == [
        ("mlp_bda", "dropout_add", 896), ("mlp_bda_grad", "", 640)]
    # without: an add (6 × 128) timed as the measured add kind, nothing backward
    r0 = rows(replace(TINY, hidden_dropout=0.0))
    assert listing(r0["layer0_mlp_norm"].fwd, "bda") == [("attn_bda", "add", 768)]
    assert listing(r0["layer0_mlp_norm"].ig, "bda") == []
    assert r0["layer0_mlp_out"].ig == ()
    # 2 µs + 768 B at 1600 B/ns = 2000.48 ns → 2001, against 2000.56 (forward) + 2000.4
    # (backward) → 4001 with dropout
    assert ops_time_ns(r0["layer0_mlp_out"].fwd, GPU, A100, "bf16") == 2001
    assert ops_time_ns(r["layer0_mlp_out"].fwd + r["layer0_mlp_out"].ig, GPU, A100,
                       "bf16") == 4001


def test_embedding_dropout_only_with_a_probability():
    e = 8 * 16
    r = rows(TINY)
    assert [(op.name, op.bytes) for op in r["embedding_dropout"].ops()] == [
        ("embedding_dropout", 5 * e), ("embedding_dropout_grad", 5 * e)]
    assert rows(replace(TINY, hidden_dropout=0.0))["embedding_dropout"].ops() == ()


def test_unfused_attention_dropout_only_with_a_probability():
    # b·(a/t)·s² = 2 × 64 = 128 probabilities, 2 + 2 + 1 bytes each way
    r = rows(TINY, attention_backend="unfused")["layer0_attn_qkv"]
    assert listing(r.fwd + r.ig, "dropout") == [("attn_dropout", "", 640),
                                                ("attn_dropout_grad", "", 640)]
    r0 = rows(replace(TINY, attention_dropout=0.0), attention_backend="unfused")
    assert listing(r0["layer0_attn_qkv"].fwd + r0["layer0_attn_qkv"].ig, "dropout") == []
    # a fused kernel runs the same with either probability (stated assumption)
    a = rows(TINY)["layer0_attn_qkv"]
    b = rows(replace(TINY, attention_dropout=0.0))["layer0_attn_qkv"]
    assert a.fwd == b.fwd and a.ig == b.ig


def test_eager_layer_is_torchtitans_whatever_the_probability():
    a = rows(TINY, compile=False)
    b = rows(replace(TINY, hidden_dropout=0.0), compile=False)
    layer = [n for n in a if n.startswith("layer0")]
    assert [(a[n].fwd, a[n].ig) for n in layer] == [(b[n].fwd, b[n].ig) for n in layer]


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
                                  "llama3-70b", "llama3-405b", "nemotron-8b", "nemotron-22b",
                                  "nemotron-340b", "mixtral-8x7b", "mixtral-8x22b"])
def test_recipes_without_dropout(name):
    m = load_model(str(ROOT / "workloads" / "models" / f"{name}.yaml"))
    assert (m.hidden_dropout, m.attention_dropout) == (0.0, 0.0)


def test_gpt3_recipes_keep_megatrons_default():
    m = load_model(str(ROOT / "workloads" / "models" / "gpt3-5b.yaml"))
    assert (m.hidden_dropout, m.attention_dropout) == (0.1, 0.1)


@pytest.mark.parametrize("value", [1.0, 1, -0.1, "0.1", True, None, float("nan")])
def test_spec_refuses_a_value_that_is_not_a_probability(value):
    data = {"name": "x", "layers": 1, "hidden": 16, "heads": 2, "vocab": 8, "seq_len": 8,
            "hidden_dropout": value}
    with pytest.raises(InputError) as err:
        model_from_dict(data, file="m.yaml")
    assert err.value.field == "hidden_dropout"


def test_spec_reads_a_probability():
    data = {"name": "x", "layers": 1, "hidden": 16, "heads": 2, "vocab": 8, "seq_len": 8,
            "hidden_dropout": 0, "attention_dropout": 0.25}
    m = model_from_dict(data, file="m.yaml")
    assert (m.hidden_dropout, m.attention_dropout) == (0.0, 0.25)


def test_report_states_the_probabilities(tmp_path):
    spec = tmp_path / "m.yaml"
    spec.write_text((ROOT / "tests/data/tiny-llama-2layer.yaml").read_text()
                    + "hidden_dropout: 0.0\nattention_dropout: 0.0\n")
    lines = {}
    for name, path in (("default", ROOT / "tests/data/tiny-llama-2layer.yaml"), ("zero", spec)):
        out = tmp_path / f"{name}.json"
        assert main(["--model", str(path), "--topo", "tiny-2x2", "--tp", "1", "--global-batch",
                     "4", "--json", str(out), "--quiet"]) == 0
        rep = json.loads(out.read_text())
        lines[name] = (next(a for a in rep["assumptions"] if a.startswith("dropout")),
                       rep["iteration_time_s"])
    assert lines["default"][0].startswith("dropout (model spec; Megatron-Core's default 0.1): "
                                          "hidden_dropout 0.1: the fused bias-dropout-add")
    assert "hidden_dropout 0: PyTorch's dropout returns its input" in lines["zero"][0]
    assert "attention_dropout 0: none in the fused attention kernel" in lines["zero"][0]
    assert lines["zero"][1] < lines["default"][1]

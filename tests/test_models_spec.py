"""Model specs: the shipped YAML files load, parameter counts equal published numbers and the
Narayanan formula, and bad specs are rejected with file and key named."""

from __future__ import annotations

import pytest
from conftest import WORKLOADS

from sim.errors import InputError
from sim.models import load_model, model_from_dict, total_params
from sim.models.flops import narayanan_params

MODELS = WORKLOADS / "models"


# Published parameter counts (Hugging Face model cards / config-derived totals).
@pytest.mark.parametrize("name, params", [
    ("gpt2-medium", 354_823_168),
    ("gpt2-large", 774_030_080),
    ("llama2-70b", 68_976_648_192),
    ("llama3-8b", 8_030_261_248),
    ("mixtral-8x7b", 46_702_792_704),
])
def test_parameter_count_matches_published(name, params):
    assert total_params(load_model(MODELS / f"{name}.yaml")) == params


@pytest.mark.parametrize("name, layers, hidden", [
    ("gpt-22b", 48, 6144), ("gpt3-175b", 96, 12288), ("gpt-530b", 105, 20480),
    ("gpt-1t", 128, 25600),
])
def test_gpt_parameter_count_equals_narayanan_formula(name, layers, hidden):
    m = load_model(MODELS / f"{name}.yaml")
    assert (m.layers, m.hidden, m.vocab, m.seq_len) == (layers, hidden, 51200, 2048)
    assert m.is_gpt_style
    L, h, V, s = layers, hidden, 51200, 2048
    # P = 12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h)), plus the final LayerNorm (2h) that the
    # formula leaves out.
    formula = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))
    assert narayanan_params(m) == round(formula)
    assert total_params(m) == narayanan_params(m) + 2 * h


# Narayanan et al. SC'21 Table 1, "Number of parameters (billion)" as the Megatron-LM README
# image shows it (commit 50a4b5fa0280a160cc1b03a1c15faddbc1b1da9a, images/cases_april2021.png);
# the paper computes the column with its Eq. 2 from layers, hidden, V = 51,200 and s = 2048.
@pytest.mark.parametrize("name, billions", [
    ("gpt-1.7b", 1.7), ("gpt-3.6b", 3.6), ("gpt-7.5b", 7.5), ("gpt-18b", 18.4),
    ("gpt-39b", 39.1), ("gpt-76b", 76.1), ("gpt-145b", 145.6), ("gpt-310b", 310.1),
    ("gpt-530b", 529.6), ("gpt-1t", 1008.0),
])
def test_sc21_table1_models_have_the_published_parameter_counts(name, billions):
    m = load_model(MODELS / f"{name}.yaml")
    assert (m.vocab, m.seq_len) == (51200, 2048) and m.is_gpt_style
    assert round(narayanan_params(m) / 1e9, 1) == billions


def test_gpt3_175b_has_175_billion_parameters():
    assert total_params(load_model(MODELS / "gpt3-175b.yaml")) == 174_615_846_912


def test_every_shipped_spec_loads():
    files = sorted(MODELS.glob("*.yaml"))
    assert len(files) >= 8
    names = [load_model(f).name for f in files]
    assert len(set(names)) == len(names)


def test_qwen3_moe_parameter_counts_by_hand():
    """Qwen3-30B-A3B per layer: QKV 2048·(32·128 + 2·4·128), projection 4096·2048, 128 SwiGLU
    experts of 3·2048·768, router 2048·128, two RMSNorms and the q and k norms (128 each,
    qk_layernorm); plus untied embedding and output 151936·2048 and the final norm.
    Qwen3-235B-A22B likewise (94 × hidden 4096, 64 heads, experts of 1536)."""
    def total(L, h, a, kv, fe):
        q = a * 128
        layer = h * (q + 2 * kv * 128) + q * h + 128 * 3 * h * fe + h * 128 + 2 * h + 2 * 128
        return L * layer + 2 * 151936 * h + h
    assert total(48, 2048, 32, 4, 768) == 30_532_122_624
    assert total_params(load_model(MODELS / "qwen3-30b-a3b.yaml")) == 30_532_122_624
    assert total_params(load_model(MODELS / "qwen3-235b-a22b.yaml")) == total(
        94, 4096, 64, 4, 1536)


def test_kv_channels_need_not_divide_hidden():
    """Megatron-Core's kv_channels sets the head width; hidden need not be heads·kv_channels
    (nor divisible by heads) then, and without it hidden must divide by heads."""
    m = model_from_dict({"name": "x", "layers": 2, "hidden": 2880, "heads": 64, "kv_heads": 8,
                         "kv_channels": 64, "vocab": 100, "seq_len": 32})
    assert (m.head_dim, m.q_hidden, m.kv_hidden, m.is_gpt_style) == (64, 4096, 512, False)
    m = model_from_dict({"name": "x", "layers": 2, "hidden": 100, "heads": 3,
                         "kv_channels": 32, "vocab": 100, "seq_len": 32})
    assert m.q_hidden == 96
    with pytest.raises(InputError, match="not divisible by heads"):
        model_from_dict({"name": "x", "layers": 2, "hidden": 100, "heads": 3, "vocab": 100,
                         "seq_len": 32})


def test_defaults():
    m = model_from_dict({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
                         "seq_len": 32})
    assert (m.ffn_hidden, m.kv_heads, m.head_dim, m.kv_hidden) == (256, 4, 16, 64)
    assert (m.kv_channels, m.q_hidden) == (16, 64)
    assert m.is_gpt_style and m.moe is None


BASE = "name: x\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\nseq_len: 32\n"


@pytest.mark.parametrize("text, field, words", [
    (BASE + "hiden: 3\n", "hiden", "unknown key"),
    (BASE.replace("vocab: 100\n", ""), "vocab", "missing"),
    (BASE.replace("layers: 2", "layers: 0"), "layers", "positive"),
    (BASE.replace("layers: 2", "layers: -4"), "layers", "positive"),
    (BASE.replace("layers: 2", "layers: 2.5"), "layers", "positive integer"),
    (BASE.replace("layers: 2", "layers: true"), "layers", "positive integer"),
    (BASE + "gated_mlp: 1\n", "gated_mlp", "true or false"),
    (BASE + "norm: batchnorm\n", "norm", "layernorm"),
    (BASE.replace("heads: 4", "heads: 5"), "heads", "divisible"),
    (BASE + "kv_heads: 3\n", "kv_heads", "divisible"),
    (BASE + "moe: {experts: 8}\n", "moe.top_k", "missing"),
    (BASE + "moe: {experts: 8, top_k: 9}\n", "moe.top_k", "experts"),
    (BASE + "moe: {experts: 1, top_k: 1}\n", "moe.experts", "≥ 2"),
    (BASE + "moe: {experts: 8, top_k: 2, capacity: 1}\n", "moe.capacity", "unknown key"),
])
def test_bad_spec_names_file_and_key(tmp_path, text, field, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_model(path)
    assert err.value.file == str(path)
    assert err.value.field == field
    assert words in err.value.message
    assert "\n" not in str(err.value)


def test_invalid_yaml_names_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nlayers: [1,\n")
    with pytest.raises(InputError) as err:
        load_model(path)
    assert err.value.file == str(path) and err.value.line is not None


def test_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(InputError, match="mapping"):
        load_model(path)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_model(tmp_path / "nope.yaml")


def test_bloom_176b_parameter_count_matches_paper():
    # BLOOM paper (arXiv:2211.05100, its model-size table): 176,247M parameters. simrun leaves
    # out the embedding LayerNorm (2h = 28,672 parameters), which does not change the millions.
    m = load_model(MODELS / "bloom-176b.yaml")
    assert (m.layers, m.hidden, m.heads, m.vocab, m.seq_len) == (70, 14336, 112, 250880, 2048)
    assert total_params(m) // 1_000_000 == 176_247

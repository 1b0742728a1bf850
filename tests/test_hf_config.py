"""Hugging Face ``config.json`` given to ``--model`` (sim/models/vocab/hf_config.py): the real
Meta Llama 3 8B Instruct config (workloads/hf/, NOTICE there) maps to exactly the shipped
``llama3-8b`` spec and gives the same iteration time to the ns; other architectures map field
by field; unknown architectures and fields the spec cannot express are refused naming them."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.api import LayoutRequest, prepare_model, run
from sim.cli import main
from sim.errors import InputError
from sim.models.vocab.spec import load_model

LLAMA3_CONFIG = ROOT / "workloads/hf/meta-llama-3-8b-instruct/config.json"


def test_llama3_8b_config_is_the_shipped_spec_field_by_field():
    hf, shipped = load_model(LLAMA3_CONFIG), load_model("llama3-8b")
    differ = {f.name for f in dataclasses.fields(hf)
              if getattr(hf, f.name) != getattr(shipped, f.name)}
    assert differ == {"name"}
    # the published values, read independently of the mapping
    assert (hf.layers, hf.hidden, hf.heads, hf.kv_heads, hf.ffn_hidden, hf.vocab, hf.seq_len) \
        == (32, 4096, 32, 8, 14336, 128256, 8192)


@pytest.mark.slow
def test_llama3_8b_config_and_shipped_spec_give_the_same_iteration_ns():
    layout = LayoutRequest(tp=4, pp=2, microbatches=4)
    times = [run(prepare_model(str(m), "dgx-h100-1024", layout, nodes=1)).iteration_ns
             for m in (LLAMA3_CONFIG, "llama3-8b")]
    assert times[0] == times[1] > 0


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg, indent=2))
    return p


QWEN3_30B = {  # a Qwen3-MoE config.json with the sizes of workloads/models/qwen3-30b-a3b.yaml
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 4096,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}


def test_qwen3_moe_maps_to_the_shipped_spec(tmp_path):
    # max_position_embeddings 4096: the spec's seq_len is the config's context length
    hf = load_model(_write(tmp_path, QWEN3_30B))
    shipped = load_model("qwen3-30b-a3b")
    assert dataclasses.replace(hf, name=shipped.name) == shipped


def test_gpt2_maps_to_a_gpt_style_spec(tmp_path):
    cfg = {"architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
           "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1, "n_ctx": 1024,
           "n_embd": 1280, "n_head": 20, "n_layer": 36, "n_positions": 1024,
           "layer_norm_epsilon": 1e-05, "vocab_size": 50257, "model_type": "gpt2"}
    spec = load_model(_write(tmp_path, cfg))
    assert spec.is_gpt_style
    assert (spec.layers, spec.hidden, spec.heads, spec.seq_len, spec.ffn_hidden) == \
        (36, 1280, 20, 1024, 5120)


def test_deepseek_v3_moe_fields_and_mla_refused(tmp_path):
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
           "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
           "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
           "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
           "vocab_size": 129280, "max_position_embeddings": 4096, "kv_lora_rank": 512}
    with pytest.raises(InputError) as e:
        load_model(_write(tmp_path, cfg))
    assert e.value.field == "kv_lora_rank" and "latent attention" in e.value.message
    del cfg["kv_lora_rank"]
    moe = load_model(_write(tmp_path, cfg)).moe
    assert (moe.experts, moe.top_k, moe.expert_ffn_hidden, moe.shared_experts,
            moe.dense_layers) == (256, 8, 2048, 1, 3)


@pytest.mark.parametrize("change, field", [
    ({"architectures": ["BertForMaskedLM"]}, "architectures"),
    ({"sliding_window": 4096}, "sliding_window"),
    ({"hidden_act": "relu"}, "hidden_act"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"some_new_field": 1}, "some_new_field"),
    ({"num_key_value_heads": 7}, "num_key_value_heads"),
    ({"hidden_size": -1}, "hidden_size"),
])
def test_bad_configs_exit_2_naming_file_line_and_field(tmp_path, capsys, change, field):
    cfg = {**json.loads(LLAMA3_CONFIG.read_text()), **change}
    p = _write(tmp_path, cfg)
    rc = main(["--model", str(p), "--topo", "dgx-h100-1024", "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    line = next(i for i, t in enumerate(p.read_text().splitlines(), 1) if f'"{field}"' in t)
    assert f"{p}:{line}: {field}:" in err, err


def test_truncated_json_names_the_line(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(LLAMA3_CONFIG.read_text()[:200])
    rc = main(["--model", str(p), "--topo", "dgx-h100-1024", "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "not valid JSON" in err


def test_mixtral_maps_to_the_shipped_spec(tmp_path):
    # a config.json of the Mixtral shape holding the sizes of workloads/models/mixtral-8x7b.yaml
    # (max_position_embeddings 4096: the spec's seq_len is the config's context length)
    cfg = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0,
           "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
           "initializer_range": 0.02, "intermediate_size": 14336,
           "max_position_embeddings": 4096, "model_type": "mixtral",
           "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
           "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
           "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000}
    hf, shipped = load_model(_write(tmp_path, cfg)), load_model("mixtral-8x7b")
    assert dataclasses.replace(hf, name=shipped.name) == shipped


def test_gemma_head_dim_sets_the_attention_width(tmp_path):
    cfg = {"architectures": ["GemmaForCausalLM"], "head_dim": 256,
           "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3072,
           "intermediate_size": 24576, "max_position_embeddings": 8192,
           "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 16,
           "vocab_size": 256000}
    spec = load_model(_write(tmp_path, cfg))
    assert (spec.q_hidden, spec.kv_hidden, spec.tied_embeddings, spec.gated_mlp) == \
        (16 * 256, 16 * 256, True, True)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) |
                     st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) |
                     st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from([*json.loads(LLAMA3_CONFIG.read_text()), "sliding_window",
                            "head_dim", "mlp_bias", "num_experts_per_tok"]),
       value=_JSON, arch=st.sampled_from(["LlamaForCausalLM", "MixtralForCausalLM",
                                          "Qwen3MoeForCausalLM", "GPT2LMHeadModel",
                                          "DeepseekV3ForCausalLM", "GemmaForCausalLM"]))
def test_any_field_value_is_a_spec_or_an_input_error(tmp_path_factory, key, value, arch):
    cfg = {**json.loads(LLAMA3_CONFIG.read_text()), key: value}
    if key != "architectures":
        cfg["architectures"] = [arch]
    p = tmp_path_factory.mktemp("fz") / "config.json"
    p.write_text(json.dumps(cfg))
    try:
        load_model(p)
    except InputError as e:
        assert e.field and str(p) in e.format()

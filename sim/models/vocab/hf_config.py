"""Hugging Face ``config.json`` → :class:`~sim.models.vocab.spec.ModelSpec` (``--model FILE``).

A file whose JSON object has an ``architectures`` field is read as a Hugging Face
(``transformers``) model configuration. Every field it holds is one of three things
(docs/workload-formats.md has the table):

- **mapped** to a spec key (``hidden_size`` → ``hidden``, ``num_key_value_heads`` →
  ``kv_heads``, ``num_experts_per_tok`` → ``moe.top_k``, ...);
- **irrelevant** to the time of an iteration (:data:`IRRELEVANT`: token ids, ``torch_dtype``
  — the precision is ``--dtype``'s —, initialisation, RoPE's base and frequency scaling, norm
  epsilons, router loss coefficients, inference switches);
- **refused**, naming the field, when it asks for something the spec cannot express (a
  sliding window shorter than the sequence, multi-head latent attention, MoE only every k-th
  layer, an activation simrun does not time as given, ...).

A field that is none of these is refused as unknown. The sequence length is the model's
``max_position_embeddings`` (``n_positions`` for GPT-2): the spec's ``seq_len``.
"""

from __future__ import annotations

import json
from typing import Any

from sim.errors import InputError
from sim.files.inputs import show

MAX_FIELDS = 512  # real configs have < 80 top-level fields

#: Fields that do not change an iteration's time: token ids, bookkeeping, numerics (epsilons,
#: RoPE base and frequency scaling, initialisation), inference-only switches, router
#: loss coefficients (a scalar multiply of a loss).
IRRELEVANT = frozenset((
    "_name_or_path", "model_type", "bos_token_id", "eos_token_id", "pad_token_id",
    "torch_dtype", "dtype", "transformers_version", "use_cache", "initializer_range",
    "rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "pretraining_tp", "output_router_logits", "router_aux_loss_coef",
    "norm_topk_prob", "max_window_layers", "tokenizer_class", "task_specific_params",
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "summary_first_dropout", "scale_attn_weights", "n_ctx", "aux_loss_alpha", "seq_aux",
    "routed_scaling_factor", "scoring_func", "topk_method", "n_group", "topk_group",
    "ep_size", "num_nextn_predict_layers", "router_jitter_noise", "attn_implementation",
    "auto_map",
))

# HF field → spec key, for the Llama-like families (Llama, Mistral, Mixtral, Qwen2/3, Gemma).
_LLAMA_SIZES = {"hidden_size": "hidden", "num_hidden_layers": "layers",
                "num_attention_heads": "heads", "num_key_value_heads": "kv_heads",
                "intermediate_size": "ffn_hidden", "vocab_size": "vocab",
                "max_position_embeddings": "seq_len", "head_dim": "kv_channels"}
_GPT2_SIZES = {"n_embd": "hidden", "n_layer": "layers", "n_head": "heads",
               "vocab_size": "vocab", "n_positions": "seq_len", "n_inner": "ffn_hidden"}


def _family(arch: str) -> tuple[str, dict[str, Any]]:
    """(family, fixed spec keys) of a known architecture name."""
    llama = {"gated_mlp": True, "norm": "rmsnorm", "position_embedding": "rope",
             "bias": False, "hidden_dropout": 0.0, "attention_dropout": 0.0}
    table = {
        "LlamaForCausalLM": ("llama", llama),
        "MistralForCausalLM": ("llama", llama),
        "MixtralForCausalLM": ("mixtral", llama),
        "Qwen2ForCausalLM": ("qwen2", llama),
        "Qwen3ForCausalLM": ("qwen3", {**llama, "qk_layernorm": True}),
        "Qwen3MoeForCausalLM": ("qwen3moe", {**llama, "qk_layernorm": True}),
        "GemmaForCausalLM": ("gemma", {**llama, "tied_embeddings": True}),
        "DeepseekV3ForCausalLM": ("deepseekv3", llama),
        "GPT2LMHeadModel": ("gpt2", {"gated_mlp": False, "norm": "layernorm",
                                     "position_embedding": "learned", "bias": True,
                                     "tied_embeddings": True}),
    }
    return table[arch]


KNOWN_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
                       "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
                       "GemmaForCausalLM", "DeepseekV3ForCausalLM", "GPT2LMHeadModel")


def is_hf_config(text: str) -> bool:
    """Whether ``text`` is a JSON object with an ``architectures`` field (cheap sniff)."""
    return text.lstrip().startswith("{") and '"architectures"' in text


class _Reader:
    """Walks one config's fields, recording which were consumed."""

    def __init__(self, data: dict, file: str, text: str):
        self.data, self.file, self.text = data, file, text
        self.used: set[str] = set()

    def error(self, message: str, key: str) -> InputError:
        return InputError(message, file=self.file, line=_key_line(self.text, key), field=key)

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.data.get(key, default)

    def refuse_if(self, key: str, bad, why: str) -> None:
        """Refuse ``key`` when present and ``bad(value)``."""
        self.used.add(key)
        if key in self.data and bad(self.data[key]):
            raise self.error(f"{show(self.data[key])}: {why}", key)

    def prob(self, key: str) -> float | None:
        self.used.add(key)
        v = self.data.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1:
            raise self.error(f"must be a probability 0 ≤ p < 1, got {show(v)}", key)
        return float(v)

    def flag(self, key: str) -> bool | None:
        self.used.add(key)
        v = self.data.get(key)
        if v is not None and not isinstance(v, bool):
            raise self.error(f"must be true or false, got {show(v)}", key)
        return v


def _key_line(text: str, key: str) -> int | None:
    """The 1-based line of the first ``"key":`` in ``text`` (None when absent)."""
    needle = json.dumps(key)
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    return None


def model_from_hf_config(text: str, file: str) -> dict[str, Any]:
    """The spec mapping (for :func:`~sim.models.vocab.spec.model_from_dict`) of a Hugging
    Face ``config.json``'s text; raises :class:`InputError` naming the file, line and field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON: {e.msg}", file=file, line=e.lineno,
                         field="config.json") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise InputError("nested too deeply", file=file, field="config.json") from None
    if not isinstance(data, dict) or len(data) > MAX_FIELDS:
        raise InputError(f"must be a JSON object of at most {MAX_FIELDS} fields", file=file,
                         field="config.json")
    r = _Reader(data, file, text)
    arch = r.get("architectures")
    if not (isinstance(arch, list) and len(arch) == 1 and arch[0] in KNOWN_ARCHITECTURES):
        raise r.error(f"{show(arch)} is not a known architecture (known: "
                      f"{', '.join(KNOWN_ARCHITECTURES)})", "architectures")
    family, spec = _family(arch[0])
    spec = {"name": _name(data, file), **spec}
    sizes = _GPT2_SIZES if family == "gpt2" else _LLAMA_SIZES
    for hf, key in sizes.items():
        v = r.get(hf)
        if v is not None:
            spec[key] = v
    (_gpt2 if family == "gpt2" else _llama_like)(r, family, spec)
    if family in ("mixtral", "qwen3moe", "deepseekv3"):
        spec["moe"] = _moe(r, family)
    for key in data:
        if key not in r.used and key not in IRRELEVANT:
            raise r.error(f"field not modelled for {arch[0]} (docs/workload-formats.md lists "
                          "the fields simrun maps, ignores as irrelevant, or refuses)", key)
    return spec


def _name(data: dict, file: str) -> str:
    name = data.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return name.strip()[:120]
    return file.replace("\\", "/").rsplit("/", 2)[-2] if "/" in file else "hf-config"


def _llama_like(r: _Reader, family: str, spec: dict[str, Any]) -> None:
    """Attention and MLP switches of the Llama-like families."""
    act_key = "hidden_activation" if family == "gemma" else "hidden_act"
    acts = ("gelu_pytorch_tanh", "gelu") if family == "gemma" else ("silu",)
    r.used.update(("hidden_act", "hidden_activation"))
    act = r.data.get(act_key) or r.data.get("hidden_act") or acts[0]
    if act not in acts:
        raise r.error(f"{show(act)}: the gated MLP is timed with {' / '.join(acts)}", act_key)
    tied = r.flag("tie_word_embeddings")
    if tied is not None:
        spec["tied_embeddings"] = tied
    elif family != "gemma":
        spec["tied_embeddings"] = False
    bias = {k: bool(r.flag(k)) for k in ("attention_bias", "mlp_bias")}
    if bias["attention_bias"] != bias["mlp_bias"]:
        key = "attention_bias" if bias["attention_bias"] else "mlp_bias"
        raise r.error("true while the other is false: the spec's bias is on every linear "
                      "layer or on none", key)
    if bias["attention_bias"]:
        spec["bias"] = True
    p = r.prob("attention_dropout")
    if p is not None:
        spec["attention_dropout"] = p
    sw = r.get("sliding_window")
    window = r.flag("use_sliding_window")
    if sw is not None and (isinstance(sw, bool) or not isinstance(sw, int)):
        raise r.error(f"must be an integer or null, got {show(sw)}", "sliding_window")
    seq = spec.get("seq_len")
    if sw is not None and window is not False and isinstance(seq, int) and sw < seq:
        raise r.error(f"{show(sw)}: sliding-window attention (a window shorter than the "
                      f"sequence {spec.get('seq_len')}) is not modelled", "sliding_window")
    if family == "deepseekv3":
        for key in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                    "v_head_dim"):
            r.refuse_if(key, lambda v: v is not None,
                        "multi-head latent attention (MLA) is not modelled: the spec has "
                        "standard multi-head attention (workloads/models/deepseek-v3-like.yaml "
                        "approximates it and says how)")


def _moe(r: _Reader, family: str) -> dict[str, Any]:
    """The ``moe`` mapping of Mixtral, Qwen3-MoE and DeepSeek-V3 configs."""
    experts = {"mixtral": "num_local_experts", "qwen3moe": "num_experts",
               "deepseekv3": "n_routed_experts"}[family]
    moe: dict[str, Any] = {"experts": r.get(experts), "top_k": r.get("num_experts_per_tok")}
    width = r.get("moe_intermediate_size")
    if width is not None:
        moe["expert_ffn_hidden"] = width
    if family == "qwen3moe":
        r.refuse_if("decoder_sparse_step", lambda v: v != 1,
                    "MoE only every k-th layer is not modelled (the spec's MoE is in every "
                    "layer after its dense ones)")
        r.refuse_if("mlp_only_layers", lambda v: v not in (None, []),
                    "dense layers other than the first ones are not modelled")
    if family == "deepseekv3":
        shared = r.get("n_shared_experts")
        if shared:
            moe["shared_experts"] = shared
        dense = r.get("first_k_dense_replace")
        if dense:
            moe["dense_layers"] = dense
        r.refuse_if("moe_layer_freq", lambda v: v != 1,
                    "MoE only every k-th layer is not modelled")
    return moe


def _gpt2(r: _Reader, family: str, spec: dict[str, Any]) -> None:
    """GPT-2's activation, dropouts and attention switches."""
    del family
    r.refuse_if("activation_function", lambda v: v not in ("gelu_new", "gelu"),
                "the MLP is timed with GeLU (gelu_new / gelu)")
    resid, embd = r.prob("resid_pdrop"), r.prob("embd_pdrop")
    if resid is not None:
        spec["hidden_dropout"] = resid
    if embd is not None and embd != spec.get("hidden_dropout", 0.1):
        raise r.error(f"{embd} differs from resid_pdrop: the embedding dropout is timed with "
                      "the hidden dropout's probability (Megatron's hidden_dropout)", "embd_pdrop")
    p = r.prob("attn_pdrop")
    if p is not None:
        spec["attention_dropout"] = p
    r.refuse_if("reorder_and_upcast_attn", lambda v: v is True,
                "attention scores in fp32 are not modelled")
    r.refuse_if("scale_attn_by_inverse_layer_idx", lambda v: v not in (False, None),
                "must be false: a per-layer score scale is not modelled")
    r.refuse_if("add_cross_attention", lambda v: v not in (False, None),
                "cross-attention is not modelled (decoder-only models)")
    tied = r.flag("tie_word_embeddings")
    if tied is not None:
        spec["tied_embeddings"] = tied


def hf_field(spec_key: str | None, text: str) -> str | None:
    """The field of the config.json ``text`` that a spec key comes from (for error
    messages), else the key."""
    moe = {"moe.experts": ("num_local_experts", "num_experts", "n_routed_experts"),
           "moe.top_k": ("num_experts_per_tok",), "moe.dense_layers": ("first_k_dense_replace",),
           "moe.expert_ffn_hidden": ("moe_intermediate_size",),
           "moe.shared_experts": ("n_shared_experts",)}
    names = [k for table in (_LLAMA_SIZES, _GPT2_SIZES) for k, v in table.items()
             if v == spec_key] + list(moe.get(spec_key or "", ()))
    return next((k for k in names if json.dumps(k) in text), spec_key)


def key_line(text: str, key: str | None) -> int | None:
    """The line of ``key`` in a config.json's ``text`` (None when absent)."""
    return _key_line(text, key) if key else None

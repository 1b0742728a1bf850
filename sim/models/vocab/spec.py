"""Model specifications: a decoder-only transformer's architecture (``workloads/models/*.yaml``).

A :class:`ModelSpec` holds sizes only (no parallel layout). Defaults describe a GPT-style model
(Megatron GPT / GPT-3): learned position embeddings, biases, LayerNorm, GeLU MLP with
``ffn_hidden = 4·hidden``, word embeddings tied to the output layer. Llama-style models set
``gated_mlp``, ``kv_heads``, ``norm: rmsnorm``, ``bias: false``, ``position_embedding: rope`` and
``tied_embeddings: false``.

YAML schema (unknown keys are rejected)::

    name: gpt3-175b          # required, string
    layers: 96               # required, > 0
    hidden: 12288            # required, > 0, divisible by heads
    heads: 96                # required, > 0
    vocab: 51200             # required, > 0 (unpadded; Megatron pads per TP degree)
    seq_len: 2048            # required, > 0
    ffn_hidden: 49152        # optional, default 4·hidden
    kv_heads: 96             # optional, default heads (GQA/MQA when smaller; divides heads)
    kv_channels: 128         # optional, per-head width (Megatron's --kv-channels), default
                             # hidden/heads; Q is heads·kv_channels wide, K and V
                             # kv_heads·kv_channels, the projection heads·kv_channels → hidden
    gated_mlp: false         # optional (SwiGLU: fc1 produces 2·ffn_hidden)
    bias: true               # optional, linear-layer biases
    norm: layernorm          # optional: layernorm | rmsnorm
    position_embedding: learned   # optional: learned | rope | alibi (BLOOM: a score bias)
    tied_embeddings: true    # optional: output layer shares the word embedding
    qk_layernorm: false      # optional (Megatron-Core's TransformerConfig.qk_layernorm): a
                             # norm (the spec's norm kind) over each head of Q and of K after
                             # the QKV projection, before RoPE (Qwen3, OLMo 2)
    hidden_dropout: 0.1      # optional, 0 ≤ p < 1 (Megatron-Core's TransformerConfig default)
    attention_dropout: 0.1   # optional, 0 ≤ p < 1 (likewise)
    moe:                     # optional: mixture of experts in every layer's MLP
      experts: 8             # > 1
      top_k: 2               # 1 ≤ top_k ≤ experts
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sim.errors import InputError
from sim.files.catalog import resolve
from sim.files.inputs import read_text, show
from sim.files.yaml_load import field_line, load_yaml_with_lines
from sim.limits import MAX_LAYERS
from sim.models.vocab import hf_config

_REQUIRED = ("name", "layers", "hidden", "heads", "vocab", "seq_len")
_INT_OPTIONAL = ("ffn_hidden", "kv_heads", "kv_channels")
_BOOL_OPTIONAL = ("gated_mlp", "bias", "tied_embeddings", "qk_layernorm")
_PROBABILITIES = ("hidden_dropout", "attention_dropout")
_CHOICES = {"norm": ("layernorm", "rmsnorm"), "position_embedding": ("learned", "rope",
                                                                    "alibi")}
_MOE_KEYS = ("experts", "top_k")
_MOE_OPTIONAL = ("expert_ffn_hidden", "shared_experts", "dense_layers")
MAX_SIZE = 2**40  # larger sizes are corrupt values (and would overflow float FLOP counts)


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts MLP: ``experts`` expert MLPs per layer, each token routed to ``top_k``.

    ``expert_ffn_hidden``: each expert's FFN width (0 → the model's ``ffn_hidden``);
    ``shared_experts``: experts every token also runs (DeepSeek), each ``expert_ffn_hidden``
    wide (``shared_expert_ffn_hidden`` replaces their total width); ``dense_layers``: the
    first layers keep a dense MLP of ``ffn_hidden`` (DeepSeek-V3's ``first_k_dense_replace``).
    """

    experts: int
    top_k: int
    expert_ffn_hidden: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    shared_expert_ffn_hidden: int = 0  # Megatron's --moe-shared-expert-intermediate-size

    @property
    def shared_ffn_hidden(self) -> int:
        """Width of the shared-expert MLP: ``shared_expert_ffn_hidden`` when set (Megatron-Core's
        ``--moe-shared-expert-intermediate-size``), else ``shared_experts × expert_ffn_hidden``
        (0: none)."""
        return self.shared_expert_ffn_hidden or self.shared_experts * self.expert_ffn_hidden


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only transformer. All sizes are element counts."""

    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    ffn_hidden: int = 0  # 0 → 4·hidden (resolved in __post_init__)
    kv_heads: int = 0  # 0 → heads
    kv_channels: int = 0  # 0 → hidden // heads (Megatron-Core's kv_channels default)
    gated_mlp: bool = False
    bias: bool = True
    norm: str = "layernorm"
    position_embedding: str = "learned"
    tied_embeddings: bool = True
    qk_layernorm: bool = False  # TransformerConfig.qk_layernorm
    moe: MoESpec | None = None
    hidden_dropout: float = 0.1  # Megatron-Core TransformerConfig.hidden_dropout
    attention_dropout: float = 0.1  # TransformerConfig.attention_dropout

    def __post_init__(self) -> None:
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.moe is not None and self.moe.expert_ffn_hidden == 0:
            object.__setattr__(self, "moe", replace(self.moe, expert_ffn_hidden=self.ffn_hidden))
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.kv_channels == 0:
            object.__setattr__(self, "kv_channels", self.hidden // self.heads)

    @property
    def head_dim(self) -> int:
        """Per-head width of Q, K and V: ``kv_channels`` (default ``hidden / heads``)."""
        return self.kv_channels

    @property
    def q_hidden(self) -> int:
        """Width of the Q projection and of the attention output: ``heads · head_dim``
        (``hidden`` unless ``kv_channels`` says otherwise, as in Qwen3 and GPT-OSS)."""
        return self.heads * self.head_dim

    @property
    def kv_hidden(self) -> int:
        """Width of the K (or V) projection: ``kv_heads · head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def is_gpt_style(self) -> bool:
        """True when the closed-form formulas of Narayanan/Korthikanti apply exactly."""
        return (
            self.ffn_hidden == 4 * self.hidden
            and self.kv_heads == self.heads
            and self.q_hidden == self.hidden
            and not self.gated_mlp
            and self.bias
            and self.norm == "layernorm"
            and self.position_embedding == "learned"
            and self.tied_embeddings
            and self.moe is None
        )


def model_from_dict(data: Any, *, file: str = "<model>") -> ModelSpec:
    """Build a :class:`ModelSpec` from a parsed mapping; raises :class:`InputError` naming
    ``file`` and the offending key for unknown, missing or invalid values."""
    if not isinstance(data, dict):
        raise InputError(f"a model spec must be a mapping of keys to values, got {show(data)}",
                         file=file, field="model")
    _check_keys(data, file)
    name = data["name"]
    if not isinstance(name, str) or not name.strip():
        raise InputError("must be a non-empty string", file=file, field="name")
    kwargs: dict[str, Any] = {"name": name.strip()}
    for key in (*_REQUIRED[1:], *_INT_OPTIONAL):
        if key in data:
            kwargs[key] = _positive_int(data[key], file, key)
    kwargs.update(_flags_and_choices(data, file))
    for key in _PROBABILITIES:
        if key in data:
            kwargs[key] = _probability(data[key], file, key)
    if "moe" in data and data["moe"] is not None:
        kwargs["moe"] = _moe(data["moe"], file)
    spec = ModelSpec(**kwargs)
    _check_consistency(spec, file, "kv_channels" in data)
    return spec


def _check_keys(data: dict, file: str) -> None:
    """No unknown key; every required key present and not null."""
    allowed = {f.name for f in fields(ModelSpec)}
    for key in data:
        if key not in allowed:
            raise InputError(
                f"unknown key (allowed: {', '.join(sorted(allowed))})", file=file,
                field=show(key) if not isinstance(key, str) else key[:60]
            )
    for key in _REQUIRED:
        if key not in data or data[key] is None:
            raise InputError("required key is missing", file=file, field=key)


def _flags_and_choices(data: dict, file: str) -> dict[str, Any]:
    """The boolean keys and the keys with a fixed set of string values that ``data`` has."""
    out: dict[str, Any] = {}
    for key in _BOOL_OPTIONAL:
        if key in data:
            if not isinstance(data[key], bool):
                raise InputError(f"must be true or false, got {show(data[key])}", file=file,
                                 field=key)
            out[key] = data[key]
    for key, choices in _CHOICES.items():
        if key in data:
            if not isinstance(data[key], str) or data[key] not in choices:
                raise InputError(
                    f"must be one of {', '.join(choices)}, got {show(data[key])}", file=file,
                    field=key
                )
            out[key] = data[key]
    return out


def load_model(path: str | Path) -> ModelSpec:
    """Load a model spec YAML file (``yaml.safe_load``), a Hugging Face ``config.json``
    (:mod:`sim.models.vocab.hf_config`), or the shipped spec of that name
    (:mod:`sim.files.catalog`); errors name the file and key."""
    p = resolve("models", path, "--model")
    text = read_text(p, what="model spec")
    if hf_config.is_hf_config(text):  # a Hugging Face config.json (docs/workload-formats.md)
        try:
            return model_from_dict(hf_config.model_from_hf_config(text, str(p)), file=str(p))
        except InputError as e:
            field = hf_config.hf_field(e.field, text) if e.line is None else e.field
            raise InputError(e.message, file=str(p), line=e.line or hf_config.key_line(
                text, field), field=field) from None
    data, lines = load_yaml_with_lines(text, p)
    try:
        return model_from_dict(data, file=p)
    except InputError as e:
        if e.line is None and e.file == p:
            raise InputError(e.message, file=p, line=field_line(lines, e.field) or 1,
                             field=e.field) from None
        raise


def _probability(value: Any, file: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise InputError(f"must be a probability 0 ≤ p < 1, got {show(value)}", file=file,
                         field=key)
    return float(value)


def _positive_int(value: Any, file: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"must be a positive integer, got {show(value)}", file=file, field=key)
    if not 0 < value <= MAX_SIZE:
        raise InputError(f"must be a positive integer ≤ 2^40, got {show(value)}", file=file,
                         field=key)
    return value


def _moe(data: Any, file: str) -> MoESpec:
    if not isinstance(data, dict):
        raise InputError("must be a mapping with experts and top_k", file=file, field="moe")
    for key in data:
        if key not in _MOE_KEYS + _MOE_OPTIONAL:
            raise InputError(f"unknown key (allowed: {', '.join(_MOE_KEYS + _MOE_OPTIONAL)})",
                             file=file,
                             field=f"moe.{show(key) if not isinstance(key, str) else key[:60]}")
    for key in _MOE_KEYS:
        if key not in data:
            raise InputError("required key is missing", file=file, field=f"moe.{key}")
    experts = _positive_int(data["experts"], file, "moe.experts")
    top_k = _positive_int(data["top_k"], file, "moe.top_k")
    if experts < 2:
        raise InputError(f"must be ≥ 2 (got {experts})", file=file, field="moe.experts")
    if top_k > experts:
        raise InputError(f"must be ≤ experts ({experts}), got {top_k}", file=file,
                         field="moe.top_k")
    extra = {}
    for key in ("expert_ffn_hidden", "dense_layers"):
        if key in data:
            extra[key] = _positive_int(data[key], file, f"moe.{key}")
    if "shared_experts" in data:
        v = data["shared_experts"]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 64:
            raise InputError(f"must be an integer in 0..64, got {show(v)}", file=file,
                             field="moe.shared_experts")
        extra["shared_experts"] = v
    return MoESpec(experts=experts, top_k=top_k, **extra)


def _check_consistency(spec: ModelSpec, file: str, explicit_kv_channels: bool = False) -> None:
    """Sizes that contradict each other (``hidden`` must divide by ``heads`` unless
    ``kv_channels`` sets the head width)."""
    if spec.layers > MAX_LAYERS:  # checked before anything is generated (sim/limits.py)
        raise InputError(f"{spec.layers:,} layers exceed simrun's work budget: at most "
                         f"{MAX_LAYERS:,} layers per model", file=file, field="layers")
    if spec.moe is not None and spec.moe.dense_layers >= spec.layers:
        raise InputError(f"must be below the {spec.layers} layers, got {spec.moe.dense_layers}",
                         file=file, field="moe.dense_layers")
    if not explicit_kv_channels and spec.hidden % spec.heads:
        raise InputError(f"hidden {spec.hidden} is not divisible by heads {spec.heads}",
                         file=file, field="heads")
    if spec.heads % spec.kv_heads:
        raise InputError(f"heads {spec.heads} is not divisible by kv_heads {spec.kv_heads}",
                         file=file, field="kv_heads")

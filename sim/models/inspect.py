"""What simrun infers from a model description (``simrun inspect FILE``: :mod:`sim.cli.inspect`).

Accepts a model spec (``*.yaml``), a per-rank parameter table (seed 000 format) or a
Megatron-Core module tree (seed 001 format). Sizes a file does not contain can be given as
flags (``--hidden --heads --ffn-hidden --vocab --seq-len --layers --kv-heads``); when the
sizes are complete, the model's parameter count and FLOPs are printed too (:class:`Sizes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.errors import InputError
from sim.files.inputs import read_text, split_lines
from sim.models.flops import model_flops_per_iteration, total_params
from sim.models.vocab.module_tree import import_module_tree, to_model_spec
from sim.models.vocab.param_table import import_param_table
from sim.models.vocab.spec import ModelSpec, load_model


def detect_format(path: str) -> str:
    """``model-spec``, ``param-table`` or ``module-tree`` (by extension / first line)."""
    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        return "model-spec"
    first = next((ln for ln in split_lines(read_text(path)) if ln.strip()), "")
    if first.startswith("name;module;shape"):
        return "param-table"
    if first.lstrip().startswith("Module:"):
        return "module-tree"
    raise InputError("not a model description (expected a model spec .yaml, a parameter table "
                     "'name;module;shape;…' or a Megatron-Core module tree 'Module: …')",
                     file=path, line=1)


def infer(path: str):
    """What a model description says: a :class:`~sim.models.vocab.spec.ModelSpec`,
    :class:`~sim.models.vocab.param_table.ParamTableInfo` or
    :class:`~sim.models.vocab.module_tree.ModuleTreeInfo` (by :func:`detect_format`)."""
    fmt = detect_format(path)
    if fmt == "model-spec":
        return load_model(path)
    if fmt == "param-table":
        return import_param_table(path)
    return import_module_tree(path)


@dataclass(frozen=True)
class Sizes:
    """Model sizes a description file may lack (``None``: not given); ``pp`` pipeline stages
    of a per-rank parameter table, ``name`` the model name for the summary."""

    hidden: int | None = None
    heads: int | None = None
    ffn_hidden: int | None = None
    vocab: int | None = None
    seq_len: int | None = None
    layers: int | None = None
    kv_heads: int | None = None
    pp: int | None = None
    name: str | None = None


def describe(path: str, sizes: Sizes) -> list[str]:
    """Lines describing ``path`` (raises :class:`InputError` for bad input)."""
    fmt = detect_format(path)
    spec: ModelSpec | None = None
    if fmt == "model-spec":
        spec = load_model(path)
        lines = [f"format: model spec ({spec.name})"]
    elif fmt == "param-table":
        info = import_param_table(path)
        lines = info.lines()
        layers = sizes.layers or (info.layers_in_stage * sizes.pp if sizes.pp else None)
        if sizes.heads and layers and info.vocab_padded and info.seq_len:
            spec = ModelSpec(name=sizes.name or Path(path).stem, layers=layers, hidden=info.hidden,
                             heads=sizes.heads, vocab=sizes.vocab or info.vocab_padded,
                             seq_len=info.seq_len, ffn_hidden=info.ffn_hidden or 0)
    else:
        info = import_module_tree(path)
        lines = info.lines()
        if sizes.layers and sizes.layers != info.layers:
            lines.append(f"note: --layers {sizes.layers} ignored; the tree has {info.layers}")
        need = (sizes.hidden, sizes.heads, sizes.vocab, sizes.seq_len)
        if all(need):
            spec = to_model_spec(info, name=sizes.name or Path(path).stem, hidden=sizes.hidden,
                                 heads=sizes.heads, vocab=sizes.vocab, seq_len=sizes.seq_len,
                                 ffn_hidden=sizes.ffn_hidden, kv_heads=sizes.kv_heads)
    if spec is not None:
        lines += summary(spec)
    return lines


def summary(spec) -> list[str]:
    """Model-level numbers: sizes, parameters, FLOPs per sequence."""
    out = [
        f"model: {spec.name}: {spec.layers} layers, hidden {spec.hidden}, heads {spec.heads} "
        f"(kv {spec.kv_heads}), ffn {spec.ffn_hidden}{' gated' if spec.gated_mlp else ''}, "
        f"vocab {spec.vocab}, sequence {spec.seq_len}"
        + (f", MoE {spec.moe.experts}×top-{spec.moe.top_k}" if spec.moe else ""),
        f"parameters: {total_params(spec):,}",
        f"model FLOPs per sequence (fwd+bwd): {model_flops_per_iteration(spec, 1):.4e}",
    ]
    return out

"""``simrun inspect FILE``: print what simrun infers from a model description.

Accepts a model spec (``*.yaml``), a per-rank parameter table (seed 000 format) or a
Megatron-Core module tree (seed 001 format). Sizes a file does not contain can be given as
flags (``--hidden --heads --ffn-hidden --vocab --seq-len --layers --kv-heads``); when the
sizes are complete, the model's parameter count and FLOPs are printed too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.errors import InputError, SimrunError


def detect_format(path: str) -> str:
    """``model-spec``, ``param-table`` or ``module-tree`` (by extension / first line)."""
    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        return "model-spec"
    from sim.inputs import read_text, split_lines

    first = next((ln for ln in split_lines(read_text(path)) if ln.strip()), "")
    if first.startswith("name;module;shape"):
        return "param-table"
    if first.lstrip().startswith("Module:"):
        return "module-tree"
    raise InputError("not a model description (expected a model spec .yaml, a parameter table "
                     "'name;module;shape;…' or a Megatron-Core module tree 'Module: …')",
                     file=path, line=1)


def infer(path: str):
    """What a model description says: a :class:`~sim.models.spec.ModelSpec`,
    :class:`~sim.models.param_table.ParamTableInfo` or
    :class:`~sim.models.module_tree.ModuleTreeInfo` (by :func:`detect_format`)."""
    fmt = detect_format(path)
    if fmt == "model-spec":
        from sim.models.spec import load_model

        return load_model(path)
    if fmt == "param-table":
        from sim.models.param_table import import_param_table

        return import_param_table(path)
    from sim.models.module_tree import import_module_tree

    return import_module_tree(path)


def _parser() -> argparse.ArgumentParser:
    from sim.cli import Parser, positive_int

    ap = Parser(prog="simrun inspect",
                description="Print what simrun infers from a model description.")
    ap.add_argument("file")
    for flag in ("hidden", "heads", "ffn-hidden", "vocab", "seq-len", "layers", "kv-heads",
                 "pp"):
        ap.add_argument(f"--{flag}", type=positive_int, default=None)
    ap.add_argument("--name", default=None, help="model name for the summary")
    return ap


def describe(path: str, args: argparse.Namespace) -> list[str]:
    """Lines describing ``path`` (raises :class:`InputError` for bad input)."""
    from sim.models.spec import ModelSpec, load_model

    fmt = detect_format(path)
    spec: ModelSpec | None = None
    if fmt == "model-spec":
        spec = load_model(path)
        lines = [f"format: model spec ({spec.name})"]
    elif fmt == "param-table":
        from sim.models.param_table import import_param_table

        info = import_param_table(path)
        lines = info.lines()
        layers = args.layers or (info.layers_in_stage * args.pp if args.pp else None)
        if args.heads and layers and info.vocab_padded and info.seq_len:
            spec = ModelSpec(name=args.name or Path(path).stem, layers=layers, hidden=info.hidden,
                             heads=args.heads, vocab=args.vocab or info.vocab_padded,
                             seq_len=info.seq_len, ffn_hidden=info.ffn_hidden or 0)
    else:
        from sim.models.module_tree import import_module_tree, to_model_spec

        info = import_module_tree(path)
        lines = info.lines()
        if args.layers and args.layers != info.layers:
            lines.append(f"note: --layers {args.layers} ignored; the tree has {info.layers}")
        need = (args.hidden, args.heads, args.vocab, args.seq_len)
        if all(need):
            spec = to_model_spec(info, name=args.name or Path(path).stem, hidden=args.hidden,
                                 heads=args.heads, vocab=args.vocab, seq_len=args.seq_len,
                                 ffn_hidden=args.ffn_hidden, kv_heads=args.kv_heads)
    if spec is not None:
        lines += summary(spec)
    return lines


def summary(spec) -> list[str]:
    """Model-level numbers: sizes, parameters, FLOPs per sequence."""
    from sim.models.flops import model_flops_per_iteration, total_params

    out = [
        f"model: {spec.name}: {spec.layers} layers, hidden {spec.hidden}, heads {spec.heads} "
        f"(kv {spec.kv_heads}), ffn {spec.ffn_hidden}{' gated' if spec.gated_mlp else ''}, "
        f"vocab {spec.vocab}, sequence {spec.seq_len}"
        + (f", MoE {spec.moe.experts}×top-{spec.moe.top_k}" if spec.moe else ""),
        f"parameters: {total_params(spec):,}",
        f"model FLOPs per sequence (fwd+bwd): {model_flops_per_iteration(spec, 1):.4e}",
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for bad input, with a one-line message)."""
    try:  # bad flags too are one line (Parser raises UsageError)
        args = _parser().parse_args(argv)
        for line in describe(args.file, args):
            print(line)
    except SimrunError as exc:
        print(f"simrun inspect: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0

"""Extract Megatron-LM's defaults into sim/data/megatron_defaults.json.

Usage: ``python scripts/megatron_defaults.py MEGATRON_LM_CHECKOUT COMMIT`` (a git directory: the
files are read with ``git show COMMIT:path``). Read, without running anything, with Python's
``ast``:

- ``megatron/training/arguments.py``: every ``add_argument('--name', ...)``: its ``dest`` (given
  or derived from the first long option) → its ``default`` (``store_true`` → False,
  ``store_false`` → True; the first declaration of a ``dest`` wins, as in argparse);
- the Megatron-Core config dataclasses Megatron-Bridge dumps (``model``: TransformerConfig and
  ModelParallelConfig; ``ddp``: DistributedDataParallelConfig; ``optimizer``:
  OptimizerConfig) and Megatron-LM's ``megatron/training/config/`` ones (``training``:
  TrainingConfig, ValidationConfig, RNGConfig, ...): each field → its default
  (``field(default=...)``, ``field(default_factory=list)`` → []);
- ``derived``: the names ``arguments.py`` assigns (``args.NAME = ...``) without declaring
  them, which a log's ``arguments`` block prints.

Defaults that are not literals (computed, read from the environment) are left out: a value
simrun cannot compare with a default is refused where it is not declared.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "sim" / "data" / "megatron_defaults.json"
ARGUMENTS = "megatron/training/arguments.py"
DATACLASSES = {
    "model": ("megatron/core/model_parallel_config.py",
              "megatron/core/transformer/transformer_config.py"),
    "ddp": ("megatron/core/distributed/distributed_data_parallel_config.py",),
    "optimizer": ("megatron/core/optimizer/optimizer_config.py",),
    "training": ("megatron/training/config/training_config.py",
                 "megatron/training/config/common_config.py"),
}
_NONE = object()


def _literal(node: ast.AST) -> object:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NONE
    return list(value) if isinstance(value, tuple) else value


def arguments_defaults(source: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args):
            continue
        names = [_literal(a) for a in node.args]
        long = next((n for n in names if isinstance(n, str) and n.startswith("--")), None)
        if long is None:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        dest = _literal(kw["dest"]) if "dest" in kw else long[2:].replace("-", "_")
        action = _literal(kw["action"]) if "action" in kw else None
        if "default" in kw:
            default = _literal(kw["default"])
        elif action == "store_true":
            default = False
        elif action == "store_false":
            default = True
        else:
            default = None
        if isinstance(dest, str) and dest not in out and default is not _NONE:
            out[dest] = default
    return dict(sorted(out.items()))


def derived_arguments(source: str, known: dict[str, object]) -> list[str]:
    """Names ``validate_args`` and its helpers set (``args.NAME = ...``) that no
    ``add_argument`` declares: values Megatron-LM computes from the others and prints in a
    log's ``arguments`` block (``data_parallel_size``, ``params_dtype``, ...)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                    and t.value.id == "args" and t.attr not in known):
                out.add(t.attr)
    return sorted(out)


def dataclass_defaults(sources: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                        and item.value is not None):
                    continue
                default = _field_default(item.value)
                if default is not _NONE:
                    out.setdefault(item.target.id, default)
    return dict(sorted(out.items()))


def _field_default(value: ast.AST) -> object:
    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
        kw = {k.arg: k.value for k in value.keywords if k.arg}
        if "default" in kw:
            return _literal(kw["default"])
        factory = getattr(kw.get("default_factory"), "id", None)
        return {"list": [], "dict": {}}.get(factory, _NONE)
    return _literal(value)


def main(repo: str, commit: str) -> None:
    def show(path: str) -> str:
        return subprocess.run(["git", "--git-dir", repo, "show", f"{commit}:{path}"],
                              check=True, capture_output=True, text=True).stdout

    data = {
        "source": f"NVIDIA/Megatron-LM {commit}: {ARGUMENTS} (argparse defaults by dest) and "
                  "the Megatron-Core config dataclasses "
                  + ", ".join(p for ps in DATACLASSES.values() for p in ps)
                  + " (field defaults); extracted by scripts/megatron_defaults.py",
        "arguments": arguments_defaults(show(ARGUMENTS)),
        "derived": derived_arguments(show(ARGUMENTS), arguments_defaults(show(ARGUMENTS))),
        **{name: dataclass_defaults([show(p) for p in paths])
           for name, paths in DATACLASSES.items()},
    }
    OUT.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT}: " + ", ".join(f"{k} {len(v)}" for k, v in data.items()
                                         if isinstance(v, dict)))


if __name__ == "__main__":
    main(*sys.argv[1:3])

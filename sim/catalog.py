"""Shipped data by name: topologies, model specs, example workloads, validation files.

The repository keeps the shipped inputs in its top-level ``topologies/`` and ``workloads/``
folders (paths the README, the docs and the tests use). A wheel built by ``pip install .``
carries copies of them as package data under ``sim/data/`` (the build step in ``setup.py``), next
to the package data that lives there in the source tree (kernel tables in ``sim/data/kernels/``).
So one rule finds every shipped file:

1. ``sim/data/<folder>`` inside the installed package (a wheel install);
2. ``<checkout>/<folder>`` when ``sim`` is imported from a source checkout (editable install or
   ``python -m``), recognised by the ``pyproject.toml`` next to the package.

:func:`resolve` turns a command-line value into a path: an existing file is used as given; a
bare name (no directory part, with or without its extension) is looked up among the shipped
files of that kind; anything else is an :class:`~sim.errors.InputError` naming the flag and the
names that exist (``simrun list KIND`` prints them with one-line descriptions).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sim.errors import InputError

_PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Kind:
    """One kind of shipped file: where it lives and which names it has."""

    name: str  # as in `simrun list NAME`
    folder: str  # relative to sim/data/ in a wheel, or to the checkout's root
    suffixes: tuple[str, ...]
    what: str  # for messages


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("topologies", "topologies", (".yaml", ".yml"), "topology"),
    Kind("models", "workloads/models", (".yaml", ".yml"), "model spec"),
    Kind("workloads", "workloads", (".txt", ".tsv", ".csv"), "workload"),
    Kind("validation", "workloads/validation", (".yaml", ".yml"), "validation file"),
    Kind("kernels", "kernels", (".csv",), "kernel table"),  # lives in sim/data/ itself
)}


def _checkout_root() -> Path | None:
    root = _PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() else None


def shipped_dir(kind: str) -> Path | None:
    """The folder holding the shipped files of ``kind`` (see the module docstring), or None."""
    folder = KINDS[kind].folder
    candidates = [_PACKAGE / "data" / folder]
    root = _checkout_root()
    if root is not None:
        candidates.append(root / folder)
    for c in candidates:
        if c.is_dir():
            return c
    return None


def shipped(kind: str) -> dict[str, Path]:
    """Name (file stem) → path of every shipped file of ``kind``, sorted by name."""
    d = shipped_dir(kind)
    if d is None:
        return {}
    suffixes = KINDS[kind].suffixes
    files = [p for p in d.iterdir() if p.is_file() and p.suffix in suffixes]
    return {p.stem: p for p in sorted(files, key=lambda p: p.stem)}


def resolve(kind: str, value: str | Path, flag: str | None = None) -> str:
    """The path a command-line ``value`` names: the file itself if it exists, else the shipped
    file of ``kind`` with that name (``dgx-a100-1024`` or ``dgx-a100-1024.yaml``). Returns the
    value unchanged when it is a path or a file name that is not shipped (the reader then says
    what is wrong with it); raises :class:`InputError` for an unknown name without extension."""
    text = os.fspath(value)
    if os.path.exists(text) or not text or os.sep in text or "/" in text:
        return text
    files = shipped(kind)
    stem = Path(text).stem if Path(text).suffix in KINDS[kind].suffixes else text
    if stem in files:
        return str(files[stem])
    if stem != text:  # looks like a file name: the reader says "no such file" as for any path
        return text
    names = ", ".join(files) or "none installed"
    via = f" for {flag}" if flag else ""
    raise InputError(f"no such file, and no shipped {KINDS[kind].what} of that name{via} "
                     f"(shipped: {names}; 'simrun list {kind}' describes them)", file=text)


def describe(kind: str, path: Path) -> str:
    """A one-line description of a shipped file (its ``description`` key, its first comment,
    or a summary of its header)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[:40]
    except (OSError, UnicodeDecodeError):
        return "(unreadable)"
    for line in lines:
        if line.startswith("description:"):
            return line.split(":", 1)[1].strip()
    if kind == "workloads":
        return _workload_summary(lines)
    if kind == "kernels":  # "# gpu: NAME" and "# date: DAY" (docs/kernel-tables.md)
        tags = dict(ln.lstrip("# ").split(": ", 1) for ln in lines
                    if ln.startswith("# ") and ": " in ln)
        return (f"measured kernel times of {tags.get('gpu', '?')}"
                + (f" ({tags['date']})" if "date" in tags else ""))
    if kind == "models":
        return _model_summary(path, _first_sentence(lines).split(" (")[0].rstrip(":"))
    return _first_sentence(lines)


def _model_summary(path: Path, title: str) -> str:
    from sim.models.spec import load_model  # models import the catalog: no import circle

    try:
        m = load_model(path)
    except InputError as e:
        return f"(invalid: {e})"
    moe = f", {m.moe.experts} experts top-{m.moe.top_k}" if m.moe else ""
    return (f"{title}: {m.layers} layers, hidden {m.hidden}, {m.heads} heads, "
            f"sequence {m.seq_len}{moe}")


def _first_sentence(lines: list[str], limit: int = 110) -> str:
    """The first sentence of the file's leading comment block, at most ``limit`` characters."""
    words: list[str] = []
    for ln in lines:
        if not ln.startswith("#"):
            break
        words += ln.lstrip("#").split()
    text = " ".join(words)
    if ". " in text:
        text = text[: text.index(". ") + 1]
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _workload_summary(lines: list[str]) -> str:
    if not lines:
        return "(empty)"
    head = lines[0].split()
    if "forward_compute_time" in head:
        return f"per-operator table, {max(len(lines) - 1, 0)} operators (ms, element counts)"
    fields = dict(zip(head[1::2], head[2::2], strict=False))
    keys = (("model_parallel_NPU_group:", "TP"), ("pp:", "PP"), ("vpp:", "VPP"),
            ("ga:", "ga"), ("all_gpus:", "GPUs"))
    parts = [f"{label} {fields[k]}" for k, label in keys if k in fields]
    return "AICB workload text, " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """``simrun list [KIND]``: the shipped files usable by name, with one-line descriptions."""
    from sim.cli import Parser

    ap = Parser(prog="simrun list",
                description="List the shipped inputs that any flag taking a file also accepts "
                            "by name (e.g. --topo dgx-a100-1024, --model gpt3-175b).")
    ap.add_argument("kind", nargs="?", choices=tuple(KINDS),
                    help="which kind to list (default: all kinds)")
    ap.add_argument("--paths", action="store_true",
                    help="also print the path of each file (default: names only)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    kinds = [args.kind] if args.kind else list(KINDS)
    out = []
    for k in kinds:
        files = shipped(k)
        if len(kinds) > 1:
            out.append(f"{k}:")
        width = max((len(n) for n in files), default=0)
        for name, path in files.items():
            line = f"  {name:<{width}}  {describe(k, path)}"
            out.append(line + (f"\n  {'':<{width}}  {path}" if args.paths else ""))
        if not files:
            out.append("  (none installed)")
    sys.stdout.write("\n".join(out) + "\n")
    return 0

"""Shipped data by name: topologies, model specs, example workloads, validation files, kernels.

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
from dataclasses import dataclass
from pathlib import Path

from sim.errors import InputError

_PACKAGE = Path(__file__).resolve().parent.parent


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
    if kind == "kernels":  # other measurements live there too (e.g. whole layers)
        files = [p for p in files if _is_kernel_table(p)]
    return {p.stem: p for p in sorted(files, key=lambda p: p.stem)}


def _is_kernel_table(path: Path) -> bool:
    """Whether ``path``'s header row is a kernel table's (``kind,time_ms,...``)."""
    row = next((ln for ln in head_lines(path) if ln and not ln.startswith("#")), "")
    return row.startswith("kind,time_ms")


def resolve(kind: str, value: str | Path, flag: str | None = None) -> str:
    """The path a command-line ``value`` names: the file itself if it exists, else the shipped
    file of ``kind`` with that name (``dgx-a100-1024`` or ``dgx-a100-1024.yaml``). Returns the
    value unchanged when it is a path or a file name that is not shipped (the reader then says
    what is wrong with it); raises :class:`InputError` for an unknown name without extension."""
    text = os.fspath(value)
    if not text or os.path.exists(text) or os.sep in text or "/" in text:
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


def first_sentence(lines: list[str], limit: int = 110) -> str:
    """The first sentence of a file's leading comment block, at most ``limit`` characters."""
    words: list[str] = []
    for ln in lines:
        if not ln.startswith("#"):
            break
        words += ln.lstrip("#").split()
    text = " ".join(words)
    if ". " in text:
        text = text[: text.index(". ") + 1]
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def head_lines(path: Path, n: int = 40) -> list[str]:
    """The first ``n`` lines of a shipped text file ([] if unreadable)."""
    try:
        return path.read_text(encoding="utf-8").splitlines()[:n]
    except (OSError, UnicodeDecodeError):
        return []


def describe(kind: str, path: Path) -> str:
    """A one-line description of a shipped file that is not a model spec: its ``description``
    key, a summary of its header (workloads, kernel tables) or its first comment sentence."""
    lines = head_lines(path)
    for line in lines:
        if line.startswith("description:"):
            return line.split(":", 1)[1].strip().strip("\"'")
    if kind == "workloads":
        return _workload_summary(lines)
    if kind == "kernels":  # "# gpu: NAME" and "# date: DAY" (docs/kernel-tables.md)
        tags = dict(ln.lstrip("# ").split(": ", 1) for ln in lines
                    if ln.startswith("# ") and ": " in ln)
        gpu = tags.get("gpu", "?").split(" (")[0]
        return (f"measured kernel times of {gpu}"
                + (f" ({tags['date']})" if "date" in tags else ""))
    return first_sentence(lines)


def _workload_summary(lines: list[str]) -> str:
    if not lines:
        return "(empty)"
    head = lines[0].split()
    if "forward_compute_time" in head:
        return f"per-operator table, {max(len(lines) - 1, 0)} operators (ms, element counts)"
    if lines[0].startswith("[rank0 ~ rank"):
        ranks = lines[0].strip().strip("[]").replace(" ~ rank", "-").removeprefix("rank")
        return f"AICB physical-format collective log of ranks {ranks} (read with --model)"
    if head[0] == "MICRO":
        return f"AICB micro-test, {max(len(lines) - 2, 0)} collectives over all GPUs"
    fields = dict(zip(head[1::2], head[2::2], strict=False))
    keys = (("model_parallel_NPU_group:", "TP"), ("pp:", "PP"), ("vpp:", "VPP"),
            ("ga:", "ga"), ("all_gpus:", "GPUs"))
    parts = [f"{label} {fields[k]}" for k, label in keys if k in fields]
    return "AICB workload text, " + ", ".join(parts)

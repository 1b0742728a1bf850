"""Sweeping training options: every declared training flag (:mod:`sim.options.registry`) is a
dimension of a sweep, derived from its declaration, never from a second list here.

- a flag that takes a value of a fixed kind (``choice``, ``int``, ``count``, ``float``) takes a
  comma-separated list in a sweep (``--recompute none,selective``, ``--dtype bf16,fp8``);
- a switch (``--sequence-parallel``, ``--tp-comm-overlap``, ...) is swept off and on with
  ``--vary FLAG[,FLAG...]``;
- a flag parsed from free text (``parse``: the uneven pipeline split) takes one value.

:func:`split_argv` turns the command line into the single-valued command lines of every
combination (each then parsed by the sweep's own parser, so each value is checked as in a
single run) and the :class:`Variant` labels: ``(flag key, value text)`` pairs that name the
layout (``-recompute-none``) and fill the row's columns.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sim.errors import UsageError
from sim.options.registry import flags

LISTED_KINDS = ("choice", "int", "count", "float")
"""Value kinds a sweep accepts as comma-separated lists."""

MAX_VARIANTS = 256
"""Bound on the combinations of swept training options (each multiplies the layouts)."""


@dataclass(frozen=True)
class Variant:
    """One combination of swept training options: ``label`` the ``(flag key, value)`` pairs
    (empty: nothing swept) and ``argv`` its single-valued command line."""

    label: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]


def _take_vary(argv: list[str]) -> tuple[list[str], list[str]]:
    """The command line without ``--vary`` and the switch names it lists."""
    rest: list[str] = []
    names: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--vary":
            text = next(it, None)
            if text is None:
                raise UsageError("expected a comma-separated list of switches", field="vary")
            names += [n.strip() for n in text.split(",") if n.strip()]
        elif a.startswith("--vary="):
            names += [n.strip() for n in a[len("--vary="):].split(",") if n.strip()]
        else:
            rest.append(a)
    return rest, names


def _switches(names: list[str]) -> list[str]:
    """The declared switches ``--vary`` names (with or without the leading ``--``)."""
    declared = flags()
    out = []
    for n in names:
        name = n if n.startswith("--") else f"--{n}"
        entry = declared.get(name) or next(
            ((o, f) for o, f in declared.values() if name in f.aliases), None)
        if entry is None or entry[1].kind != "switch":
            known = ", ".join(sorted(k[2:] for k, (_, f) in declared.items()
                                     if f.kind == "switch"))
            raise UsageError(f"{n!r} is not a training switch; switches: {known}",
                             field="vary")
        out.append(entry[1].name)
    return out


def split_argv(argv: list[str]) -> list[Variant]:
    """Every combination of the swept training options of ``argv`` (one, with an empty label,
    when none is swept), in a fixed order: flags in command-line order, values as given."""
    argv, names = _take_vary(argv)
    declared = flags()
    alias = {a: f.name for _, f in declared.values() for a in f.aliases}
    dims: list[tuple[str, list[str | None]]] = []  # flag, values (None: switch off)
    slots: dict[str, int] = {}  # flag → index in argv of its value (-1: a switch)
    base = list(argv)
    for i, a in enumerate(argv):
        name, eq, inline = a.partition("=")
        name = alias.get(name, name)
        if name not in declared or declared[name][1].kind not in LISTED_KINDS:
            continue
        text = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        values = [v.strip() for v in text.split(",")]
        if len(values) > 1:
            if name in slots:
                raise UsageError("given twice", field=name)
            slots[name] = i
            dims.append((name, values))
    for name in _switches(names):
        if name in slots or name in argv:
            raise UsageError(f"{name} is swept off and on by --vary; leave the flag out",
                             field="vary")
        slots[name] = -1
        dims.append((name, [None, "on"]))
    combos = list(itertools.product(*(vals for _, vals in dims)))
    if len(combos) > MAX_VARIANTS:
        raise UsageError(f"{len(combos)} combinations of training options (at most "
                         f"{MAX_VARIANTS})", field=dims[0][0])
    out = []
    for combo in combos:
        cmd = list(base)
        label = []
        for (name, _), v in zip(dims, combo, strict=True):
            key = declared[name][1].key
            i = slots[name]
            if i < 0:
                label.append((key, "on" if v else "off"))
                if v:
                    cmd.append(name)
                continue
            label.append((key, str(v)))
            if "=" in cmd[i]:
                cmd[i] = f"{cmd[i].partition('=')[0]}={v}"
            else:
                cmd[i + 1] = str(v)
        out.append(Variant(tuple(label), tuple(cmd)))
    return out


def label_key(label: tuple[tuple[str, str], ...]) -> str:
    """The layout-key suffix of a variant (``-recompute-none-sequence_parallel-on``)."""
    return "".join(f"-{k}-{v}" for k, v in label)

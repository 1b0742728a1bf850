"""The feature registry: one declaration per training option of a model-driven run.

An :class:`Option` is one field of :class:`~sim.parallel.config.Training` (its default is the
field's, written there once) with the framework's name for it, the module that implements its
change to the generated rows and memory (:attr:`Option.feature`), the framework's refusals
(:attr:`Option.check`), the key of its assumption line, and its command-line :class:`Flag`\\ s:
simrun's name (the framework's, where it has one), the value kind, the help, the unit, the
verdict for each input kind (:data:`sim.options.applicable.INPUT_KINDS`) and the per-layout
refusal "it changes nothing here" (:attr:`Flag.refuse`).

Derived from the declarations, nowhere written by hand: the parser groups of ``simrun`` and
``simrun sweep`` (:mod:`sim.cli.options`), the options' rows of the verdict table
(:data:`sim.options.applicable.TABLE`), the refusals of a workload file and of a layout
(:func:`refusals`), the sweep's resume keys (:func:`sweep_later`) and the typed assumption
lines' ``explains`` (:func:`option_of_assumption`). The declarations are in
:mod:`sim.options.core`, :mod:`sim.options.comm`, :mod:`sim.options.moe` and
:mod:`sim.options.execution`; a new option is one more declaration there.

This module has no command-line library in it: :mod:`sim.cli.options` turns the declarations
into argparse groups.
"""

from __future__ import annotations

from typing import Any

from sim.options.declaration import FILE_FIXES, Flag, Option, Pair, default, field_defaults

__all__ = ["FILE_FIXES", "Flag", "Option", "default"]


def registry() -> tuple[Option, ...]:
    """Every declared option, in the order of the parser groups."""
    from sim.options import comm, core, execution, moe

    return (*core.OPTIONS, *comm.OPTIONS, *moe.OPTIONS, *execution.OPTIONS)


def flags() -> dict[str, tuple[Option, Flag]]:
    """Every declared flag by its name."""
    return {f.name: (o, f) for o in registry() for f in o.flags}


def table_rows() -> dict[str, dict[str, Pair]]:
    """The declared flags' verdicts by input kind (rows of the verdict table)."""
    return {f.name: {"aicb": f.aicb, "optable": f.optable, "model": f.model, "aicb-csv": f.log}
            for _, f in flags().values()}


def file_refusals(given: set[str]) -> list[tuple[str, str]]:
    """``(flag, reason)`` of the given declared flags that a workload file refuses (both file
    kinds refuse them), in declaration order."""
    return [(name, f.aicb[1]) for name, (_, f) in flags().items()
            if name in given and f.aicb[0] == f.optable[0] == "refused"]


def refusals(given: set[str], model: Any, par: Any) -> list[tuple[str, str]]:
    """``(flag, reason)`` of the given declared flags that change nothing in the layout
    ``par`` of ``model`` (:attr:`Flag.refuse`), in declaration order."""
    out = []
    for name, (_, f) in flags().items():
        if name in given and f.refuse is not None:
            why = f.refuse(model, par)
            if why:
                out.append((name, why))
    return out


def values(parsed: dict[str, Any]) -> dict[str, Any]:
    """The :class:`Training` keyword arguments of parsed flag values (``parsed``: each flag's
    :attr:`Flag.key` → its value, ``None`` / ``False`` when not given); nested fields (the
    pipeline split) are built from their parts; unset fields keep their default."""
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for o in registry():
        for f in o.flags:
            v = parsed.get(f.key)
            if v is None or v is False:
                continue
            head, _, rest = o.target(f).partition(".")
            value = f.value if f.kind == "switch" else v
            if rest:
                nested.setdefault(head, {})[rest] = value
            else:
                out[head] = value
    for head, parts in nested.items():
        out[head] = type(default(head))(**{**field_defaults(type(default(head))), **parts})
    return out


def sweep_later() -> dict[str, Any]:
    """The training fields a sweep leaves out of its recorded settings at their default, with
    that default (sweeps recorded before the option existed still resume)."""
    return {o.field: default(o.field) for o in registry() if not o.recorded_at_default}


def option_of_assumption(key: str) -> str:
    """The option field whose assumption line has ``key`` (empty: none)."""
    return next((o.field for o in registry() if o.assumption and o.assumption == key), "")

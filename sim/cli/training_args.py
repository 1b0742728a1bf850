"""The training flags of ``simrun`` (with ``--model``) and ``simrun sweep``, derived from the
feature registry (:mod:`sim.options.registry`): one argparse argument per declared flag, with
the declaration's name, aliases, value kind, choices, help and default (the
:class:`~sim.parallel.config.Training` field's), and :func:`training_of` that turns the parsed
flags into :class:`~sim.parallel.config.Training`. Nothing here names an option.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from sim.cli.types import nonneg_int, positive_int
from sim.options.declaration import Flag, Option, default, help_of
from sim.options.registry import flags, registry, values
from sim.parallel.config import Training

#: argparse types of the registry's value kinds (``switch`` and ``parse`` are handled apart)
_TYPES: dict[str, Callable[[str], Any] | None] = {"choice": None, "int": positive_int,
                                                  "count": nonneg_int, "float": float}
#: kinds whose parsed default is the option's default (the others parse to None when absent)
_DEFAULTED = ("choice", "float")


@functools.cache
def _parse(fn: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type of a registry parse function (ValueError → argparse's error); one per
    function, so the run's and the sweep's parsers share it."""

    def parse(text: str):
        try:
            return fn(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _argument(option: Option, flag: Flag, sweep: bool) -> dict[str, Any]:
    kw: dict[str, Any] = {"dest": flag.key, "help": help_of(option, flag, sweep=sweep)}
    if flag.kind == "switch":
        return {**kw, "action": "store_true"}
    kw["type"] = _parse(flag.parse) if flag.kind == "parse" else _TYPES[flag.kind]
    if flag.choices:
        kw["choices"] = flag.choices
    if flag.metavar:
        kw["metavar"] = flag.metavar
    if flag.kind in _DEFAULTED:
        kw["default"] = default(option.target(flag))
    return kw


def add_training_arguments(g: argparse._ActionsContainer, *, sweep: bool = False) -> None:
    """Register every declared training flag in the group ``g`` (declaration order; flags of
    one ``exclusive`` name in a mutually exclusive group). ``sweep``: the sweep's wording."""
    exclusive: dict[str, argparse._ActionsContainer] = {}
    for option in registry():
        for flag in option.flags:
            target = g
            if flag.exclusive:
                if flag.exclusive not in exclusive:
                    exclusive[flag.exclusive] = g.add_mutually_exclusive_group()
                target = exclusive[flag.exclusive]
            target.add_argument(flag.name, *flag.aliases, **_argument(option, flag, sweep))


def training_of(args: argparse.Namespace, micro_batch: int = 1) -> Training:
    """The :class:`Training` of the parsed flags (or the sweep's same flags, whose micro batch
    varies per layout)."""
    parsed = {f.key: getattr(args, f.key, None) for _, f in flags().values()}
    return Training(global_batch=args.global_batch, micro_batch=micro_batch, **values(parsed))

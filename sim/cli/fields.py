"""Option names → command-line flags, for the errors the CLI prints.

The library's errors name the option (``UsageError(..., field="tp")``): a Python caller never
sees a flag. Before printing one, the CLI names the flag instead (``--tp: ...``): the feature
registry's declared flag where the option's name differs from it
(``moe_token_dispatcher`` → ``--moe-token-dispatcher-type``), else the flag of that ``dest``
in the parsers, else ``--`` and the name with ``-`` for ``_``.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Callable

from sim.errors import InputError, SimrunError
from sim.options.registry import registry

_OPTION_NAME = re.compile(r"[a-z][a-z0-9_]*")


@functools.cache
def _declared() -> dict[str, str]:
    """The registry's flags by the option names that differ from them: each flag's ``dest``
    and the :class:`~sim.parallel.config.Training` field it sets (its last dotted part)."""
    out: dict[str, str] = {}
    for opt in registry():
        for flag in opt.flags:
            for name in (flag.key, opt.target(flag).rsplit(".", 1)[-1]):
                out.setdefault(name, flag.name)
    return out


_PARSERS: list[Callable[[], list[argparse.ArgumentParser]]] = []


def register_parsers(make: Callable[[], list[argparse.ArgumentParser]]) -> None:
    """Set where the parsers come from: ``make()`` gives the main run's parser, then each
    subcommand's (:mod:`sim.cli` registers them; this module does not import it)."""
    _PARSERS[:] = [make]
    _parsed.cache_clear()


@functools.cache
def _parsed() -> dict[str, tuple[str, ...]]:
    """Each ``dest`` of the parsers → its long option strings (the first parser that has that
    ``dest`` wins)."""
    out: dict[str, tuple[str, ...]] = {}
    for parser in (_PARSERS[0]() if _PARSERS else []):
        for action in parser._actions:  # noqa: SLF001 - argparse exposes no public list
            longs = tuple(s for s in action.option_strings if s.startswith("--"))
            if longs and action.dest not in out:
                out[action.dest] = longs
    return out


def flag_of(name: str) -> str:
    """The command-line flag of the option ``name`` (``"tp"`` → ``"--tp"``): the declared
    one, else the parsers' spelling of the name if it is one of that ``dest``'s flags, else
    its first flag."""
    if name in _declared():
        return _declared()[name]
    spelled = "--" + name.replace("_", "-")
    longs = _parsed().get(name, ())
    return spelled if spelled in longs or not longs else longs[0]


def cli_error(err: SimrunError) -> SimrunError:
    """``err`` with its option named by its flag, as the CLI prints it: an error about a
    command-line value (no file) whose field is an option name. Returns ``err``, changed in
    place (its message is formatted again)."""
    if (isinstance(err, InputError) and err.file is None and err.field
            and _OPTION_NAME.fullmatch(err.field)):
        err.field = flag_of(err.field)
        err.args = (err.format(), *err.args[1:])
    return err

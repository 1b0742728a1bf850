"""The declaration types of the feature registry (:mod:`sim.options.registry`): an
:class:`Option` (one :class:`~sim.parallel.config.Training` field) and its command-line
:class:`Flag` s, with the defaults read from the ``Training`` field (written there once). The
declarations themselves are in :mod:`sim.options.core`, :mod:`sim.options.comm`,
:mod:`sim.options.moe` and :mod:`sim.options.execution`."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any

from sim.parallel.config import Training

#: a verdict and its reason (:class:`sim.options.applicable.Verdict`)
Pair = tuple[str, str]
#: the verdict of a training flag for a workload file: it fixes the compute and message sizes
FILE_FIXES: Pair = ("refused", "applies to --model runs only: a workload file fixes the compute "
                               "times and message sizes; leave it out, or use --model")
#: value kinds of a flag: ``switch`` (no value: sets :attr:`Flag.value`), ``choice`` (one of
#: :attr:`Flag.choices`), ``int`` (≥ 1), ``count`` (≥ 0), ``float``, ``parse`` (the text through
#: :attr:`Flag.parse`, which raises ValueError with the reason)
KINDS = ("switch", "choice", "int", "count", "float", "parse")


@dataclass(frozen=True)
class Flag:
    """One command-line flag of an option.

    ``help`` may name ``{default}``: the option's default (:attr:`default_text`, else the
    :class:`Training` field's value). ``model``, ``log``, ``aicb``, ``optable``: the verdict for
    each input kind. ``refuse(model, par)``: the reason the flag is refused for one layout (it
    changes nothing there), else ``None``. ``target``: the :class:`Training` field it sets
    (``split.first_stage_layers``: a field of a nested dataclass); empty: the option's.
    ``sweep_help``: the sweep's wording, where it differs."""

    name: str
    help: str
    model: Pair
    log: Pair
    kind: str = "switch"
    value: Any = True
    aliases: tuple[str, ...] = ()
    dest: str = ""
    choices: tuple = ()
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    unit: str = ""
    default_text: str = ""
    exclusive: str = ""
    aicb: Pair = FILE_FIXES
    optable: Pair = FILE_FIXES
    sweep_help: str = ""
    refuse: Callable[[Any, Any], str | None] | None = None
    target: str = ""

    @property
    def key(self) -> str:
        """The parsed value's name (argparse's ``dest``)."""
        return self.dest or self.name[2:].replace("-", "_")


@dataclass(frozen=True)
class Option:
    """One training option: the :class:`Training` ``field`` it sets, the framework's name for
    it (``framework``), the module implementing it (``feature``, dotted), its flags, the key
    of its assumption line (``assumption``; empty: none of its own), the framework's refusals
    (``check(par)`` raises :class:`~sim.errors.UsageError`; ``None``: checked with the layout
    in :func:`sim.models.parallel_checks.validate`). ``recorded_at_default``: a sweep records
    it in its settings even at the default (options a sweep had before resumable settings
    left defaults out)."""

    field: str
    framework: str
    feature: str
    flags: tuple[Flag, ...]
    assumption: str = ""
    check: Callable[[Any], None] | None = None
    recorded_at_default: bool = False

    def target(self, flag: Flag) -> str:
        return flag.target or self.field


def deferred(module: str, name: str = "check") -> Callable[[Any], None]:
    """``module.name(par)``, the module imported at the first call: declaring an option (and
    building the parser) does not load the feature that implements it."""
    def call(par: Any) -> None:
        return getattr(importlib.import_module(module), name)(par)
    call.__qualname__ = f"{module}.{name}"
    return call


def default(path: str) -> Any:
    """The default of the :class:`Training` field ``path`` (``split.first_stage_layers``: a
    field of the nested dataclass's default)."""
    head, _, rest = path.partition(".")
    value = field_defaults(Training)[head]
    return field_defaults(type(value))[rest] if rest else value


def field_defaults(cls) -> dict[str, Any]:
    out = {}
    for f in fields(cls):
        out[f.name] = f.default if f.default is not MISSING else f.default_factory()
    return out


def help_of(option: Option, flag: Flag, *, sweep: bool = False) -> str:
    """The flag's help with its default filled in."""
    text = flag.sweep_help if sweep and flag.sweep_help else flag.help
    if "{default}" not in text:
        return text
    return text.format(default=flag.default_text or default(option.target(flag)))

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


def default(path: str) -> Any:
    """The default of the :class:`Training` field ``path`` (``split.first_stage_layers``: a
    field of the nested dataclass's default)."""
    head, _, rest = path.partition(".")
    value = _defaults(Training)[head]
    return _defaults(type(value))[rest] if rest else value


def _defaults(cls) -> dict[str, Any]:
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
        out[head] = type(default(head))(**{**_defaults(type(default(head))), **parts})
    return out


def sweep_later() -> dict[str, Any]:
    """The training fields a sweep leaves out of its recorded settings at their default, with
    that default (sweeps recorded before the option existed still resume)."""
    return {o.field: default(o.field) for o in registry() if not o.recorded_at_default}


def option_of_assumption(key: str) -> str:
    """The option field whose assumption line has ``key`` (empty: none)."""
    return next((o.field for o in registry() if o.assumption and o.assumption == key), "")

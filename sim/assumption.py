"""The typed assumption line of a report.

An :class:`Assumption` is the text of one line (it *is* that string, so the report's JSON
``assumptions`` list and its text stay strings, unchanged) with a ``key`` naming what it states,
whether it ``departs`` from the input or warns (always shown in the summary), and what it
``explains``: the parts of the iteration it is the modelling choice behind (``compute``,
``optimizer``, ``idle`` or a communication group such as ``TP``), each with its rank among the
lines that explain that part (0 first). Code that chooses by an assumption reads these fields,
never the text (tests/test_typed_assumptions.py scans sim/ for it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: what the lines of each key explain: part of the iteration → the line's rank among the lines
#: behind that part (the summary shows, for each large part, the first line of the lowest rank)
EXPLAINS: dict[str, dict[str, int]] = {
    "compute-model": {"compute": 0},
    "microbatch-block": {"compute": 1},
    "optable-units": {"compute": 2},
    **dict.fromkeys(("compute-time", "compute-scale", "compute-as-is", "compute-scaled"),
                    {"compute": 3}),
    "tp-comm": {"TP": 0},
    "isolated:TP": {"TP": 2},
    "context-parallel": {"CP": 0},
    "moe": {"EP": 0, "ETP": 0},
    "isolated:EP": {"EP": 2},
    "pp-message": {"PP": 0},
    "grad-reduce": {"DP": 0},
    "dp-gradient": {"DP": 1},
    "dp-size": {"DP": 3},
    "tied-embeddings": {"EMB": 1},
    "layout": {"idle": 0},
    "schedule": {"idle": 1},
    "optimizer": {"optimizer": 0},
    # the network model's choice per group: "chosen:<group>"
    **{f"chosen:{g}": {g: r} for g, r in (("TP", 1), ("CP", 1), ("EP", 1), ("ETP", 1),
                                          ("PP", 1), ("DP", 2), ("EMB", 0))},
    # the DP_EP choice also stands among the DP lines
    "chosen:DP_EP": {"DP": 2, "DP_EP": 0},
}


class Assumption(str):
    """One assumption line: the text, ``key``, ``departs``, ``explains`` (part → rank; by
    default the key's in :data:`EXPLAINS`), ``detail`` (a sub-line of the line before, never
    listed on its own)."""

    key: str
    departs: bool
    explains: Mapping[str, int]
    detail: bool

    def __new__(cls, text: str, key: str = "", *, departs: bool = False,
                explains: Mapping[str, int] | None = None, detail: bool = False) -> Assumption:
        self = super().__new__(cls, text)
        self.key = key
        self.departs = departs
        self.explains = dict(EXPLAINS.get(key, {}) if explains is None else explains)
        self.detail = detail
        return self

    def __reduce__(self):
        return (_rebuild, (str(self), self.key, self.departs, dict(self.explains), self.detail))


def _rebuild(text: str, key: str, departs: bool, explains: dict[str, int],
             detail: bool) -> Assumption:
    return Assumption(text, key, departs=departs, explains=explains, detail=detail)


def key_of(line: str) -> str:
    """The key of an assumption line (``""`` for a plain string)."""
    return getattr(line, "key", "")


def departs(line: str) -> bool:
    """Whether the line says the run departs from its input or warns."""
    return getattr(line, "departs", False)


def explains(line: str) -> Mapping[str, int]:
    """The parts of the iteration the line explains, with its rank for each."""
    return getattr(line, "explains", {})


def is_detail(line: str) -> bool:
    """Whether the line is a sub-line of the line before."""
    return getattr(line, "detail", False)


def with_key(lines: Iterable[str], key: str) -> list[str]:
    """The lines of ``key``."""
    return [a for a in lines if key_of(a) == key]

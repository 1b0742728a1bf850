"""The registry of pipeline schedules: the one place where a schedule's name (what the user
types after ``--schedule``, what reports print) is turned into its
:class:`~sim.pipeline.types.Schedule` object."""

from __future__ import annotations

from collections.abc import Callable

from sim.errors import UsageError
from sim.pipeline.kinds import ZBH1, ZBH2, ZBV, DualPipe, GPipe, Interleaved, OneFOneB
from sim.pipeline.types import Schedule

ONE_F_ONE_B = OneFOneB()
INTERLEAVED = Interleaved()
_ALL: tuple[Schedule, ...] = (GPipe(), ONE_F_ONE_B, INTERLEAVED, ZBH1(), ZBH2(), ZBV(),
                              DualPipe())
REGISTRY: dict[str, Schedule] = {s.name: s for s in _ALL}
"""Name → schedule, in the order the help and error messages list them."""
SCHEDULES: tuple[str, ...] = tuple(REGISTRY)
"""The schedule names (``--schedule`` choices)."""


def schedule_type(name: str) -> Schedule:
    """The schedule called ``name``. Raises :class:`UsageError` naming ``--schedule`` for an
    unknown name."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}",
                         field="schedule") from None


def find_schedule(name: str | None) -> Schedule | None:
    """The schedule called ``name``, or ``None`` (no name, or an unknown one)."""
    return None if name is None else REGISTRY.get(name)


def default_schedule(vpp: int) -> Schedule:
    """Megatron's schedule when none is named: interleaved 1F1B with a virtual pipeline
    (``vpp > 1``), else 1F1B."""
    return INTERLEAVED if vpp > 1 else ONE_F_ONE_B


def schedules() -> tuple[Schedule, ...]:
    """Every schedule, in registry order."""
    return _ALL


def names_where(test: Callable[[Schedule], bool]) -> tuple[str, ...]:
    """The names of the schedules that pass ``test``, in registry order (for messages)."""
    return tuple(s.name for s in _ALL if test(s))

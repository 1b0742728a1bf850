"""The engine's SimPy environment: SimPy's event loop run without per-event indirections,
counting the events it schedules."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from heapq import heappop
from typing import Any

import simpy
from simpy.core import URGENT, BoundClass, SimTime, StopSimulation
from simpy.events import Event, EventPriority


class Clock(simpy.Environment):
    """SimPy's environment with the same semantics, event order and event count, run faster.

    - :meth:`run` is SimPy 4's ``Environment.run`` with ``step`` inlined (the same pops,
      callbacks, StopSimulation and failure handling, in the same order);
    - ``now`` is a plain attribute kept equal to SimPy's ``_now`` (the engine reads it several
      times per event; SimPy's is a property);
    - :attr:`scheduled` (the report's event count) is SimPy's own event-id counter: every
      scheduled event takes the next id.
    """

    now = 0  # shadowed by the instance attribute (not SimPy's property)

    def __init__(self) -> None:
        super().__init__()
        self.now = self._now
        # SimPy binds its event factories (timeout, event, process, …) to the instance only
        # for its own class; bind them for this subclass too, or every call would go through
        # the descriptor (~5% slower runs)
        for name, obj in vars(simpy.Environment).items():
            if isinstance(obj, BoundClass):
                setattr(self, name, getattr(self, name))

    @property
    def scheduled(self) -> int:
        """Events scheduled so far (the ids SimPy has given out)."""
        return int(repr(self._eid)[len("count("):-1])

    def step(self) -> None:
        super().step()
        self.now = self._now

    def run(self, until: SimTime | Event | None = None) -> Any:
        """SimPy's ``Environment.run`` (simpy 4.1, pinned in pyproject.toml), same behaviour."""
        if isinstance(until, Event):
            try:
                return super().run(until)
            finally:
                self.now = self._now
        if until is not None:
            at: SimTime = until if isinstance(until, int) else float(until)
            if at <= self._now:
                raise ValueError(
                    f'until ({at}) must be greater than the current simulation time')
            marker = Event(self)
            marker._ok = True  # noqa: SLF001 - as SimPy's own run sets its marker
            marker._value = None  # noqa: SLF001
            self.schedule(marker, URGENT, at - self._now)
            marker.callbacks.append(StopSimulation.callback)
        queue = self._queue
        try:
            while queue:
                self._now, _, _, event = heappop(queue)
                self.now = self._now
                callbacks, event.callbacks = event.callbacks, None
                try:
                    for callback in callbacks:
                        callback(event)
                except StopSimulation:
                    event.callbacks = callbacks[callbacks.index(callback) + 1:]
                    self.schedule(event, EventPriority(-1))
                    raise
                if not event._ok and not hasattr(event, "_defused"):  # noqa: SLF001
                    exc = type(event._value)(*event._value.args)  # noqa: SLF001
                    exc.__cause__ = event._value  # noqa: SLF001
                    raise exc
        except StopSimulation as exc:
            return exc.args[0]
        if until is not None:
            raise RuntimeError(
                f'No scheduled events left but "until" event was not triggered: {marker}')
        return None


#: first-generation threshold of the cyclic garbage collector during a simulation (CPython's
#: default is 700 allocations): each event allocates a few short-lived objects, and with the
#: default every few hundred events a collection walked the young objects again. The engine
#: makes almost no reference cycles (its garbage is freed by reference counting), so a
#: collection finds next to nothing: at 20,000 a per-rank 1024-GPU run spent 0.29 s of its
#: 3.5-4 s CPU in collections (mostly second-generation walks of every surviving record), at
#: 1,000,000 0.11-0.16 s (gc.callbacks); collecting every million allocations still bounds
#: the memory that cyclic garbage could take
GC_YOUNG_THRESHOLD = 1_000_000


@contextmanager
def relaxed_gc() -> Iterator[None]:
    """Run a simulation with the objects that exist before it (the program, the topology, the
    network plans) frozen out of the garbage collector's scans and its first generation
    collected less often; both restored afterwards, the run's survivors then in the oldest
    generation. Results do not depend on it: it changes only when unreachable cycles are
    freed (a per-rank 1024-GPU run: about 20% less CPU)."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        # the run's survivors join the oldest generation unscanned: the young collection the
        # next allocation would start walked them all (0.11 s after a per-rank 1024-GPU run)
        gc.freeze()
        gc.set_threshold(*before)
        gc.unfreeze()

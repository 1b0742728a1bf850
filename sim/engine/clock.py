"""The engine's SimPy environment, counting the events it schedules."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import simpy
from simpy.core import BoundClass, SimTime
from simpy.events import NORMAL, Event, EventPriority


class Clock(simpy.Environment):
    """SimPy's environment, counting the events scheduled on it (the report's event count)."""

    def __init__(self) -> None:
        super().__init__()
        self.scheduled = 0
        # SimPy binds its event factories (timeout, event, process, …) to the instance only
        # for its own class; bind them for this subclass too, or every call would go through
        # the descriptor (~5% slower runs)
        for name, obj in vars(simpy.Environment).items():
            if isinstance(obj, BoundClass):
                setattr(self, name, getattr(self, name))

    def schedule(self, event: Event, priority: EventPriority = NORMAL, delay: SimTime = 0
                 ) -> None:
        self.scheduled += 1
        _schedule(self, event, priority, delay)


_schedule = simpy.Environment.schedule  # called unbound: no super() proxy per event


#: first-generation threshold of the cyclic garbage collector during a simulation (CPython's
#: default is 700 allocations): each event allocates a few short-lived objects, and with the
#: default every few hundred events a collection walked the young objects again
GC_YOUNG_THRESHOLD = 20_000


@contextmanager
def relaxed_gc() -> Iterator[None]:
    """Run a simulation with the objects that exist before it (the program, the topology, the
    network plans) frozen out of the garbage collector's scans and its first generation
    collected less often; both restored afterwards. Results do not depend on it: it changes
    only when unreachable cycles are freed (a per-rank 1024-GPU run: about 20% less CPU)."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()

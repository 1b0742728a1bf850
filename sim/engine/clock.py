"""The engine's SimPy environment, counting the events it schedules."""

from __future__ import annotations

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

"""simrun's own SimPy event types: the network's Completion and the engine's counting Clock."""

import simpy

from sim.engine.core import Clock
from sim.network.base import CommResult
from sim.network.driver import Completion


def test_completion_succeeds_after_a_delay_fixed_later_and_orders_like_a_timeout():
    # t=0: a waits on done; t=5: done's delay (7) is fixed; t=5: a timeout of 7 is created
    # right after it. Both end at t=12: done first (scheduled first), as two timeouts would.
    env = simpy.Environment()
    done = Completion(env)
    log = []

    def waiter():
        res = yield done
        log.append((env.now, "done", res.duration_ns))

    def fixer():
        yield env.timeout(5)
        done.succeed_after(7, CommResult(12, "ring/Simple"))
        yield env.timeout(7)
        log.append((env.now, "timeout", 0))

    env.process(waiter())
    env.process(fixer())
    env.run()
    assert log == [(12, "done", 12), (12, "timeout", 0)]
    assert done.processed and done.value == CommResult(12, "ring/Simple")


def test_clock_counts_every_scheduled_event_like_simpy_does():
    # the process's start (Initialize), the run's `until` marker, timeout(3), succeed(),
    # timeout(4), the process's end, and the marker again when it stops the run (SimPy
    # re-schedules an event whose callback raised StopSimulation) = 7, SimPy's own count
    env = Clock()
    ev = env.event()

    def proc():
        yield env.timeout(3)
        ev.succeed()
        yield env.timeout(4)

    env.process(proc())
    env.run(until=100)
    assert env.scheduled == 7 == next(env._eid)
    assert env.now == 100

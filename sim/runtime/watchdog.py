"""The simulated-time watchdog (``simrun --max-sim-time-s``) and stall reporting.

The engine stops its clock at ``until_ns`` (:func:`sim.engine.simulate`). A run then ends in
one of three ways:

- every rank finished: the result;
- the event queue ran dry with ranks still waiting (a collective some members never reach, a
  receive whose send never comes): a deadlock, :class:`~sim.errors.SimulationStalled` naming
  each waiting rank and what it waits on (exit code 1: the programs simrun builds never do this);
- events were still pending when the clock reached the limit: a runaway simulation,
  :class:`~sim.errors.WatchdogExpired` (exit code 2: the input or the limit must change).

With a limit SimPy advances the clock to it even after a deadlock, so a deadlock's message would
show the limit as its time; :func:`simulate_watched` then re-runs without the limit (the run is
deterministic and ends by itself) to report the time at which the ranks got stuck.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sim.errors import SimulationStalled, WatchdogExpired
from sim.limits import check_program_work

DEFAULT_MAX_SIM_TIME_S = 1e6  # ~11.6 days of simulated time: far beyond any real iteration
FLAG = "--max-sim-time-s"
OPTION = "max_sim_time_s"  # errors name the option (the CLI, its flag)


def simulate_watched(simulate: Callable, program, network, *, max_sim_time_s: float,
                     file: str | None = None, **kw):
    """``simulate(program, network, until_ns=…, **kw)`` with the watchdog described above,
    after checking the program against simrun's work budget (:mod:`sim.limits`). ``file``: the
    workload or model file the program came from, named in the watchdog's message."""
    check_program_work(program)
    # +1: an iteration that ends exactly at the limit is allowed (SimPy stops before the
    # events of the `until` instant)
    until_ns = max(1, math.ceil(max_sim_time_s * 1e9)) + 1
    try:
        return simulate(program, network, until_ns=until_ns, **kw)
    except SimulationStalled as e:
        if _still_busy(getattr(network, "env", None)):
            detail = str(e).split(" still waiting: ", 1)[-1]
            raise WatchdogExpired(
                f"watchdog: the iteration had not finished after {max_sim_time_s:g} s of "
                f"simulated time ({FLAG}); ranks then: {detail}. Raise {FLAG} if the "
                "iteration really is that long, else check the input's times and sizes",
                # with a file the CLI does not rename option fields: name the flag itself
                file=file or None, field=FLAG if file else OPTION) from None
    return simulate(program, network, until_ns=None, **kw)  # a deadlock: report its real time


def _still_busy(env) -> bool:
    """True if ``env`` still has an event that would do something (a process to resume): the
    clock was stopped, not run dry. SimPy leaves its own inert `until` marker in the queue."""
    if env is None:
        return False
    queue = getattr(env, "_queue", None)
    if queue is None:  # not SimPy's usual Environment: anything scheduled counts
        return env.peek() != math.inf
    return any(item[-1].callbacks for item in queue)

"""The engine's Clock runs SimPy's event loop itself: the same events in the same order at the
same times, the same count, the same ends (``until``, queue run dry, a failed event), as SimPy's
own ``Environment.run`` on the same processes."""

import random

import pytest
import simpy

from sim.engine.clock import Clock


def _scenario(env, log, seed):
    """Processes with timeouts, shared events succeeded by others, AnyOf conditions and
    same-time ties; every resumption logged with the time and ``env.now``."""
    rng = random.Random(seed)
    shared = [env.event() for _ in range(6)]

    def worker(i):
        for k in range(30):
            d = rng.choice((0, 1, 1, 2, 3, 5))
            if k % 7 == 3 and not shared[i % 6].triggered:
                shared[i % 6].succeed(i)
            if k % 5 == 2:
                got = yield env.timeout(d) | shared[(i + k) % 6]
                log.append((env.now, i, k, "any", len(got.todict())))
            else:
                v = yield env.timeout(d, value=k)
                log.append((env.now, i, k, "t", v))
        return i

    procs = [env.process(worker(i)) for i in range(8)]

    def joiner():
        vals = yield env.all_of(procs)
        log.append((env.now, "joined", sorted(vals.todict().values())))

    env.process(joiner())


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("until", [None, 17, 10_000])
def test_clock_runs_like_simpy(seed, until):
    logs, counts, nows, returns = [], [], [], []
    for env in (simpy.Environment(), Clock()):
        log: list = []
        _scenario(env, log, seed)
        returns.append(env.run(until=until))
        logs.append(log)
        nows.append((env.now, env._now))  # noqa: SLF001 - SimPy's own clock
        counts.append(next(env._eid))  # noqa: SLF001 - SimPy's event ids: one per schedule
    assert logs[0] == logs[1] and len(logs[0]) > 50
    assert returns[0] == returns[1] is None
    assert nows[0] == nows[1]
    assert counts[0] == counts[1]
    if until == 17:
        assert nows[1][0] == 17


def test_clock_counts_what_it_schedules_and_can_run_on():
    counts = []
    for env in (simpy.Environment(), Clock()):
        env.process((lambda e=env: (yield e.timeout(4)))())
        env.run(until=2)
        first = next(env._eid)  # noqa: SLF001 - SimPy's event ids: one per schedule
        env.run(until=10)
        counts.append((first, next(env._eid), env.now))  # noqa: SLF001
    # the process's start, its timeout, the `until` marker and the marker again (SimPy
    # re-schedules the event whose callback stopped the run): ids 0-3, so the read gets 4;
    # then a new marker, the process's end, the marker again (5, 6, 7): the read gets 8
    assert counts[0] == counts[1] == (4, 8, 10)
    env = Clock()
    env.process((lambda: (yield env.timeout(4)))())
    env.run(until=2)
    assert env.scheduled == 4
    with pytest.raises(ValueError, match="must be greater"):
        env.run(until=2)


def test_a_failed_event_crashes_the_run_as_in_simpy():
    def boom(env):
        yield env.timeout(3)
        raise KeyError("lost")

    for env in (simpy.Environment(), Clock()):
        env.process(boom(env))
        with pytest.raises(KeyError, match="lost"):
            env.run()
        assert env.now == 3


def test_an_event_as_until_returns_its_value():
    env = Clock()
    done = env.timeout(5, value="v")
    assert env.run(until=done) == "v"
    assert env.now == 5

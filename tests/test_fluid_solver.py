"""The fluid solver (sim/network/fluid.py): max-min rates and finish times against a hand-worked
timeline, its remembered fills, and its component order against the plain stack search."""

import random

from sim.network.fluid import Flow, FluidSolver, waterfill

# links: 0 = A (10 bytes/ns), 1 = B (4 bytes/ns)
CAP = [10.0, 4.0]


def _flows() -> list[Flow]:
    # f1 on A, f2 on A and B, f3 on B
    return [Flow((0,), ((0, 1),), 80.0), Flow((0, 1), ((0, 1), (1, 1)), 20.0),
            Flow((1,), ((1, 1),), 4.0)]


def test_max_min_rates_hand_derived():
    # B saturates first at 4/2 = 2 (f2, f3 frozen there, limited by B); A then has
    # 10 - 2 = 8 left for f1 alone, limited by A
    flows = _flows()
    assert waterfill(flows, CAP) == [8.0, 2.0, 2.0]
    assert [f.bneck for f in flows] == [0, 1, 1]


def _timeline(solver: FluidSolver, flows: list[Flow]) -> list[tuple[int, str]]:
    names = {id(f): f"f{i + 1}" for i, f in enumerate(flows)}
    solver.add(flows, 0)
    log = []
    while (t := solver.next_time()) is not None:
        done = solver.pop_due(t)
        log += [(t, names[id(f)]) for f in done]
        solver.remove(done, t)
    return log


def test_finish_times_hand_derived_and_repeated_fills_remembered():
    # t = 0: rates 8, 2, 2 -> f3 (4 bytes) ends at 2. Then f1 and f2 share A (5 each) but B
    # gives f2 only 4: f2 frozen at 4, f1 gets 6. f2 has 20 - 2*2 = 16 left: ends at 2 + 4 = 6;
    # f1 has 80 - 8*2 - 6*4 = 40 left, alone at 10: ends at 6 + 4 = 10.
    solver = FluidSolver(CAP)
    first = _timeline(solver, _flows())
    assert first == [(2, "f3"), (6, "f2"), (10, "f1")]
    remembered = dict(solver._fills)  # noqa: SLF001 - the memo under test
    assert remembered  # the two- and three-flow fills
    # the same flows again (new objects): every fill is found, the timeline is the same
    assert _timeline(solver, _flows()) == first
    assert solver._fills == remembered  # noqa: SLF001


def _stack_search(users: dict, seeds: list[Flow], claim_links: bool) -> list[Flow]:
    """The plain depth-first stack search whose order the solver must keep."""
    seen: dict[Flow, None] = {}
    stack = list(seeds)
    links: set[int] = set()
    while stack:
        f = stack.pop()
        if f in seen:
            continue
        seen[f] = None
        for link, _ in f.loads:
            if claim_links:
                if link in links:
                    continue
                links.add(link)
            stack.extend(g for g in users[link] if g not in seen)
    return list(seen)


def test_component_order_is_the_stack_search_order():
    rng = random.Random(7)
    for _ in range(2000):
        nlinks = rng.randint(1, 10)
        solver = FluidSolver([1.0] * nlinks)
        solver.strict_flows = rng.random() < 0.4
        flows = []
        for _ in range(rng.randint(1, 30)):
            links = rng.sample(range(nlinks), rng.randint(1, min(4, nlinks)))
            f = Flow(tuple(links), tuple((x, rng.randint(1, 3)) for x in links), 1.0)
            flows.append(f)
            for x, m in f.loads:
                solver.users.setdefault(x, {})[f] = m
        seeds = [rng.choice(flows) for _ in range(rng.randint(1, 4))]
        assert solver._component(seeds) == _stack_search(  # noqa: SLF001
            solver.users, seeds, solver.strict_flows)

"""The flow network works out each distinct request's start once per bound run (plan, protocol,
flows, rate caps, a coflow's rate alone): repeated, concurrent and re-bound starts must time
exactly as the first, and as a fresh network does.

tiny-fattree-8 (see test_network_contention): a 10 MB send across nodes alone takes
1,000,000 ns at 10 GB/s + 22,400 ns of NCCL latency; two sharing a NIC take twice the bytes'
time.
"""

from __future__ import annotations

from test_network_contention import P2P_LAT, fattree, run, send

from sim.parallel.placement import Placement

ALONE = 1_000_000 + P2P_LAT
SHARED = 2_000_000 + P2P_LAT


def test_a_request_repeated_in_a_run_times_as_the_first():
    net = fattree()
    jobs = [(0, send(0, 2, 10_000_000)), (ALONE, send(0, 2, 10_000_000)),
            (3 * ALONE, send(0, 2, 10_000_000))]
    assert run(net, Placement(1, 8, 1), jobs) == [
        (ALONE, (0, 2), ALONE), (2 * ALONE, (0, 2), ALONE), (4 * ALONE, (0, 2), ALONE)]


def test_the_same_request_concurrently_shares_the_link_and_then_runs_alone():
    net = fattree()
    # two identical sends share node 0's NIC; a third, after both, runs alone again (its
    # remembered rate alone must not be the shared one)
    jobs = [(0, send(0, 2, 10_000_000)), (0, send(0, 2, 10_000_000)),
            (SHARED, send(0, 2, 10_000_000))]
    assert run(net, Placement(1, 8, 1), jobs) == [
        (SHARED, (0, 2), SHARED), (SHARED, (0, 2), SHARED), (SHARED + ALONE, (0, 2), ALONE)]


def test_rebinding_forgets_the_previous_run():
    jobs = [(0, send(0, 2, 10_000_000)), (0, send(1, 2, 10_000_000)),
            (5_000, send(0, 4, 20_000_000))]
    used = fattree()
    first = run(used, Placement(1, 8, 1), jobs)
    again = run(used, Placement(1, 8, 1), jobs)
    other = run(used, Placement(2, 4, 1), jobs, symmetric=True)
    assert first == again == run(fattree(), Placement(1, 8, 1), jobs)
    assert other == run(fattree(), Placement(2, 4, 1), jobs, symmetric=True)

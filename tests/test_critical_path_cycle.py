"""The critical-path walk stops where ranks wait on each other at one instant (DualPipe's two
directions, ZB-V's V placement): it used to go round such a cycle, adding nothing, a million
times (about 2 s per simulated iteration)."""

from __future__ import annotations

from sim.engine.critical import PathSegment, Wait, critical_path


class CountingDeps(dict):
    """``deps`` that counts the waits the walk looks up (one per step)."""

    lookups = 0

    def __getitem__(self, rank):
        self.lookups += 1
        return super().__getitem__(rank)


def test_walk_stops_at_ranks_waiting_on_each_other_at_one_instant():
    # rank 0 worked 0-4, then waited 4-10 for rank 1's data, sent at 10; rank 1 waited 6-10
    # for rank 0's, sent at 10: at t = 10 each names the other, and time does not move back
    deps = CountingDeps({0: [Wait(4, 10, "PP", 1, 10)], 1: [Wait(6, 10, "PP", 0, 10)]})
    path = critical_path(deps, end_rank=0, end_ns=12)
    assert path == [PathSegment(0, 10, 12, "work")]  # what the walk found before the cycle
    # rank 0 at 12, rank 1 at 10, rank 0 at 10, rank 1 at 10 again: stop (it went on to 10^6)
    assert deps.lookups == 3


def test_walk_continues_through_a_rank_seen_at_another_time():
    """Rank 0 is on the path twice, at 12 and at 1: no cycle. By hand, from rank 0 at 12: work
    10-12, its TP wait 9-10 (rank 1 arrived at 9); rank 1 worked 3-9 and waited 1-3 for rank
    0's send at 1; rank 0 worked 0-1."""
    deps = {0: [Wait(2, 5, "PP", 1, 3), Wait(8, 10, "TP", 1, 9)], 1: [Wait(1, 3, "PP", 0, 1)]}
    assert critical_path(deps, end_rank=0, end_ns=12) == [
        PathSegment(0, 0, 1, "work"), PathSegment(1, 1, 3, "PP", 0),
        PathSegment(1, 3, 9, "work"), PathSegment(0, 9, 10, "TP", 1),
        PathSegment(0, 10, 12, "work")]

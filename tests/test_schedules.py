"""Per-rank op orders equal the examples of docs/schedules.md (Megatron's orders)."""

import pytest

from sim.errors import UsageError
from sim.pipeline.schedules import (
    gpipe,
    ideal_bubble_fraction,
    interleaved,
    interleaved_table,
    one_f_one_b,
    schedule_table,
)


def names(ops, chunks=False):
    return " ".join(o.label(chunks) for o in ops)


def test_1f1b_p4_m8_examples():
    assert names(one_f_one_b(4, 0, 8)) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    assert names(one_f_one_b(4, 3, 8)) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"


def test_1f1b_warmup_is_capped_by_microbatches():
    # p=4, r=0, M=2: warmup min(3, 2) = 2, no steady phase, FIFO cooldown.
    assert names(one_f_one_b(4, 0, 2)) == "F0 F1 B0 B1"
    assert names(one_f_one_b(4, 1, 8)).startswith("F0 F1 F2 B0 F3 B1")


def test_gpipe_all_forwards_then_fifo_backwards():
    assert names(gpipe(3, 1, 3)) == "F0 F1 F2 B0 B1 B2"


def test_interleaved_p2_v2_m4_examples():
    assert names(interleaved(2, 0, 4, 2), True) == (
        "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0")
    assert names(interleaved(2, 1, 4, 2), True) == (
        "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0")


def test_interleaved_table_chunk_is_outer_loop_within_group():
    # N = 2, M = 5, v = 2: groups [0,1], [2,3], [4] (last group takes the remainder).
    assert interleaved_table(5, 2, 2) == [
        (0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1), (4, 0), (4, 1)]


@pytest.mark.parametrize("name,p,m,v", [("1f1b", 4, 3, 1), ("gpipe", 3, 5, 1),
                                         ("interleaved", 2, 4, 2), ("interleaved", 4, 8, 2),
                                         ("interleaved", 4, 12, 3), ("interleaved", 3, 6, 2),
                                         ("interleaved", 2, 6, 3)])
def test_every_op_appears_exactly_once_and_backward_after_forward(name, p, m, v):
    for ops in schedule_table(name, p, m, v):
        fs = [(o.microbatch, o.chunk) for o in ops if o.kind == "F"]
        bs = [(o.microbatch, o.chunk) for o in ops if o.kind == "B"]
        every = sorted((mb, c) for mb in range(m) for c in range(v))
        assert sorted(fs) == sorted(bs) == every
        for mb, c in every:
            assert ops.index(next(o for o in ops if o.kind == "F" and (o.microbatch, o.chunk)
                                  == (mb, c))) < ops.index(next(
                o for o in ops if o.kind == "B" and (o.microbatch, o.chunk) == (mb, c)))


def test_megatron_constraints_are_enforced_with_clear_errors():
    with pytest.raises(UsageError, match="N=4 must lie in"):
        interleaved(4, 0, 2, 2)  # M < p
    with pytest.raises(UsageError, match="must be 0 or ≥ p"):
        interleaved(4, 0, 9, 2)  # 9 mod 4 = 1 < 4
    with pytest.raises(UsageError, match="virtual pipeline size ≥ 2"):
        interleaved(4, 0, 8, 1)
    with pytest.raises(UsageError, match="one model chunk per stage"):
        schedule_table("1f1b", 4, 8, 2)
    # M mod N >= p is allowed: p=2, N=3, M=5 -> 5 mod 3 = 2 >= 2
    assert len(interleaved(2, 0, 5, 2, n=3)) == 20


def test_ideal_bubble_fractions():
    assert ideal_bubble_fraction("1f1b", 4, 8) == 3 / 8
    assert ideal_bubble_fraction("gpipe", 4, 8) == 3 / 8
    assert ideal_bubble_fraction("interleaved", 4, 8, 2) == 3 / 16

"""Operator-table reader (seed 004): ms → ns, elements → bytes, async all-reduces, and the
stated rule for missing backward times."""

import pytest
from conftest import SEED_OPTABLE

from sim.comm import CollKind, GroupKind
from sim.errors import InputError
from sim.workload.optable import read_optable
from sim.workload.registry import read_workload


def test_units_and_async_allreduce():
    w = read_workload(SEED_OPTABLE)
    assert len(w.layers) == 51
    addmm = next(x for x in w.layers if x.name == "addmm")
    assert addmm.forward.compute_ns == round(9.9808843806386 * 1e6)
    qkv = next(x for x in w.layers if x.name == "addmm_grad")
    c = qkv.input_grad.comm
    # 4,919,040 elements = 1280·3840 + 3840 (fused QKV weight + bias), 4 bytes each (fp32 grads)
    assert (c.kind, c.group, c.blocking, c.size_bytes) == (CollKind.ALLREDUCE, GroupKind.DP,
                                                           False, 4_919_040 * 4)


def test_missing_backward_rule_is_stated_and_applied():
    w = read_workload(SEED_OPTABLE)
    lm = next(x for x in w.layers if x.name == "lm_head")
    f = lm.forward.compute_ns
    assert lm.input_grad.compute_ns == lm.weight_grad.compute_ns == f
    assert any("not predicted" in a and "2 × forward" in a for a in w.assumptions)
    w3 = read_workload(SEED_OPTABLE, backward_ratio=3.0, bytes_per_element=2)
    lm3 = next(x for x in w3.layers if x.name == "lm_head")
    assert lm3.input_grad.compute_ns == lm3.weight_grad.compute_ns == round(f * 1.5)
    qkv = next(x for x in w3.layers if x.name == "addmm_grad")
    assert qkv.input_grad.comm.size_bytes == 4_919_040 * 2


def test_real_backward_times_are_kept():
    text = ("name\tforward_compute_time\tforward_comm_type\tforward_comm_size\t"
            "backward_compute_time\tbackward_comm_type\tbackward_comm_size\t"
            "weight_grad_compute_time\tweight_grad_comm_type\tweight_grad_comm_size\n"
            "mm\t1.0\tNone\t0\t2.5\tNone\t0\t0.5\tNone\t0\n")
    w = read_optable(text, "t.tsv")
    assert (w.layers[0].input_grad.compute_ns, w.layers[0].weight_grad.compute_ns) == (
        2_500_000, 500_000)
    assert not any("not predicted" in a for a in w.assumptions)


def test_bad_rows():
    head = ("name\tforward_compute_time\tforward_comm_type\tforward_comm_size\t"
            "backward_compute_time\tbackward_comm_type\tbackward_comm_size\t"
            "weight_grad_compute_time\tweight_grad_comm_type\tweight_grad_comm_size\n")
    with pytest.raises(InputError, match=r"^t.tsv:2: forward_compute_time"):
        read_optable(head + "mm\tfast\tNone\t0\t0\tNone\t0\t0\tNone\t0\n", "t.tsv")
    with pytest.raises(InputError, match=r"^t.tsv:2: row"):
        read_optable(head + "mm\t1\tNone\t0\n", "t.tsv")
    with pytest.raises(InputError, match=r"^t.tsv:1: header: unknown column"):
        read_optable(head.replace("\n", "\tcolour\n"), "t.tsv")

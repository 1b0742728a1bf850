"""Numbers: sizes and times beyond 2^31 and 2^53 stay exact where they are integers, zero-size
collectives and zero-time compute are well-defined no-ops, and integer-nanosecond accumulation
does not drift over 10^6 events (where float seconds would)."""

from __future__ import annotations

import json
import math

import pytest
import simpy
from conftest import SEED_1024, TOPOLOGIES, uniform_program

from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import InputError
from sim.network import build_network
from sim.network.base import CommRequest
from sim.network.simple import AlphaBetaNetwork, FreeNetwork
from sim.parallel.placement import Placement
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.report import build_report
from sim.topology import load_topology
from sim.viz.trace import build_trace
from sim.workload.aicb import read_aicb
from sim.workload.optable import read_optable
from sim.workload.registry import read_workload

SEED_SIZE = 12_802_064_384  # the DP reduce-scatter of the 1024-GPU seed (> 2^33)
HEADER = "HYBRID_TRANSFORMER_FWD_IN_BCKWD ga: 1\n1\n"


def _row(fwd_ns: str = "100", size: str = "1024", wg_size: str = "0") -> str:
    return f"l\t-1\t{fwd_ns}\tALLREDUCE\t{size}\t1\tNONE\t0\t1\tALLREDUCE\t{wg_size}\t100\n"


# ---- the readers ---------------------------------------------------------------------------
def test_aicb_sizes_and_times_beyond_2_to_the_53_are_exact():
    big = 2**53 + 1  # not representable as a float: any float detour would give 2^53
    w = read_aicb(HEADER + _row(fwd_ns=str(big), size=str(big), wg_size=str(2**63 - 1)), "b.txt")
    lay = w.layers[0]
    assert lay.forward.compute_ns == big and lay.forward.comm.size_bytes == big
    assert lay.weight_grad.comm.size_bytes == 2**63 - 1
    assert float(big) == 2**53  # (what a float detour would have produced)


def test_seed_size_above_2_to_the_33_is_read_exactly():
    w = read_workload(SEED_1024)
    comm = next(lay.weight_grad.comm for lay in w.layers if lay.name == "grad_param_comm")
    assert (comm.kind, comm.group, comm.size_bytes) == (CollKind.REDUCESCATTER, GroupKind.DP,
                                                        SEED_SIZE)


@pytest.mark.parametrize("token,field,needle", [
    (str(2**63), "forward_comm_bytes", "exceeds 2^63−1"),
    ("9" * 5000, "forward_comm_bytes", "(5000 characters) exceeds 2^63−1"),
    ("-1", "forward_comm_bytes", "must be ≥ 0"),
    ("1e19", "forward_compute_ns", "exceeds 2^63−1"),
    ("1e400", "forward_compute_ns", "not a finite number"),
])
def test_aicb_out_of_range_numbers_name_line_and_field(token, field, needle):
    row = _row(fwd_ns=token) if field == "forward_compute_ns" else _row(size=token)
    with pytest.raises(InputError) as e:
        read_aicb(HEADER + row, "b.txt")
    assert str(e.value).startswith(f"b.txt:3: {field}: ") and needle in str(e.value)
    assert len(str(e.value)) < 200  # a 5000-digit token is cut in the message


def test_optable_sizes_and_times():
    head = ("name\tforward_compute_time\tforward_comm_type\tforward_comm_size\t"
            "backward_compute_time\tbackward_comm_type\tbackward_comm_size\t"
            "weight_grad_compute_time\tweight_grad_comm_type\tweight_grad_comm_size\n")
    w = read_optable(head + f"x\t1e6\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCE_ASYNC\t{2**31 + 1}\n",
                     "o.tsv", bytes_per_element=4)
    assert w.layers[0].forward.compute_ns == 10**12  # 1e6 ms
    assert w.layers[0].weight_grad.comm.size_bytes == 4 * (2**31 + 1)
    with pytest.raises(InputError, match=r"o.tsv:2: forward_compute_time: 1e13 ms exceeds "):
        read_optable(head + "x\t1e13\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\n", "o.tsv")
    with pytest.raises(InputError, match=r"o.tsv:2: weight_grad_comm_size: .* exceeds 2\^63"):
        read_optable(head + f"x\t1\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCE\t{2**62}\n", "o.tsv")


# ---- the network: float rates at large sizes -------------------------------------------------
def _flow_net():
    net = build_network(load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml")))
    net.bind(simpy.Environment(), Placement(1, 16, 1), False)
    return net


def test_flow_network_is_linear_far_beyond_2_to_the_31():
    net = _flow_net()
    ranks = tuple(range(16))  # two nodes
    t = [net.isolated(CommRequest(CollKind.ALLREDUCE, GroupKind.DP, ranks, k * SEED_SIZE))
         .duration_ns for k in (1, 2, 4)]
    assert t[2] - t[1] == 2 * (t[1] - t[0])  # bandwidth term exactly linear in the size
    # a send between the nodes goes through one NIC: 200 Gb/s × 0.96 = 24 GB/s
    send = net.isolated(CommRequest(CollKind.SENDRECV, GroupKind.PP, (0, 8), 8 * SEED_SIZE))
    assert send.duration_ns == pytest.approx(8 * SEED_SIZE / 24e9 * 1e9, rel=1e-3)
    assert send.duration_ns > 2**31  # 4.27 s = 4.27e9 ns > 2^31: no 32-bit wrap


def test_zero_size_collectives_take_no_time_in_every_network():
    net = _flow_net()
    for kind in CollKind:
        ranks = (0, 8) if kind is CollKind.SENDRECV else tuple(range(16))
        assert net.isolated(CommRequest(kind, GroupKind.DP, ranks, 0)).duration_ns == 0
    ab = AlphaBetaNetwork(1000.0, {g: 100.0 for g in GroupKind})
    assert ab.isolated(CommRequest(CollKind.ALLREDUCE, GroupKind.DP, (0, 1, 2), 0)).duration_ns \
        == 0


def test_zero_size_rows_are_no_ops():
    w = read_aicb(HEADER + _row(size="0"), "b.txt")
    assert w.layers[0].forward.comm is None  # not a 0-byte collective with launch overhead


def test_zero_size_collective_and_zero_time_compute_through_the_engine():
    zero = Layer("z", Phase(0, Comm(CollKind.ALLREDUCE, GroupKind.TP, 0)), Phase(0), Phase(0))
    prog = PipelineProgram(tp=2, pp=2, dp=1, ep=1, vpp=1, microbatches=3, pp_bytes=0,
                           stages=[StageProgram(s, [(zero,)]) for s in range(2)],
                           schedule="1f1b")
    net = build_network(load_topology(str(TOPOLOGIES / "tiny-2x2.yaml")))
    for per_rank in (False, True):
        res = simulate(prog, net, per_rank=per_rank)
        assert res.iteration_ns == 0
        rep = build_report(res, workload="w", topology="t")
        assert rep["iteration_time_s"] == 0.0 and rep["bubble_fraction"] == 0.0
        json.dumps(rep, allow_nan=False)  # no NaN from 0/0


def test_huge_times_and_sizes_through_engine_report_and_trace():
    """Compute of 2^41 ns (~37 min) per phase and a 12.8 GB DP collective: the report's seconds
    are the integer ns / 1e9 (to float precision) and the trace keeps the exact byte count."""
    f = 2**41
    lay = Layer("big", Phase(f), Phase(f),
                Phase(f, Comm(CollKind.REDUCESCATTER, GroupKind.DP, SEED_SIZE, blocking=False)))
    prog = PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=2, pp_bytes=0,
                           stages=[StageProgram(0, [(lay,)])], schedule="1f1b")
    net = AlphaBetaNetwork(0.0, {g: 100.0 for g in GroupKind})  # 100 GB/s, no latency
    res = simulate(prog, net, record_spans=True)
    comm_ns = math.ceil((2 - 1) / 2 * SEED_SIZE / 100e9 * 1e9 - 1e-6)  # ring RS: (n−1)/n·S/B
    # 2 microbatches × 3 phases, the last weight-grad's reduce-scatter is exposed at the end
    assert res.iteration_ns == 6 * f + comm_ns
    rep = build_report(res, workload="w", topology="t")
    assert rep["iteration_time_s"] == pytest.approx(res.iteration_ns / 1e9, rel=2**-52)
    st = rep["stages"][0]
    assert st["exposed_comm_s"]["DP"] == pytest.approx(comm_ns / 1e9, rel=2**-52)
    trace = json.loads(json.dumps(build_trace(res, report=rep)))
    sizes = {e.get("args", {}).get("bytes") for e in trace["traceEvents"]}
    assert SEED_SIZE in sizes


# ---- accumulation over 10^6 events ----------------------------------------------------------
@pytest.mark.slow
def test_integer_nanoseconds_do_not_drift_over_a_million_events():
    """500,000 microbatches of 100 ns forward + 100 ns backward on one stage: 10^6 timed events.
    Integer ns give exactly 10^8 ns = 0.1 s; accumulating the same durations as float seconds
    is off by ~1.8e-12 s."""
    m = 500_000
    res = simulate(uniform_program(1, m, 100, 100), FreeNetwork())
    assert res.events >= 10**6
    assert res.iteration_ns == 100_000_000  # exact
    rep = build_report(res, workload="w", topology="t")
    assert rep["iteration_time_s"] == 0.1  # the double nearest to 0.1
    naive = 0.0
    for _ in range(m):
        naive += 100e-9  # forward
        naive += 100e-9  # backward
    assert naive != 0.1 and abs(naive - 0.1) > 1e-12  # float seconds drift


def test_per_stage_categories_sum_exactly_to_the_iteration_in_ns():
    res = simulate(uniform_program(4, 64, 3_333_333, 6_666_666), FreeNetwork())
    for st in res.ranks:
        assert st.compute_ns + st.optimizer_ns + sum(st.exposed_comm_ns.values()) \
            + st.bubble_ns == res.iteration_ns  # integers: exact, not approx
    assert res.iteration_ns == (64 + 4 - 1) * (3_333_333 + 6_666_666)

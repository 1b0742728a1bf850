"""Megatron-Core overlaps as flags: --overlap-param-gather (first use waits for its bucket's
all-gather) and --overlap-grad-reduce; turning an overlap on never makes an iteration slower."""

import json

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.models import generate, load_model
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.topology.gpu import GpuSpec


def ag(size: int, blocking: bool) -> Comm:
    return Comm(CollKind.ALLGATHER, GroupKind.DP, size, blocking)


def program(overlap: bool) -> PipelineProgram:
    """One stage, DP = 2, M = 2; layers L1, L2: forward 5, input-grad 5, weight-grad 5 ns.
    Parameter all-gathers of 8 bytes (L1's bucket) and 20 bytes (L2's): over 2 ranks at
    1 GB/s an all-gather takes (n-1)/n * S/B = 4 and 10 ns."""
    l1, l2 = Layer("L1", Phase(5), Phase(5), Phase(5)), Layer("L2", Phase(5), Phase(5), Phase(5))
    if overlap:
        pro = (Task("ag0", TaskKind.GRAD_SYNC, comm=ag(8, False), param_bucket=0),
               Task("ag1", TaskKind.GRAD_SYNC, comm=ag(20, False), param_bucket=1))
        l1 = Layer("L1", l1.forward, l1.input_grad, l1.weight_grad, param_buckets=(0,))
        l2 = Layer("L2", l2.forward, l2.input_grad, l2.weight_grad, param_buckets=(1,))
        epi = ()
    else:
        pro = ()
        epi = (Task("ag0", TaskKind.GRAD_SYNC, comm=ag(8, True)),
               Task("ag1", TaskKind.GRAD_SYNC, comm=ag(20, True)))
    st = StageProgram(0, [(l1, l2)], prologue=pro, epilogue=epi)
    return PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=2, pp_bytes=0,
                           stages=[st], schedule="1f1b")


def run(overlap: bool):
    return simulate(program(overlap), AlphaBetaNetwork(0, {GroupKind.DP: 1.0}),
                    record_spans=True)


def test_first_use_waits_for_its_bucket_hand_derived():
    # Both all-gathers issued at 0 on the FIFO DP stream: ag0 0..4, ag1 4..14. F0: L1 waits
    # 0..4, runs 4..9; L2 waits 9..14, runs 14..19. B0 19..39, F1 39..49 (no waits: only the
    # first use waits), B1 49..69.
    res = run(True)
    log = sorted((s.start_ns, s.end_ns, s.stream, s.kind, s.label) for s in res.spans)
    assert log == [
        (0, 4, "DP", "comm", "ag0"),
        (0, 4, "compute", "comm_wait", "wait DP"),
        (4, 9, "compute", "forward", "L1"),
        (4, 14, "DP", "comm", "ag1"),
        (9, 14, "compute", "comm_wait", "wait DP"),
        (14, 19, "compute", "forward", "L2"),
        (19, 24, "compute", "input_grad", "L2"),
        (24, 29, "compute", "weight_grad", "L2"),
        (29, 34, "compute", "input_grad", "L1"),
        (34, 39, "compute", "weight_grad", "L1"),
        (39, 44, "compute", "forward", "L1"),
        (44, 49, "compute", "forward", "L2"),
        (49, 54, "compute", "input_grad", "L2"),
        (54, 59, "compute", "weight_grad", "L2"),
        (59, 64, "compute", "input_grad", "L1"),
        (64, 69, "compute", "weight_grad", "L1"),
    ]
    assert res.iteration_ns == 69
    assert res.ranks[0].exposed_comm_ns[GroupKind.DP] == 4 + 5


def test_without_overlap_the_all_gathers_follow_the_step():
    # 4 passes of 10 + 20 ns: compute ends at 60; ag0 60..64, ag1 64..74, blocking.
    res = run(False)
    assert res.iteration_ns == 74
    assert res.ranks[0].exposed_comm_ns[GroupKind.DP] == 14
    assert res.iteration_ns >= run(True).iteration_ns


GPU = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)


@pytest.mark.parametrize("tp,pp,dp,vpp,gb", [(1, 1, 8, 1, 16), (2, 2, 2, 1, 16),
                                             (1, 4, 2, 1, 32), (2, 2, 2, 2, 16)])
def test_turning_an_overlap_on_never_slows_the_iteration(tp, pp, dp, vpp, gb):
    # Per-group bandwidths without shared links (alpha 5 us; TP 200, others 20 GB/s): the
    # overlaps only move communication beside compute, so each can only shorten the iteration.
    model = load_model(ROOT / "workloads/models/gpt2-medium.yaml")
    times = []
    for grad, param in ((False, False), (True, False), (True, True)):
        par = make_par(tp=tp, pp=pp, dp=dp, vpp=vpp, global_batch=gb,
                             distributed_optimizer=True, overlap_grad_reduce=grad,
                             overlap_param_gather=param)
        net = AlphaBetaNetwork(5000, {g: 200.0 if g is GroupKind.TP else 20.0
                                      for g in GroupKind})
        times.append(simulate(generate(model, par, GPU), net).iteration_ns)
    assert times[2] <= times[1] <= times[0]
    assert times[2] < times[0]  # DP > 1: the overlaps hide real communication


@pytest.mark.parametrize("flag", ["--no-overlap-grad-reduce", "--overlap-grad-reduce",
                                  "--overlap-param-gather"])
def test_overlap_flags_are_printed_in_the_assumptions(tmp_path, flag):
    out = tmp_path / "r.json"
    args = ["--model", ROOT / "workloads/models/gpt2-medium.yaml", "--topo",
            ROOT / "topologies/tiny-fattree-8.yaml", "--tp", "2", "--pp", "2",
            "--global-batch", "16", "--distributed-optimizer", flag, "--json", out, "--quiet"]
    assert main([str(a) for a in args]) == 0
    assert any(a.startswith(flag + ":") for a in json.loads(out.read_text())["assumptions"])


@pytest.mark.parametrize("flags", [["--overlap-param-gather"],
                                   ["--overlap-param-gather", "--distributed-optimizer",
                                    "--no-overlap-grad-reduce"],
                                   ["--overlap-param-gather", "--distributed-optimizer",
                                    "--zero", "3"]])
def test_param_gather_needs_distributed_optimizer_and_grad_overlap(capsys, flags):
    args = ["--model", ROOT / "workloads/models/gpt2-medium.yaml", "--topo",
            ROOT / "topologies/tiny-fattree-8.yaml", "--global-batch", "16", *flags]
    assert main([str(a) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--overlap-param-gather" in err

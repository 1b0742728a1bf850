"""Megatron-Core's --overlap-param-gather-with-optimizer-step
(sim/models/features/param_gather_step.py): model chunk 0's parameter all-gather issued after
chunk 0's optimizer step, beside the step of the other chunks, instead of beside the forward."""

from __future__ import annotations

import pytest
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.models import generate, load_model
from sim.models.features import param_gather_step
from sim.network.simple import AlphaBetaNetwork
from sim.options import applicable
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.topology.gpu import GpuSpec

FLAG = "--overlap-param-gather-with-optimizer-step"


def ag(label: str, size: int, bucket: int = -1) -> Task:
    return Task(label, TaskKind.GRAD_SYNC, param_bucket=bucket,
                comm=Comm(CollKind.ALLGATHER, GroupKind.DP, size, blocking=False))


def program(at_step: bool, chunk0_bytes: int = 8) -> PipelineProgram:
    """One stage, DP = 2, M = 2; layers L1 (standing for model chunk 0) and L2 (chunk 1):
    forward, input-grad, weight-grad 5 ns each. Parameter all-gathers over 2 ranks at 1 GB/s
    take (n-1)/n · S/B: L1's 8 bytes 4 ns, L2's 20 bytes 10 ns. The optimizer step: 6 ns for
    chunk 0's parameters and 6 ns for the rest. ``at_step``: the option (L1's all-gather
    between the two optimizer tasks, built by the feature); else --overlap-param-gather alone
    (both all-gathers at the iteration start, one 12 ns step)."""
    ph = Phase(5)
    if at_step:
        pro = (ag("ag1", 20, bucket=0),)
        l1, l2 = Layer("L1", ph, ph, ph), Layer("L2", ph, ph, ph, param_buckets=(0,))
        epi = param_gather_step.optimizer_tasks(6, 6, (ag("ag0", chunk0_bytes),))
    else:
        pro = (ag("ag0", 8, bucket=0), ag("ag1", 20, bucket=1))
        l1 = Layer("L1", ph, ph, ph, param_buckets=(0,))
        l2 = Layer("L2", ph, ph, ph, param_buckets=(1,))
        epi = (Task("optimizer", TaskKind.OPTIMIZER, compute_ns=12, wait_async=True),)
    st = StageProgram(0, [(l1, l2)], prologue=pro, epilogue=epi)
    return PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=2, pp_bytes=0,
                           stages=[st], schedule="1f1b")


def run(prog: PipelineProgram):
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.DP: 1.0}), record_spans=True)
    return res, sorted((s.start_ns, s.end_ns, s.stream, s.kind, s.label) for s in res.spans)


def test_chunk0_all_gather_runs_beside_the_rest_of_the_step_hand_derived():
    # Only L2's all-gather at the start: ag1 0..10 on the DP stream. F0: L1 0..5 (its
    # parameters were gathered at the previous step), L2 waits 5..10 and runs 10..15. B0:
    # 15..35; F1 35..45 (no waits), B1 45..65. Step: chunk 0's optimizer 65..71 (nothing
    # pending), ag0 issued at 71 runs 71..75 beside the rest of the step 71..77; the iteration
    # ends when both are done: 77.
    res, log = run(program(True))
    assert log == [
        (0, 5, "compute", "forward", "L1"),
        (0, 10, "DP", "comm", "ag1"),
        (5, 10, "compute", "comm_wait", "wait DP"),
        (10, 15, "compute", "forward", "L2"),
        (15, 20, "compute", "input_grad", "L2"),
        (20, 25, "compute", "weight_grad", "L2"),
        (25, 30, "compute", "input_grad", "L1"),
        (30, 35, "compute", "weight_grad", "L1"),
        (35, 40, "compute", "forward", "L1"),
        (40, 45, "compute", "forward", "L2"),
        (45, 50, "compute", "input_grad", "L2"),
        (50, 55, "compute", "weight_grad", "L2"),
        (55, 60, "compute", "input_grad", "L1"),
        (60, 65, "compute", "weight_grad", "L1"),
        (65, 71, "compute", "optimizer", "optimizer.chunk0"),
        (71, 75, "DP", "comm", "ag0"),
        (71, 77, "compute", "optimizer", "optimizer"),
    ]
    assert res.iteration_ns == 77
    assert res.ranks[0].exposed_comm_ns[GroupKind.DP] == 5  # L2's wait only


def test_against_overlap_param_gather_alone_the_chunk0_wait_is_gone():
    # --overlap-param-gather alone: ag0 0..4 (L1 waits 0..4, runs 4..9), ag1 4..14 (L2 waits
    # 9..14, runs 14..19), B0 19..39, F1 39..49, B1 49..69, one step 69..81: 81 = 77 + 4,
    # L1's 4 ns wait
    res, _ = run(program(False))
    assert res.iteration_ns == 81


def test_an_all_gather_longer_than_the_rest_of_the_step_ends_the_iteration():
    # chunk 0's all-gather of 40 bytes takes (1/2)·40 = 20 ns: 71..91, past the step's end at
    # 77; the next forward of chunk 0 would wait for it, so the iteration ends at 91
    res, log = run(program(True, chunk0_bytes=40))
    assert (71, 91, "DP", "comm", "ag0") in log
    assert res.iteration_ns == 91


GPT = load_model("workloads/models/gpt2-medium.yaml")
A100 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0}, 80.0, 2039.0)


def test_generated_program_moves_chunk0_gathers_to_the_step_and_buckets_each_chunk_once():
    kw = dict(pp=2, dp=2, vpp=2, global_batch=8, distributed_optimizer=True,
              overlap_param_gather=True)
    base = generate(GPT, make_par(**kw), A100)
    on = generate(GPT, make_par(**kw, overlap_param_gather_with_optimizer_step=True), A100)
    for st_base, st in zip(base.stages, on.stages, strict=True):
        # chunk 1's all-gather (one bucket) stays at the start; chunk 0's is gone from there
        assert len(st.prologue) == 1 and st.prologue[0].param_bucket == 0
        labels = [t.label for t in st.epilogue]
        i = labels.index("optimizer.chunk0")
        assert labels[i:i + 3] == ["optimizer.chunk0", "param_allgather.chunk0", "optimizer"]
        assert not st.epilogue[i + 1].comm.blocking
        # the step is split, not shortened: each part is timed by its own parameters
        opt = [t.compute_ns for t in st.epilogue if t.kind is TaskKind.OPTIMIZER]
        opt_base = [t.compute_ns for t in st_base.epilogue if t.kind is TaskKind.OPTIMIZER]
        assert len(opt) == 2 and len(opt_base) == 1 and all(t > 0 for t in opt)
        # chunk 0's all-gather: every parameter of the chunk, 2 bytes each
        chunk0 = st.epilogue[i + 1].comm.size_bytes
        assert chunk0 == sum(b.comm.size_bytes for b in st_base.prologue
                             if b.label.startswith("param_allgather")) - \
            st.prologue[0].comm.size_bytes


MODEL = ["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "1", "--pp", "2",
         "--global-batch", "8"]
ON = ["--vpp", "2", "--distributed-optimizer", "--overlap-param-gather"]


@pytest.mark.parametrize(("off", "says"), [
    ("distributed_optimizer", "only supported with the distributed optimizer"),
    ("overlap_param_gather", "must be used with --overlap-param-gather"),
    ("vpp", "only supported with interleaved pipeline parallelism"),
])
def test_megatron_refusals(off, says):
    """Megatron-LM's arguments.py asserts, in its order, each alone."""
    kw = dict(pp=2, dp=2, vpp=2, global_batch=8, distributed_optimizer=True,
              overlap_param_gather=True, overlap_param_gather_with_optimizer_step=True)
    kw[off] = 1 if off == "vpp" else False
    with pytest.raises(UsageError, match=says) as e:
        param_gather_step.check(make_par(**kw))
    assert e.value.field == "overlap_param_gather_with_optimizer_step"


def test_megatron_refusal_on_the_command_line(capsys):
    assert main([*MODEL, "--distributed-optimizer", "--overlap-param-gather", FLAG,
                 "--quiet"]) == 2
    assert (f"{FLAG}: only supported with interleaved pipeline parallelism"
            in capsys.readouterr().err)


def test_simrun_refusals(capsys):
    assert main([*MODEL, *ON, "--dtype", "fp8", "--fp8-param-gather", FLAG, "--quiet",
                 "--topo", "dgx-h100-1024", "--gpus", "4"]) == 2
    assert f"{FLAG}: not modelled with --fp8-param-gather" in capsys.readouterr().err
    assert main(["--workload", "workloads/aicb-gpt13b-tp8-pp8-512gpu.txt", "--topo",
                 "dgx-a100-512", FLAG, "--quiet"]) == 2
    assert f"{FLAG}: applies to --model runs" in capsys.readouterr().err


def test_applicability_verdicts():
    v = applicable.TABLE[FLAG]
    assert v["model"].verdict == "changes"
    assert v["aicb"].verdict == v["optable"].verdict == v["aicb-csv"].verdict == "refused"

"""ZeRO / FSDP: the per-unit all-gathers and reduce-scatters of stage 3 in a hand-derived
order and timeline, and the sharded memory of each stage."""

import pytest
from conftest import ROOT
from par_support import make_par

from sim.comm import CollKind, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.models.features.zero import zero3_layers
from sim.models.generator import generate
from sim.models.memory import check_memory
from sim.models.vocab.rows import Row
from sim.models.vocab.spec import load_model
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.topology.gpu import GpuSpec


def _program(m=1):
    # two units: layer 0 with 10 parameters (20 bytes), layer 1 with 20 (40 bytes); each
    # layer 10 ns forward, 10 ns input-grad, 10 ns weight-grad; DP = 2
    rows = [Row("layer0_a", params=10, tags={"layer": 0}),
            Row("layer1_a", params=20, tags={"layer": 1})]
    layers = [Layer(r.name, Phase(10), Phase(10), Phase(10)) for r in rows]
    par = make_par(dp=2, global_batch=2 * m, zero=3)
    prog_layers = zero3_layers(layers, rows, par)
    return PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=m, pp_bytes=0,
                           stages=[StageProgram(0, [tuple(prog_layers)])], schedule="1f1b")


def test_zero3_layer_order():
    names = [lay.name for lay in _program().stages[0].chunks[0]]
    assert names == ["zero3_prefetch", "layer0_zero3_gather", "layer0_a",
                     "layer0_zero3_gather_bwd", "layer1_zero3_gather", "layer1_a",
                     "layer1_zero3_gather_bwd", "zero3_prefetch_bwd"]


def test_zero3_gathers_and_reduce_scatters_hand_derived_timeline():
    # α = 0, 1 GB/s in DP, n = 2: all-gather / reduce-scatter of S bytes take S/2 ns.
    # AG0 = RS0 = 10 ns (20 B), AG1 = RS1 = 20 ns (40 B).
    # forward:  AG0 0-10 (waited: nothing to overlap), AG1 issued at 10 overlaps layer0 10-20,
    #           waited 20-30, layer1 30-40.
    # backward: AG1 issued at 40, waited 40-60; AG0 issued at 60 overlaps layer1 (60-80);
    #           RS1 after layer1's weight grad 80-100 on the gradient stream; layer0 80-100
    #           (AG0 long done); RS0 queued behind RS1: 100-110; the rank ends at 110.
    res = simulate(_program(), AlphaBetaNetwork(0, {GroupKind.DP: 1.0}), record_spans=True)
    comms = sorted((s.start_ns, s.end_ns, s.label) for s in res.spans if s.stream == "DP")
    assert comms == [
        (0, 10, "zero3_prefetch.forward"),
        (10, 30, "layer0_zero3_gather.forward"),
        (40, 60, "zero3_prefetch_bwd.input_grad"),
        (60, 70, "layer1_zero3_gather_bwd.input_grad"),
        (80, 100, "layer1_zero3_gather.weight_grad"),
        (100, 110, "layer0_zero3_gather.weight_grad"),
    ]
    compute = sorted((s.start_ns, s.end_ns, s.kind, s.label) for s in res.spans
                     if s.stream == "compute" and s.kind != "bubble" and s.end_ns > s.start_ns)
    assert compute == [
        (0, 10, "comm_wait", "wait DP"),
        (10, 20, "forward", "layer0_a"),
        (20, 30, "comm_wait", "wait DP"),
        (30, 40, "forward", "layer1_a"),
        (40, 60, "comm_wait", "wait DP"),
        (60, 70, "input_grad", "layer1_a"),
        (70, 80, "weight_grad", "layer1_a"),
        (80, 90, "input_grad", "layer0_a"),
        (90, 100, "weight_grad", "layer0_a"),
        (100, 110, "comm_wait", "wait DP"),
    ]
    assert res.iteration_ns == 110


def test_zero3_reduce_scatters_every_microbatch():
    prog = _program(m=3)
    kinds = []
    for lay in prog.stages[0].chunks[0]:
        for ph in (lay.forward, lay.input_grad, lay.weight_grad):
            if ph.comm is not None:
                kinds.append((ph.comm.kind, ph.comm.per_microbatch, ph.comm.prefetch))
    assert kinds.count((CollKind.REDUCESCATTER, True, False)) == 2
    assert kinds.count((CollKind.ALLGATHER, False, True)) == 4
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.DP: 1.0}), record_spans=True)
    rs = [s for s in res.spans if s.stream == "DP" and s.label.endswith("weight_grad")]
    assert len(rs) == 2 * 3  # both units, every microbatch


MODEL = ROOT / "workloads/models/llama3-8b.yaml"
# a GPU spec declared here (not the catalogue's H100-SXM5-80GB): its compute is the generic
# roofline at the declared large-GEMM efficiency, as before unknown GPUs had to declare it
GPU = GpuSpec("H100", {"bf16": 989.0}, 80, 3350, compute_efficiency=0.75)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_memory_per_stage(stage):
    model = load_model(MODEL)
    par = make_par(dp=8, global_batch=8, zero=stage, flash_attention=True)
    mem = check_memory(model, par, GPU)
    st = mem.stages[0]
    base = check_memory(model, make_par(dp=8, global_batch=8, flash_attention=True),
                        GPU).stages[0]
    psi = base.weights_bytes // 2  # parameters on the GPU
    shard = -(-psi // 8)
    assert st.optimizer_bytes == (12 * psi if stage == 0 else 12 * shard)
    assert st.grads_bytes == (4 * psi if stage == 0 else 2 * psi if stage == 1 else 2 * shard)
    if stage == 3:
        # the largest unit: the untied output layer and the final RMSNorm, 128256·4096 + 4096
        assert st.weights_bytes == 2 * shard + 2 * 2 * (128256 * 4096 + 4096)
    else:
        assert st.weights_bytes == 2 * psi
    assert st.activations_bytes == base.activations_bytes


def test_zero_generated_program_and_constraints():
    model = load_model(MODEL)
    prog = generate(model, make_par(dp=8, global_batch=8, zero=3, flash_attention=True),
                    GPU)
    names = [lay.name for lay in prog.stages[0].chunks[0]]
    assert names[:2] == ["zero3_prefetch", "embedding_zero3_gather"]
    assert "layer31_zero3_gather_bwd" in names and names[-1] == "zero3_prefetch_bwd"
    assert not any(t.label.startswith("param_allgather") for t in prog.stages[0].epilogue)
    with pytest.raises(UsageError, match="pipeline engine"):
        generate(model, make_par(pp=2, dp=4, global_batch=8, zero=2), GPU)
    with pytest.raises(UsageError, match="give one"):
        generate(model, make_par(dp=8, global_batch=8, zero=1,
                                       distributed_optimizer=True), GPU)


def test_aicb_deepspeed_zero3_file_read_with_zero3_semantics():
    from sim.workload.deepspeed import read_as_zero
    from sim.workload.registry import read_workload
    from sim.workload.stages import LayoutOptions, build_program

    path = ROOT / "workloads/aicb-llama7b-deepspeed-zero3-a100.txt"
    wl = read_workload(str(path))
    prog = read_as_zero(build_program(wl, LayoutOptions(all_gpus=8)), 3)
    rows = prog.stages[0].chunks[0]
    gathers = [lay.input_grad.comm for lay in rows]
    assert all(c.kind is CollKind.ALLGATHER and c.group is GroupKind.DP and c.blocking
               for c in gathers)
    # sizes as written in the file (rows 1..12)
    assert [c.size_bytes for c in gathers] == [357468, 119162, 317843, 317843, 317843, 357468,
                                               119162, 317843, 317843, 317843, 317843, 317843]
    rs = rows[0].weight_grad.comm
    assert (rs.kind, rs.group, rs.size_bytes, rs.per_microbatch) == (
        CollKind.REDUCESCATTER, GroupKind.DP, 1889785610, True)
    # α = 0, 1 GB/s, 8 ranks: every collective costs ceil(7/8·S) ns; all of them exposed
    # (blocking all-gathers; the reduce-scatter is issued by the last backward row)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.DP: 1.0}))
    compute = sum(lay.forward.compute_ns + lay.input_grad.compute_ns
                  + lay.weight_grad.compute_ns for lay in rows)
    comm = sum(-(-7 * c.size_bytes // 8) for c in gathers) + -(-7 * 1889785610 // 8)
    comm += 13 * 100  # the file's process time (last column, 100 ns) after each collective
    assert rs.post_delay_ns == 100 and all(c.post_delay_ns == 100 for c in gathers)
    assert res.iteration_ns == compute + comm

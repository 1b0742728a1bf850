"""PyTorch FSDP2 (--use-torch-fsdp2, sim/models/features/fsdp2.py): the copies around each unit's
all-gather and reduce-scatter and the fp32 reduce-scatter, on a hand-derived timeline and in a
generated program; refusals."""

import math

import pytest
from conftest import ROOT
from par_support import make_par

from sim.comm import CollKind, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.models import build_model_plan, load_model
from sim.models.features.zero import zero3_layers
from sim.models.generator import generate
from sim.models.vocab.rows import Row
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.topology.gpu import GpuSpec

A100_80 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)


def _program(fsdp2: bool):
    # as tests/test_zero.py: layer 0 with 10 parameters, layer 1 with 20; 10 ns per phase;
    # DP 2; the copies timed at 10 bytes per ns
    rows = [Row("layer0_a", params=10, tags={"layer": 0}),
            Row("layer1_a", params=20, tags={"layer": 1})]
    layers = [Layer(r.name, Phase(10), Phase(10), Phase(10)) for r in rows]
    par = make_par(dp=2, global_batch=2, zero=3, fsdp=True, use_torch_fsdp2=fsdp2)
    prog_layers = zero3_layers(layers, rows, par,
                               lambda ops: sum(op.bytes for op in ops) // 10)
    return PipelineProgram(tp=1, pp=1, dp=2, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [tuple(prog_layers)])], schedule="1f1b")


def test_fsdp2_copies_and_fp32_reduce_scatter_hand_derived_timeline():
    # α = 0, 1 GB/s: S bytes take S/2 ns. All-gathers in bf16: AG0 20 B = 10 ns, AG1 40 B =
    # 20 ns. Reduce-scatters in fp32: RS0 40 B = 20 ns, RS1 80 B = 40 ns. Copy-out 4 B per
    # parameter: 4 ns (layer 0), 8 ns (layer 1); copy-in 6 + 8 B per parameter: 14, 28 ns.
    # A prefetched all-gather is issued where its phase starts (beside the phase's copy-out),
    # a reduce-scatter after its phase's compute (the copy-in it waits for).
    # forward:  AG0 0-10, waited; AG1 issued 10 (10-30) beside copy-out0 10-14; layer0 14-24;
    #           wait 24-30; copy-out1 30-38; layer1 38-48.
    # backward: AG1 issued 48 (48-68), waited; AG0 issued 68 (68-78) beside copy-out1 68-76;
    #           layer1 76-96; copy-in1 96-124; RS1 124-164; copy-out0 124-128 (AG0 done);
    #           layer0 128-148; copy-in0 148-162; RS0 queued behind RS1: 164-184; wait 162-184.
    res = simulate(_program(True), AlphaBetaNetwork(0, {GroupKind.DP: 1.0}), record_spans=True)
    comms = sorted((s.start_ns, s.end_ns, s.label) for s in res.spans if s.stream == "DP")
    assert comms == [
        (0, 10, "zero3_prefetch.forward"),
        (10, 30, "layer0_zero3_gather.forward"),
        (48, 68, "zero3_prefetch_bwd.input_grad"),
        (68, 78, "layer1_zero3_gather_bwd.input_grad"),
        (124, 164, "layer1_zero3_gather.weight_grad"),
        (164, 184, "layer0_zero3_gather.weight_grad"),
    ]
    compute = sorted((s.start_ns, s.end_ns, s.kind, s.label) for s in res.spans
                     if s.stream == "compute" and s.kind != "bubble" and s.end_ns > s.start_ns)
    assert compute == [
        (0, 10, "comm_wait", "wait DP"),
        (10, 14, "forward", "layer0_zero3_gather"),
        (14, 24, "forward", "layer0_a"),
        (24, 30, "comm_wait", "wait DP"),
        (30, 38, "forward", "layer1_zero3_gather"),
        (38, 48, "forward", "layer1_a"),
        (48, 68, "comm_wait", "wait DP"),
        (68, 76, "input_grad", "layer1_zero3_gather_bwd"),
        (76, 86, "input_grad", "layer1_a"),
        (86, 96, "weight_grad", "layer1_a"),
        (96, 124, "weight_grad", "layer1_zero3_gather"),
        (124, 128, "input_grad", "layer0_zero3_gather_bwd"),
        (128, 138, "input_grad", "layer0_a"),
        (138, 148, "weight_grad", "layer0_a"),
        (148, 162, "weight_grad", "layer0_zero3_gather"),
        (162, 164, "comm_wait", "wait DP"),  # for RS1, then for RS0
        (164, 184, "comm_wait", "wait DP"),
    ]
    assert res.iteration_ns == 184
    # without FSDP2's copies and fp32 reduction: tests/test_zero.py's 110 ns
    assert simulate(_program(False), AlphaBetaNetwork(0, {GroupKind.DP: 1.0})).iteration_ns == 110


def test_generated_fsdp2_phases_hand_derived():
    model = load_model(str(ROOT / "workloads" / "models" / "llama3-8b.yaml"))
    par = make_par(dp=8, global_batch=8, zero=3, fsdp=True, use_torch_fsdp2=True,
                         flash_attention=True)
    plan = build_model_plan(model, par)
    layer_params = sum(r.params for r in plan.stages[0].rows() if r.tags.get("layer") == 0)
    # Llama 3 8B layer: q, o 4096², k, v 4096·1024, gate/up/down 3·4096·14336, two norms 4096
    assert layer_params == 2 * 4096 ** 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    prog = generate(model, par, A100_80)
    gather = {lay.name: lay for lay in prog.stages[0].chunks[0]}["layer0_zero3_gather"]
    bw = 2039e9 * 0.8 / 1e9  # bytes per ns at the A100 roofline's 80% of HBM
    assert gather.forward.compute_ns == math.ceil(4 * layer_params / bw + 2000)
    assert gather.weight_grad.compute_ns == math.ceil(14 * layer_params / bw + 2 * 2000)
    assert gather.weight_grad.comm.kind is CollKind.REDUCESCATTER
    assert gather.weight_grad.comm.size_bytes == 4 * layer_params
    bwd = {lay.name: lay for lay in prog.stages[0].chunks[0]}["layer0_zero3_gather_bwd"]
    assert bwd.input_grad.compute_ns == gather.forward.compute_ns
    plain = generate(model, make_par(dp=8, global_batch=8, zero=3, fsdp=True,
                                           flash_attention=True), A100_80)
    g0 = {lay.name: lay for lay in plain.stages[0].chunks[0]}["layer0_zero3_gather"]
    assert g0.forward.compute_ns == 0 and g0.weight_grad.comm.size_bytes == 2 * layer_params


def test_use_torch_fsdp2_needs_fsdp():
    model = load_model(str(ROOT / "workloads" / "models" / "llama3-8b.yaml"))
    with pytest.raises(UsageError) as err:
        build_model_plan(model, make_par(dp=8, global_batch=8, use_torch_fsdp2=True))
    assert err.value.field == "use_torch_fsdp2"

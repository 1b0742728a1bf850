"""The one run pipeline: inputs → program → placement / rank classes → network → simulate →
result and report.

``simrun``, ``simrun sweep`` (:mod:`sim.sweep.evaluate`), ``simrun validate``
(:mod:`sim.validation.cases`), scripts/make_gallery.py and benchmarks/run.py all go through here.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from typing import Any

# engine.simulate, report.build_report and stages.build_program are looked up per call (a test
# may stand in for them)
from sim import engine, report
from sim.engine.host import describe as host_describe
from sim.engine.interference import DEFAULT_SMS, Interference, ran_beside
from sim.engine.jitter import Jitter
from sim.engine.result import SimResult
from sim.errors import UsageError
from sim.faults import Faults, faults_with, simulation_plan
from sim.files.outputs import check_output_paths, write_json
from sim.kernels.gpus import describe, find
from sim.models.compute_setup import (
    ComputeOptions,
    resolve_compute,
    scale_workload,
    source_compute_scale,
)
from sim.models.memory import MemoryReport
from sim.network import build_network
from sim.network.factory import OPS, parse_algorithm
from sim.options import applicable
from sim.parallel.config import ParallelConfig
from sim.parallel.layout import LayoutRequest
from sim.parallel.placement import Placement
from sim.program.pipeline import PipelineProgram
from sim.runtime.progress import Progress
from sim.runtime.watchdog import simulate_watched
from sim.scenario import variability
from sim.scenario.model_run import ModelRun, model_run
from sim.scenario.options import (
    ModelInput,
    NetworkOptions,
    Scenario,
    SimulationOptions,
    WorkloadInput,
)
from sim.topology import load_topology
from sim.topology.gpu import GpuSpec
from sim.topology.spec import Topology
from sim.viz.outputs import check_figure_outputs, write_figures
from sim.viz.select import parse_rank_spec
from sim.viz.trace_size import check_trace_size
from sim.workload import stages
from sim.workload.deepspeed import read_as_zero
from sim.workload.registry import read_workload


@dataclass
class ScenarioResult:
    """What one run produced. ``simulate_s``: wall time of the simulation itself (s)."""

    scenario: Scenario
    topology: Topology
    program: PipelineProgram
    placement: Placement
    result: SimResult
    report: dict[str, Any]
    simulate_s: float
    model_run: ModelRun | None = None
    healthy: SimResult | None = None  # with faults: the same run on a healthy cluster


def network_of(topology: Topology, opts: NetworkOptions):
    """The network model of ``topology`` selected by ``opts``."""
    return build_network(topology, algorithm=opts.algorithm, routing=opts.routing or "ecmp",
                         protocol=opts.protocol, nvls_enable=opts.nvls_enable,
                         nccl_algo=opts.nccl_algo, nccl_proto=opts.nccl_proto,
                         collnet_enable=opts.collnet_enable)


def dispatcher_network(opts: NetworkOptions, par: ParallelConfig | None) -> NetworkOptions:
    """``opts`` with the all-to-all algorithm of Megatron-Core's flex dispatcher (DeepEP):
    ``hierarchical`` (intra-node, then inter-node among GPUs of the same local index) unless
    ``--algorithm`` names one for all-to-alls; unchanged for other runs (``par`` ``None``: a
    workload file). (A group inside one
    node has no hierarchical plan and keeps the direct all-to-all.)"""
    if par is None or par.moe_token_dispatcher != "flex" or par.ep == 1:
        return opts
    given = parse_algorithm(opts.algorithm)
    if isinstance(given, dict):
        if "alltoall" in given:
            return opts
        per_op = dict(given)
    else:
        per_op = {op: given for op in OPS if op != "alltoall"} if given else {}
    per_op["alltoall"] = "hierarchical"
    text = ",".join(f"{op}={algo}" for op, algo in per_op.items())
    return dataclasses.replace(opts, algorithm=text)


def interference_of(gpu: GpuSpec, opts: SimulationOptions) -> tuple[Interference, str]:
    """The SM interference of a run on ``gpu`` (its SM count from the GPU catalogue, else
    132) and where the SM count came from."""
    entry = find(gpu.name)
    if entry is not None and entry.sms:
        sms, src = entry.sms, "GPU catalogue"
    else:
        sms, src = DEFAULT_SMS, "assumed: the GPU catalogue has no SM count for it"
    if opts.nccl_channels >= sms:
        raise UsageError(f"must be below the GPU's {sms} SMs, got {opts.nccl_channels}",
                         field="--nccl-channels")
    intf = Interference(sms, opts.nccl_channels, opts.comm_overlap_slowdown)
    return intf, src


def placement_of(program: PipelineProgram, order: str) -> Placement:
    """Ranks of ``program``'s layout on GPUs in ``order`` (fastest dimension first)."""
    return Placement(program.tp, program.dp, program.pp, program.ep, order, cp=program.cp,
                     etp=program.etp)


def workload_program(wl: WorkloadInput, request: LayoutRequest, topology: Topology,
                     compute: ComputeOptions | None = None) -> PipelineProgram:
    """The per-stage programs of a workload file under the requested layout; compute times
    measured on another GPU are scaled or refused (:func:`source_compute_scale`).
    ``request.zero``: a DeepSpeed ZeRO file's collectives read as that stage's; ``request.cp``
    must be 1."""
    if request.cp not in (None, 1):
        raise UsageError("applies to --model runs (a workload file fixes its rows)",
                         field="--context-parallel-size")
    w = read_workload(wl.path, wl.format, bytes_per_element=wl.bytes_per_element,
                      backward_ratio=wl.missing_backward_ratio)
    w = _on_topology_gpu(w, topology, compute or ComputeOptions())
    prog = stages.build_program(w, stages.LayoutOptions(
        tp=request.tp, pp=request.pp, ep=request.ep, vpp=request.vpp,
        microbatches=request.microbatches, all_gpus=request.gpus, schedule=request.schedule,
        pp_comm_bytes=wl.pp_comm_bytes, row_placement=wl.row_placement,
        microbatch_group_size=request.microbatch_group_size, default_gpus=topology.num_gpus))
    # flags that do not apply to this file, after the layout's own checks
    applicable.check_workload(wl.given_flags, w, request.tp, request.ep, request.pp,
                              wl.row_placement)
    if request.zero:  # a DeepSpeed ZeRO file's collectives read as ZeRO's (sim.workload.deepspeed)
        prog = read_as_zero(prog, request.zero)
    return prog


def _on_topology_gpu(w, topology: Topology, opts: ComputeOptions):
    """``w`` with its compute times scaled to the topology's GPU, the rule in its assumptions."""
    if opts.kernel_table is not None or opts.compute_efficiency is not None:
        setup = resolve_compute(topology.gpu, opts)
    else:
        setup = None
    factor, note = source_compute_scale(w.header.extra.get("gpu"), topology.gpu,
                                        source_gpu=opts.source_gpu,
                                        compute_scale=opts.compute_scale, topo_setup=setup)
    w = scale_workload(w, factor)
    entry = find(topology.gpu.name)
    w.assumptions += ([describe(entry)] if entry else []) + ([note] if note else [])
    return w


def input_flag(workload: WorkloadInput | ModelInput) -> str:
    """The flag that names ``workload``'s file in messages."""
    return "--model" if isinstance(workload, ModelInput) else "--workload"


def run_scenario(s: Scenario) -> ScenarioResult:
    """Simulate ``s`` and build its report (nothing is written: :func:`write_report`,
    :func:`write_figures_of`). Bad input raises :class:`~sim.errors.InputError`."""
    out = s.outputs
    check_output_paths({"--json": out.json, "--trace": out.trace, "--plot": out.plot,
                        "--breakdown-plot": out.breakdown_plot},
                       {input_flag(s.workload): s.workload.path, "--topo": s.topology},
                       stdout_ok=("--json",))
    topo = load_topology(s.topology, nodes=s.nodes, overrides=s.topology_overrides)
    run = None
    if isinstance(s.workload, ModelInput):
        run = model_run(s.workload.path, s.layout, s.workload.training, topo,
                        ignore_memory=s.workload.ignore_memory, compute=s.compute,
                        placement=s.simulation.placement,
                        collective_log=s.workload.collective_log)
        prog = run.program
    else:
        prog = workload_program(s.workload, s.layout, topo, s.compute)
    sim_opts = s.simulation
    placement = placement_of(prog, sim_opts.placement)
    faults = faults_with(topo, s.faults.slow_gpus, s.faults.slow_nodes,
                         s.faults.degraded_links, s.faults.failed_nics)
    classes, scale, fault_notes = simulation_plan(faults, topo, placement, sim_opts.per_rank)
    check_figure_outputs(s.outputs, placement, classes.label == "per-rank", classes.reps)
    if s.outputs.trace:  # before simulating: a trace too big to write is refused now
        note = check_trace_size(prog, parse_rank_spec(s.outputs.trace_ranks), placement,
                                classes.label == "per-rank", classes.reps, s.outputs.force)
        if note:
            print(f"simrun: warning: --trace: {note}", file=sys.stderr)
    net_opts = dispatcher_network(s.network, run.par if run else None)
    net = network_of(dataclasses.replace(topo, faults=faults), net_opts)
    intf, intf_src = interference_of(topo.gpu, sim_opts)
    t_sim = time.perf_counter()
    with Progress(f"simulating {prog.world_size} GPUs"):
        result = simulate_watched(engine.simulate, prog, net,
                                  max_sim_time_s=sim_opts.max_sim_time_s, placement=placement,
                                  classes=classes, compute_scale=scale, fuse=sim_opts.fuse,
                                  record_spans=s.outputs.wants_spans, interference=intf,
                                  host_dispatch_ns=sim_opts.host_dispatch_ns)
    t_sim = time.perf_counter() - t_sim
    extra = [f"placement: {placement.order_string} (rank r on GPU r, node r // "
             f"{topo.gpus_per_node})",
             intf.describe(intf_src, ran_beside(result.beside_compute_ns, result.nccl_ctas),
                           result.nccl_ctas)] + \
        fault_notes + ([host_describe(sim_opts.host_dispatch_ns)]
                       if sim_opts.host_dispatch_ns else [])
    fault_report = healthy = None
    if not faults.empty:  # the same run on a healthy cluster, for the comparison
        healthy_net = network_of(dataclasses.replace(topo, faults=Faults()), net_opts)
        with Progress("simulating the healthy cluster for the comparison"):
            healthy = engine.simulate(prog, healthy_net, placement=placement,
                                      fuse=sim_opts.fuse, interference=intf,
                                      host_dispatch_ns=sim_opts.host_dispatch_ns)
        fault_report = faults.report(result.iteration_ns, healthy.iteration_ns)
    if prog.world_size < topo.num_gpus:
        extra.append(f"the layout uses {prog.world_size} of the topology's {topo.num_gpus} GPUs")
    if run is not None:
        extra += run.assumptions()
    report_extra = dict(run.report_extra(result.iteration_ns)) if run else {}
    report_extra.update(fault_report or {})
    if sim_opts.jitter_cv > 0:
        jit = Jitter(sim_opts.jitter_cv, sim_opts.seed)
        times = variability.sample_times_ns(
            prog, lambda: network_of(dataclasses.replace(topo, faults=faults), s.network),
            placement, jit, sim_opts.samples, compute_scale=scale, fuse=sim_opts.fuse,
            interference=intf, host_dispatch_ns=sim_opts.host_dispatch_ns)
        report_extra["variability"] = variability.summary(times, result.iteration_ns, jit)
        extra += variability.notes(jit, sim_opts.samples)
    rep = report.build_report(result, workload=s.workload.path, topology=s.topology,
                       extra_assumptions=extra, extra=report_extra or None)
    return ScenarioResult(s, topo, prog, placement, result, rep, t_sim, run, healthy)


def write_report(res: ScenarioResult) -> None:
    """Write the JSON report if one was asked for (atomically)."""
    if res.scenario.outputs.json is not None:
        write_json(res.scenario.outputs.json, res.report)


def write_figures_of(res: ScenarioResult) -> None:
    """Write every requested trace / figure (each atomically)."""
    write_figures(res.scenario.outputs, res.result, res.report, placement=res.placement,
                  gpus_per_node=res.topology.gpus_per_node)


def run_and_write(s: Scenario) -> ScenarioResult:
    """:func:`run_scenario`, then every output it asks for."""
    res = run_scenario(s)
    write_report(res)
    write_figures_of(res)
    return res


@dataclass
class ModelOutcome:
    """A model config simulated on a topology (sweeps, validation): the memory check and,
    unless skipped as infeasible, the result, its report and the model-level metrics."""

    par: ParallelConfig
    memory: MemoryReport
    result: SimResult | None = None
    report: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None

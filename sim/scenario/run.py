"""One run from a :class:`~sim.scenario.options.Scenario` (paths and options, as ``simrun``
gives them): inputs → program → the stages of :mod:`sim.scenario.steps` (prepare → simulate →
report) → result, report and the files asked for.

``simrun``, scripts/make_gallery.py and benchmarks/run.py go through :func:`run_scenario`;
``simrun sweep`` (:mod:`sim.sweep.evaluate`) and ``simrun validate``
(:mod:`sim.validation.cases`) call the same stages with objects instead of paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.calibration.ranges import prediction_range
from sim.engine.result import SimResult
from sim.errors import UsageError
from sim.files.outputs import check_output_paths, write_json
from sim.kernels.gpus import describe, find
from sim.models.compute_setup import (
    ComputeOptions,
    resolve_compute,
    scale_workload,
    source_compute_scale,
)
from sim.options import applicable
from sim.parallel.layout import LayoutRequest
from sim.parallel.placement import Placement
from sim.program.pipeline import PipelineProgram
from sim.scenario import steps
from sim.scenario.model_run import ModelRun, model_run
from sim.scenario.options import ModelInput, Scenario, WorkloadInput
from sim.scenario.steps import Prepared
from sim.topology import load_topology
from sim.topology.spec import Topology
from sim.viz.outputs import write_figures

# stages.build_program is looked up per call (a test may stand in for it)
from sim.workload import stages
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


def workload_program(wl: WorkloadInput, request: LayoutRequest, topology: Topology,
                     compute: ComputeOptions | None = None) -> PipelineProgram:
    """The per-stage programs of a workload file under the requested layout; compute times
    measured on another GPU are scaled or refused (:func:`source_compute_scale`).
    ``request.zero``: a DeepSpeed ZeRO file's collectives read as that stage's; ``request.cp``
    must be 1."""
    if request.cp not in (None, 1):
        raise UsageError("applies to --model runs (a workload file fixes its rows)",
                         field="context_parallel_size")
    w = read_workload(wl.path, wl.format, bytes_per_element=wl.bytes_per_element,
                      backward_ratio=wl.missing_backward_ratio)
    w = _on_topology_gpu(w, topology, compute or ComputeOptions())
    prog = stages.build_program(w, stages.LayoutOptions(
        tp=request.tp, pp=request.pp, ep=request.ep, vpp=request.vpp,
        microbatches=request.microbatches, all_gpus=request.gpus, schedule=request.schedule,
        pp_comm_bytes=wl.pp_comm_bytes, row_placement=wl.row_placement,
        microbatch_group_size=request.microbatch_group_size, default_gpus=topology.num_gpus))
    prog.rows = None if request.zero else w  # ZeRO rereads its collectives: not w's rows
    # flags that do not apply to this file, after the layout's own checks
    applicable.check_workload(wl.given_flags, w, request.tp, request.ep, request.pp,
                              wl.row_placement)
    if request.zero:  # a DeepSpeed ZeRO file's collectives read as ZeRO's (sim.workload.deepspeed)
        from sim.workload.deepspeed import read_as_zero

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


def prepare_scenario(s: Scenario) -> Prepared:
    """Stage 1 of ``s`` (:func:`sim.scenario.steps.prepare`): its topology loaded, its program
    read or generated, its outputs checked."""
    topo = load_topology(s.topology, nodes=s.nodes, overrides=s.topology_overrides,
                         nproc_per_node=s.nproc_per_node)
    if s.compute.calibration is not None:  # the profile's code loads only when one is given
        from sim.calibration.profile import apply_to_topology

        topo = apply_to_topology(topo, s.compute.calibration, s.compute.calibration_any_cluster)
    run = None
    if isinstance(s.workload, ModelInput):
        run = model_run(s.workload.spec or s.workload.path, s.layout, s.workload.training, topo,
                        ignore_memory=s.workload.ignore_memory, compute=s.compute,
                        placement=s.simulation.placement,
                        collective_log=s.workload.collective_log)
        prog = run.program
    else:
        prog = workload_program(s.workload, s.layout, topo, s.compute)
    return steps.prepare(prog, topo, network=s.network, simulation=s.simulation,
                         faults=s.faults, model_run=run, outputs=s.outputs,
                         workload=s.workload.path, topology_path=s.topology)


def run_scenario(s: Scenario) -> ScenarioResult:
    """Simulate ``s`` and build its report (nothing is written: :func:`write_report`,
    :func:`write_figures_of`). Bad input raises :class:`~sim.errors.InputError`."""
    out = s.outputs
    check_output_paths({"--json": out.json, "--plot": out.plot,
                        "--trace": out.trace if out.trace_format == "chrome" else None,
                        "--breakdown-plot": out.breakdown_plot},
                       {input_flag(s.workload): s.workload.path, "--topo": s.topology,
                        "--kernel-table": s.compute.kernel_table},
                       stdout_ok=("--json",))
    p = prepare_scenario(s)
    done = steps.run(p, progress=True)
    model = p.model_run.model if p.model_run is not None else None
    done.report["iteration_time_range"] = prediction_range(
        done.report["iteration_time_s"], p.topology.gpu.name,
        model is not None and model.moe is not None, s.compute.calibration)
    return ScenarioResult(s, p.topology, p.program, p.placement, done.result, done.report,
                          done.simulate_s, p.model_run, done.healthy)


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

"""The one run pipeline, in three stages: :func:`prepare` → :func:`simulate` → :func:`report`
(:func:`run` chains them).

Every simulated iteration goes through here: ``simrun`` (:func:`sim.scenario.run_scenario`),
``simrun sweep``'s layouts (:mod:`sim.sweep.evaluate`), ``simrun validate``'s cases
(:mod:`sim.validation.cases`), the healthy-cluster comparison of a run with faults and the
``--jitter`` samples (:data:`HEALTHY`, :func:`jitter_sample`). :func:`prepare` fixes
everything a run simulates once (program, placement, rank classes, faults, the network
options adjusted for the MoE dispatcher, SM interference); :func:`network` is the one place a
network model is built, from those options, for every variant.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from typing import Any

# engine.simulate and reports.build_report are looked up per call (a test may stand in for them)
from sim import engine
from sim import report as reports
from sim.assumption import Assumption
from sim.engine.host import describe as host_describe
from sim.engine.interference import DEFAULT_SMS, Interference, ran_beside
from sim.engine.jitter import Jitter
from sim.engine.result import SimResult
from sim.errors import UsageError
from sim.faults import Faults, faults_with, simulation_plan
from sim.kernels.gpus import find
from sim.models.features.cuda_graphs import describe as graphs_describe
from sim.network import build_network
from sim.network.factory import OPS, parse_algorithm
from sim.parallel.config import ParallelConfig
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses
from sim.program.pipeline import PipelineProgram
from sim.runtime.progress import Progress
from sim.runtime.watchdog import simulate_watched
from sim.scenario import variability
from sim.scenario.model_run import ModelRun
from sim.scenario.options import FaultOptions, NetworkOptions, OutputOptions, SimulationOptions
from sim.topology import domains
from sim.topology.gpu import GpuSpec
from sim.topology.spec import Topology
from sim.viz.outputs import check_figure_outputs


@dataclass(frozen=True)
class Prepared:
    """A run ready to simulate. ``topology``: as loaded (with the merged ``faults`` every
    variant but the healthy one runs on); ``classes`` and ``compute_scale`` (rank → factor on
    its compute times): the deterministic run's (:func:`sim.faults.simulation_plan`);
    ``network``: the network options every variant's network is built from, adjusted for
    the MoE token dispatcher (:func:`dispatcher_network`); ``notes``: assumption lines of the
    faults; ``workload`` / ``topology_path``: the report's labels (``""``: the program's
    source, none)."""

    program: PipelineProgram
    topology: Topology
    placement: Placement
    faults: Faults
    classes: RankClasses
    compute_scale: dict[int, float]
    network: NetworkOptions
    interference: Interference
    interference_source: str
    simulation: SimulationOptions
    notes: tuple[str, ...] = ()
    model_run: ModelRun | None = None
    workload: str = ""
    topology_path: str = ""
    record_spans: bool = False


@dataclass(frozen=True)
class Variant:
    """Which run of a prepared scenario: the deterministic one (default), jitter sample
    ``sample`` (kernel and transfer noise drawn with ``(seed, sample)``, every rank
    simulated: :mod:`sim.scenario.variability`), or the same run on a ``healthy`` cluster
    (the faults removed, for the comparison)."""

    sample: int | None = None
    healthy: bool = False


DETERMINISTIC = Variant()
HEALTHY = Variant(healthy=True)


def jitter_sample(k: int) -> Variant:
    """Jitter sample ``k`` (0-based) of a run with ``--jitter``."""
    return Variant(sample=k)


@dataclass
class Outcome:
    """What :func:`run` produced: the deterministic ``result``, its ``report`` (JSON-ready
    dict), the wall time of its simulation ``simulate_s`` (s), and with faults the same run on
    a healthy cluster (``healthy``)."""

    result: SimResult
    report: dict[str, Any]
    simulate_s: float
    healthy: SimResult | None = None

    @property
    def iteration_ns(self) -> int:
        """The deterministic run's iteration time (ns)."""
        return self.result.iteration_ns

    @property
    def iteration_s(self) -> float:
        """The deterministic run's iteration time (s), as the report gives it."""
        return self.report["iteration_time_s"]


def network_of(topology: Topology, opts: NetworkOptions):
    """The network model of ``topology`` selected by ``opts``."""
    return build_network(topology, algorithm=opts.algorithm, routing=opts.routing,
                         protocol=opts.protocol, nvls_enable=opts.nvls_enable,
                         nccl_algo=opts.nccl_algo, nccl_proto=opts.nccl_proto,
                         collnet_enable=opts.collnet_enable)


def dispatcher_network(opts: NetworkOptions, par: ParallelConfig | None) -> NetworkOptions:
    """``opts`` with the all-to-all algorithm of Megatron-Core's flex dispatcher (DeepEP):
    ``hierarchical`` (intra-node, then inter-node among GPUs of the same local index) unless
    ``--algorithm`` names one for all-to-alls; unchanged for other runs (``par`` ``None``: a
    workload file). (A group inside one node has no hierarchical plan and keeps the direct
    all-to-all.)"""
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
                         field="nccl_channels")
    intf = Interference(sms, opts.nccl_channels, opts.comm_overlap_slowdown)
    return intf, src


def placement_of(program: PipelineProgram, order: str) -> Placement:
    """Ranks of ``program``'s layout on GPUs in ``order`` (fastest dimension first)."""
    return Placement(program.tp, program.dp, program.pp, program.ep, order, cp=program.cp,
                     etp=program.etp)


def rank_classes_of(topology: Topology, placement: Placement, flt: Faults, per_rank: bool
                    ) -> tuple[RankClasses, Any, list]:
    """The ranks to simulate (:func:`sim.faults.simulation_plan`: symmetric, hybrid around the
    faults, or per rank), every rank where a representative's copies would not be its images,
    one representative per stage and node where stages straddle the nodes; with the compute
    scale and the report's notes."""
    classes, scale, notes = simulation_plan(flt, topology, placement, per_rank)
    if classes.reduced and domains.images_differ(placement, topology.gpus_per_node):
        # copies of a representative would not be its images (symmetry needs them to be)
        classes = RankClasses.per_rank(placement)
        notes.append(f"per-rank simulation: the groups of a stage spread differently over the "
                     f"{topology.gpus_per_node}-GPU nodes, so no rank stands for the others")
    elif classes.reduced and domains.stages_straddle(placement, topology.gpus_per_node):
        parts = (domains.straddle_dp_parts(placement, topology.gpus_per_node)
                 if classes.label == "symmetric" else None)
        if parts is not None:  # one representative per stage and DP interval of one node
            classes = RankClasses(placement, classes.tp_parts, parts, label="straddle")
            notes.append(f"pipeline stages straddle the {topology.gpus_per_node}-GPU nodes: "
                         f"one representative per stage and per run of data-parallel indices "
                         f"in one node ({len(parts)} per stage), each standing for its images")
        else:
            notes.append(Assumption(
                f"symmetric simulation with pipeline stages that straddle the "
                f"{topology.gpus_per_node}-GPU nodes: each representative stands for copies in "
                "another node as if they were its images (their DP traffic crosses other "
                "NICs); measured on gpt2-medium, 2 GB200 NVL72 racks, TP2 PP2 DP32: 13.6 ms "
                "symmetric against 15.7 ms --per-rank; --per-rank simulates every rank",
                "symmetry-straddle", departs=True))
    return classes, scale, notes


def prepare(program: PipelineProgram, topology: Topology, *,
            network: NetworkOptions | None = None, simulation: SimulationOptions | None = None,
            faults: FaultOptions | None = None, model_run: ModelRun | None = None,
            outputs: OutputOptions | None = None, workload: str = "",
            topology_path: str = "") -> Prepared:
    """Stage 1: ``program`` placed on ``topology`` with its faults (the topology file's plus
    ``faults``), rank classes, network options and interference; ``model_run``: the model
    run ``program`` is of (its dispatcher, assumptions and metrics); ``outputs``: the figures
    and trace to check now (a trace too big to write is refused before simulating)."""
    sim = simulation or SimulationOptions()
    fo = faults or FaultOptions()
    placement = placement_of(program, sim.placement)
    flt = faults_with(topology, fo.slow_gpus, fo.slow_nodes, fo.degraded_links, fo.failed_nics)
    classes, scale, notes = rank_classes_of(topology, placement, flt, sim.per_rank)
    if outputs is not None:
        _check_outputs(outputs, program, placement, classes)
    net = dispatcher_network(network or NetworkOptions(), model_run.par if model_run else None)
    intf, src = interference_of(topology.gpu, sim)
    return Prepared(program, topology, placement, flt, classes, scale, net, intf, src, sim,
                    tuple(notes), model_run, workload, topology_path,
                    outputs.wants_spans if outputs is not None else False)


def _check_outputs(outputs: OutputOptions, program: PipelineProgram, placement: Placement,
                   classes: RankClasses) -> None:
    per_rank = classes.label == "per-rank"
    check_figure_outputs(outputs, placement, per_rank, classes.reps)
    if outputs.chakra:  # the Chakra writer loads only when asked for
        from sim.workload.chakra_write import check_chakra

        check_chakra(program)
    if outputs.trace:  # the trace's size check loads only for a trace
        from sim.viz.select import parse_rank_spec
        from sim.viz.trace_size import check_trace_size

        note = check_trace_size(program, parse_rank_spec(outputs.trace_ranks), placement,
                                per_rank, classes.reps, outputs.force)
        if note:
            print(f"simrun: warning: --trace: {note}", file=sys.stderr)


def network(prepared: Prepared, variant: Variant = DETERMINISTIC):
    """A fresh network model for ``variant`` of ``prepared`` (the one place a run's network
    is built): its topology with the faults (none for the healthy variant), the prepared
    network options."""
    faults = Faults() if variant.healthy else prepared.faults
    return network_of(dataclasses.replace(prepared.topology, faults=faults), prepared.network)


def simulate(prepared: Prepared, variant: Variant = DETERMINISTIC) -> SimResult:
    """Stage 2: simulate ``variant`` of ``prepared``. The deterministic run runs under the
    watchdog (:func:`sim.runtime.watchdog.simulate_watched`) with the prepared rank classes,
    as three short runs where its pipeline is periodic (:mod:`sim.scenario.periodic_run`);
    a jitter sample simulates every rank; the healthy run one representative per stage."""
    p, sim = prepared, prepared.simulation
    kw: dict[str, Any] = {"placement": p.placement, "fuse": sim.fuse,
                          "interference": p.interference,
                          "host_dispatch_ns": sim.host_dispatch_ns}
    if variant.healthy:  # the same symmetry decision as a run without the faults
        classes = rank_classes_of(p.topology, p.placement, Faults(), False)[0]
        return engine.simulate(p.program, network(p, variant), classes=classes, **kw)
    if variant.sample is not None:
        jit = Jitter(sim.jitter_cv, sim.seed, variant.sample)
        return engine.simulate(p.program, network(p, variant),
                               classes=RankClasses.per_rank(p.placement), jitter=jit,
                               compute_scale=p.compute_scale, **kw)
    from sim.scenario.periodic_run import simulate_periodic

    def one(q: Prepared):  # q: ``p`` or one of its short runs; the network it ran on too
        net = network(q)
        return simulate_watched(engine.simulate, q.program, net,
                                max_sim_time_s=sim.max_sim_time_s, file=q.workload or None,
                                classes=q.classes, compute_scale=q.compute_scale,
                                record_spans=q.record_spans, **kw), net

    return simulate_periodic(p, one) or one(p)[0]


def report(prepared: Prepared, result: SimResult, *, healthy: SimResult | None = None,
           samples_ns: list[int] | None = None) -> dict[str, Any]:
    """Stage 3: the report of ``result`` (JSON-ready): the run's assumption lines, the model
    metrics of a model run, the fault comparison with ``healthy`` and the variability of the
    jitter samples' iteration times ``samples_ns`` (ns)."""
    p, sim, topo = prepared, prepared.simulation, prepared.topology
    k = topo.gpus_per_node
    where = (f"rank r on node r // {k}, its GPU r mod {k} of {k + topo.idle_gpus_per_node}"
             if topo.idle_gpus_per_node else f"rank r on GPU r, node r // {k}")
    extra = [f"placement: {p.placement.order_string} ({where})",
             p.interference.describe(p.interference_source,
                                     ran_beside(result.beside_compute_ns, result.nccl_ctas),
                                     result.nccl_ctas)] + list(p.notes) + \
        ([host_describe(sim.host_dispatch_ns)] if sim.host_dispatch_ns else [])
    prog, run = p.program, p.model_run
    if run is not None and (line := graphs_describe(run.par, sim.host_dispatch_ns)):
        extra.append(line)
    if prog.world_size < topo.num_gpus:
        extra.append(f"the layout uses {prog.world_size} of the topology's {topo.num_gpus} GPUs")
    if topo.node.nvlink is not None and (line := domains.describe(p.placement,
                                                                   topo.gpus_per_node)):
        extra.append(Assumption(line, "nvlink-domain", departs=True))
    if run is not None:
        extra += run.assumptions()
    extra += _whatif_lines(p)
    report_extra = dict(run.report_extra(result.iteration_ns)) if run else {}
    if healthy is not None:
        report_extra.update(p.faults.report(result.iteration_ns, healthy.iteration_ns))
    if samples_ns is not None:
        jit = Jitter(sim.jitter_cv, sim.seed)
        report_extra["variability"] = variability.summary(samples_ns, result.iteration_ns, jit)
        extra += variability.notes(jit, len(samples_ns))
    return reports.build_report(result, workload=p.workload, topology=p.topology_path,
                                extra_assumptions=extra, extra=report_extra or None)


def _whatif_lines(p: Prepared) -> list[str]:
    """How far each group's traffic reaches in the fabric, and for each ``--set`` override
    what in this run it can change or why it cannot (:mod:`sim.scenario.whatif`)."""
    from sim.scenario import whatif

    return whatif.report_lines(p.topology, p.placement, set(p.program.traffic()),
                               p.program.compute_sources)


def run(prepared: Prepared, *, progress: bool = False) -> Outcome:
    """The three stages: the deterministic run, with faults the same run on a healthy
    cluster, with ``--jitter`` its samples, then the report. ``progress``: a progress line on
    a terminal (:mod:`sim.runtime.progress`; off for sweep and validation workers)."""
    show = None if progress else False
    t_sim = time.perf_counter()
    with Progress(f"simulating {prepared.program.world_size} GPUs", force=show):
        result = simulate(prepared)
    t_sim = time.perf_counter() - t_sim
    healthy = None
    if not prepared.faults.empty:
        with Progress("simulating the healthy cluster for the comparison", force=show):
            healthy = simulate(prepared, HEALTHY)
    sim = prepared.simulation
    samples = ([simulate(prepared, jitter_sample(k)).iteration_ns for k in range(sim.samples)]
               if sim.jitter_cv > 0 else None)
    rep = report(prepared, result, healthy=healthy, samples_ns=samples)
    return Outcome(result, rep, t_sim, healthy)

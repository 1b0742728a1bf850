"""Model-driven runs: a model spec + requested layout + training → config, memory, program.

``DP`` defaults to ``GPUs / (TP·PP·CP)`` with ``GPUs`` = the requested GPUs or all GPUs of the
topology. The requested microbatches, when given, must equal ``global_batch / (micro_batch ·
DP)``; with them the global batch may be left out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sim.assumption import Assumption
from sim.comm import GroupKind
from sim.errors import UsageError
from sim.models.compute_setup import ComputeOptions, ComputeSetup, resolve_compute
from sim.parallel.config import ParallelConfig, Training
from sim.parallel.layout import Layout, LayoutRequest
from sim.parallel.placement import DEFAULT_ORDER, Placement
from sim.pipeline.schedules import default_vpp
from sim.program.pipeline import PipelineProgram
from sim.topology.gpu import GpuSpec
from sim.topology.spec import Topology

if TYPE_CHECKING:  # the model generator and its accounting load when a model run needs them
    from sim.models.memory import MemoryReport
    from sim.models.plan import ModelPlan
    from sim.models.vocab.spec import ModelSpec


@dataclass
class ModelRun:
    """A model-driven run: what is simulated and the model-level report keys."""

    path: str
    model: ModelSpec
    par: ParallelConfig
    gpu: GpuSpec
    memory: MemoryReport
    program: PipelineProgram
    notes: list[str] = field(default_factory=list)
    compute: ComputeSetup | None = None  # what timed the operators (None: not kept)
    log: Any = None  # the AICB collective log the program takes (sim.scenario.collective_log)

    def with_microbatches(self, m: int, topology: Topology, placement: str) -> PipelineProgram:
        """The program of this run with ``m`` microbatches (the global batch ``m`` × micro
        batch × DP), generated as this run's was (never refused for memory: the full run's
        check decides that)."""
        par = self.par
        layout = replace(par.layout, microbatches=m)
        training = replace(par.training, global_batch=m * (par.global_batch // par.microbatches))
        short = ParallelConfig.of(layout, training)
        return model_run_of(fit_model(self.model, short, topology, placement), topology,
                            compute=self.compute, ignore_memory=True, log=self.log).program

    @property
    def model_flops(self) -> int:
        from sim.models.flops import model_flops_per_iteration

        return model_flops_per_iteration(self.model, self.par.global_batch)

    def report_extra(self, iteration_ns: int) -> dict[str, Any]:
        """Report keys of a model-driven run (:func:`sim.models.metrics.metrics`)."""
        from sim.models.metrics import metrics

        return metrics(self.model, self.par, self.gpu, iteration_ns, self.memory, self.path)

    def assumptions(self) -> list[str]:
        return list(self.notes) + [f"memory per GPU: {self.memory.reason}"] + list(
            self.memory.assumptions)


def parallel_config(request: LayoutRequest, training: Training, model: ModelSpec,
                    num_gpus: int) -> ParallelConfig:
    """The :class:`ParallelConfig` ``request`` asks for on a cluster of ``num_gpus`` GPUs;
    raises :class:`UsageError` naming the flag for inconsistent or invalid choices."""
    tp, pp, cp = request.tp or 1, request.pp or 1, request.cp or 1
    gpus = request.gpus or num_gpus
    if request.dp is None:
        if gpus % (tp * pp * cp):
            what = f"TP·PP = {tp}·{pp}" if cp == 1 else f"TP·PP·CP = {tp}·{pp}·{cp}"
            raise UsageError(f"{gpus} GPUs are not a multiple of {what}; give --dp or --gpus",
                             field="dp")
        dp = gpus // (tp * pp * cp)
    else:
        dp = request.dp
        if request.gpus and tp * pp * dp * cp != request.gpus:
            what = (f"TP·PP·DP = {tp}·{pp}·{dp}" if cp == 1
                    else f"TP·PP·DP·CP = {tp}·{pp}·{dp}·{cp}")
            raise UsageError(f"{what} = {tp * pp * dp * cp} but --gpus is {request.gpus}",
                             field="dp")
    b = training.micro_batch
    gb = training.global_batch
    m = request.microbatches
    if gb is None:
        if not m:
            raise UsageError("required with --model (or give --microbatches)",
                             field="global_batch")
        gb = m * b * dp
    elif m and m * b * dp != gb:
        raise UsageError(f"{m} microbatches × micro batch {b} × DP {dp} = {m * b * dp} "
                         f"sequences, but --global-batch is {gb}", field="microbatches")
    zero = request.zero or (3 if training.fsdp else 0)  # FSDP FULL_SHARD: ZeRO-3 semantics
    vpp = (training.split.virtual_pipeline_size(pp, request.vpp)  # a layout fixes it
           or request.vpp or default_vpp(request.schedule))  # zb-v: two chunks per stage
    etp = None if request.etp in (None, tp) else request.etp  # None: Megatron's default, TP
    layout = Layout(tp=tp, pp=pp, dp=dp, ep=request.ep or 1, vpp=vpp, cp=cp, zero=zero, etp=etp,
                     microbatches=gb // (b * dp), schedule=request.schedule,
                    microbatch_group_size=request.microbatch_group_size)
    par = ParallelConfig.of(layout, replace(training, global_batch=gb))
    from sim.models.parallel_checks import validate

    validate(model, par)
    return par


def ep_nodes(par: ParallelConfig, topology: Topology, order: str) -> int:
    """Nodes one EP group spans when ranks are placed in ``order`` on ``topology`` (1 when the
    group's nodes hold different numbers of its ranks: no node-level deduplication then)."""
    if par.ep == 1:
        return 1
    pl = Placement(par.tp, par.dp_cp, par.pp, par.ep, order, cp=par.cp, etp=par.etp)
    counts = Counter(r // topology.gpus_per_node for r in pl.group(GroupKind.EP, 0))
    return len(counts) if len(set(counts.values())) == 1 else 1


def with_ep_nodes(par: ParallelConfig, topology: Topology, order: str) -> ParallelConfig:
    """``par`` with the nodes one EP group spans on ``topology`` in rank order ``order``."""
    if par.ep == 1:
        return par
    return ParallelConfig.of(par.layout, replace(par.training,
                                                 ep_nodes=ep_nodes(par, topology, order)))


def with_training_overrides(model: ModelSpec, training: Training) -> ModelSpec:
    """``model`` with the spec overrides of ``training`` (the shared-expert width)."""
    size = training.moe_shared_expert_intermediate_size
    if size is None or model.moe is None:
        return model
    return replace(model, moe=replace(model.moe, shared_expert_ffn_hidden=size))


@dataclass(frozen=True)
class ModelFit:
    """A model on a layout and a cluster before its program is generated: the spec with the
    training's overrides, the config with the nodes its EP group spans, the model plan and
    the memory check (``memory.feasible``: whether it fits in GPU memory)."""

    model: ModelSpec
    par: ParallelConfig
    plan: ModelPlan
    memory: MemoryReport


def fit_model(model: ModelSpec, par: ParallelConfig, topology: Topology,
              placement: str = DEFAULT_ORDER) -> ModelFit:
    """The memory check of ``model`` on ``par`` (ranks placed in ``placement`` order on
    ``topology``); raises :class:`UsageError` if the layout needs more GPUs than the cluster
    has or the GPU has no peak for the dtype."""
    model = with_training_overrides(model, par.training)
    par = with_ep_nodes(par, topology, placement)
    par.layout.require_gpus_of(topology, field="dp", hint="use --nodes")
    gpu = topology.gpu
    if par.dtype not in gpu.peak_tflops:
        raise UsageError(f"GPU {gpu.name} has no {par.dtype} peak", field="dtype")
    from sim.models.memory import check_memory
    from sim.models.plan import build_model_plan

    plan = build_model_plan(model, par)
    return ModelFit(model, par, plan, check_memory(model, par, gpu, plan=plan))


def model_run_of(fit: ModelFit, topology: Topology, *, path: str = "",
                 compute: ComputeOptions | ComputeSetup | None = None,
                 ignore_memory: bool = False, log: Any = None) -> ModelRun:
    """The program of ``fit`` (operators timed as ``compute`` says: docs/kernel-tables.md).
    A layout that does not fit in GPU memory raises :class:`UsageError` with the reason and
    the changes that would make it fit (unless ``ignore_memory``: simulated, said so).
    ``path``: the spec's file (the report's label); ``log``: an AICB collective log whose
    ZeRO-3 collectives the run takes (:mod:`sim.scenario.collective_log`)."""
    model, par, mem, gpu = fit.model, fit.par, fit.memory, topology.gpu
    notes = []
    if par.dtype == "fp8" or par.fp4:  # a precision the GPU has no tensor cores for:
        from sim.models.assumptions import gpu_family  # refused before memory
        from sim.models.features.nvfp4_params import check_precision

        check_precision(par, gpu.name, gpu_family(gpu), gpu.peak_tflops)
    if not mem.feasible:
        if not ignore_memory:
            from sim.models.memory_advice import memory_advice

            advice = memory_advice(model, par, gpu, mem.peak.total_bytes)
            raise UsageError(f"layout does not fit in GPU memory: {mem.reason}; {advice} "
                             "(--ignore-memory simulates it anyway)", field="model")
        notes.append(Assumption("WARNING: simulated although the layout does not fit in GPU "
                                "memory (--ignore-memory)", "memory-ignored", departs=True))
    setup = compute if isinstance(compute, ComputeSetup) else resolve_compute(gpu, compute)
    from sim.models.generator import generate
    from sim.scenario.collective_log import units_of, with_log

    program = generate(model, par, gpu, plan=fit.plan,
                       source=f"model {model.name} ({path})" if path else "",
                       compute=setup, zero3=units_of(log, model) if log else None)
    if log is not None:
        program = with_log(program, log, path)
    return ModelRun(path, model, par, gpu, mem, program, notes, setup, log)


def model_run(model: ModelSpec | str, request: LayoutRequest, training: Training,
              topology: Topology, *, ignore_memory: bool = False,
              compute: ComputeOptions | None = None, placement: str = DEFAULT_ORDER,
              collective_log: str | None = None) -> ModelRun:
    """``model`` (a spec, or the path or shipped name of one, loaded), the layout resolved on
    ``topology`` (:func:`parallel_config`), its memory checked (:func:`fit_model`) and its
    program generated (:func:`model_run_of`). ``placement``: the rank order, which decides how
    many nodes an EP group spans (:func:`ep_nodes`). ``collective_log``: an AICB
    physical-format file whose ZeRO-3 collectives (and layout) the run takes
    (:mod:`sim.scenario.collective_log`)."""
    from sim.models.vocab.spec import load_model

    path = model if isinstance(model, str) else ""
    model = with_training_overrides(load_model(model) if path else model, training)
    log = None
    if collective_log is not None:  # AICB's physical-format log: its reader loads only here
        from sim.scenario.collective_log import load_log, log_layout

        log = load_log(collective_log)
        request = log_layout(log, request, training)
    par = parallel_config(request, training, model, topology.num_gpus)
    return model_run_of(fit_model(model, par, topology, placement), topology, path=path,
                        compute=compute, ignore_memory=ignore_memory, log=log)

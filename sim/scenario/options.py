"""The typed inputs of one simulated run (what the command line, sweeps, validation, the
gallery and the benchmarks hand to :func:`sim.scenario.run_scenario`).

Where a new option goes: a parallel dimension → :class:`sim.parallel.layout.Layout` (and
:class:`~sim.parallel.layout.LayoutRequest`); a training hyper-parameter →
:class:`sim.parallel.config.
Training`; how collectives are costed → :class:`NetworkOptions`; how the engine runs →
:class:`SimulationOptions`; a slow or broken part → :class:`FaultOptions`; a file to write →
:class:`OutputOptions`; how a workload file is read → :class:`WorkloadInput`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sim.engine.interference import DEFAULT_NCCL_CHANNELS
from sim.models.compute_setup import ComputeOptions
from sim.parallel.config import Training
from sim.parallel.layout import LayoutRequest
from sim.parallel.placement import DEFAULT_ORDER
from sim.runtime.watchdog import DEFAULT_MAX_SIM_TIME_S

if TYPE_CHECKING:  # the model vocabulary loads only for model runs
    from sim.models.vocab.spec import ModelSpec


@dataclass(frozen=True)
class WorkloadInput:
    """A workload file (AICB text or operator table) and how to read it.

    ``format``: ``aicb``, ``optable`` or ``None`` (detected). ``bytes_per_element``: of
    communication sizes given as element counts (operator tables). ``missing_backward_ratio``:
    backward = ratio × forward when a file has no backward times. ``pp_comm_bytes``: bytes sent
    between adjacent stages per microbatch (``None``: header ``pp_comm``, else derived).
    ``row_placement``: ``megatron`` or ``all`` (which rows run on which stage).
    ``given_flags``: the command-line flags given, those that do not apply to this file are
    refused once it is read (:func:`sim.options.applicable.check_workload`).
    """

    path: str
    format: str | None = None
    bytes_per_element: int = 4
    missing_backward_ratio: float = 2.0
    pp_comm_bytes: int | None = None
    row_placement: str = "megatron"
    given_flags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ModelInput:
    """A model spec YAML and its training options (``training.global_batch`` ``None``: derived
    from the requested microbatches). ``ignore_memory``: simulate a layout that does not fit
    in GPU memory (said so in the report). ``collective_log``: an AICB physical-format CSV
    whose DeepSpeed ZeRO-3 collectives the run takes (``--workload LOG --model SPEC``:
    :mod:`sim.scenario.collective_log`)."""

    path: str
    training: Training = field(default_factory=Training)
    ignore_memory: bool = False
    collective_log: str | None = None
    #: the model spec itself when it comes from another file than a spec YAML (a Megatron-LM
    #: script or job config named by ``path``: :mod:`sim.jobs`); None: ``path`` is the spec
    spec: ModelSpec | None = None


@dataclass(frozen=True)
class NetworkOptions:
    """How collectives are costed (:func:`sim.network.build_network`): ``algorithm`` (a name,
    ``op=name,…`` or ``None`` for the topology file's), ``routing`` (``dmodk`` | ``adaptive``
    | ``ecmp`` | ``spray``; ``None``: the topology's ``fabric.routing``),
    ``protocol`` (NCCL protocol or ``None`` for the topology file's)."""

    algorithm: str | None = None
    routing: str | None = None
    protocol: str | None = None
    nvls_enable: bool | None = None  # NCCL_NVLS_ENABLE (--nccl-nvls-enable); None: not given
    nccl_algo: str | None = None  # NCCL_ALGO (--nccl-algo), NCCL's syntax
    nccl_proto: str | None = None  # NCCL_PROTO (--nccl-proto), NCCL's syntax
    collnet_enable: bool | None = None  # NCCL_COLLNET_ENABLE (--nccl-collnet-enable)


@dataclass(frozen=True)
class FaultOptions:
    """Faults added to the topology file's (:mod:`sim.faults`): ``slow_gpus`` and
    ``slow_nodes`` as ``(index, compute-time factor)``, ``degraded_links`` as ``(link spec,
    bandwidth factor)``, ``failed_nics`` as ``(node, NIC)``; later entries win."""

    slow_gpus: tuple[tuple[int, float], ...] = ()
    slow_nodes: tuple[tuple[int, float], ...] = ()
    degraded_links: tuple[tuple[tuple, float], ...] = ()
    failed_nics: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class SimulationOptions:
    """How the engine runs: ``per_rank`` (every rank instead of one representative per stage),
    ``fuse`` (merge events where the timeline allows), ``max_sim_time_s`` (watchdog, simulated
    seconds), ``placement`` (rank-to-GPU order, fastest dimension first); interference
    (:mod:`sim.engine.interference`): ``nccl_channels`` NCCL channels at most (one CTA = one SM
    each; fewer for small messages) an asynchronous collective holds while it runs (0: overlap
    is free), ``comm_overlap_slowdown`` (≥ 1) on its time;
    variability (:mod:`sim.scenario.variability`): ``jitter_cv`` (0: none) of seeded kernel and
    transfer noise, ``samples`` runs drawn with ``seed``; ``host_dispatch_ns``: the CPU's time
    to issue one kernel (:mod:`sim.engine.host`; 0: off); ``periodic``: a model run whose
    pipeline is periodic is simulated as three short runs with the same report
    (:mod:`sim.scenario.periodic_run`; off: every microbatch, ``--full-simulation``);
    ``periodic_tolerance``: where the short runs step evenly only within this fraction of a
    period's iteration time (contended transfers jitter by ns), extrapolate anyway (0: only
    exactly; ``simrun validate`` uses :data:`sim.engine.periodic.VALIDATE_TOLERANCE`)."""

    per_rank: bool = False
    fuse: bool = True
    max_sim_time_s: float = DEFAULT_MAX_SIM_TIME_S
    placement: str = DEFAULT_ORDER
    nccl_channels: int = DEFAULT_NCCL_CHANNELS
    comm_overlap_slowdown: float = 1.0
    jitter_cv: float = 0.0
    samples: int = 1
    seed: int = 0
    host_dispatch_ns: int = 0
    periodic: bool = True
    periodic_tolerance: float = 0.0


@dataclass(frozen=True)
class OutputOptions:
    """Files written after the run (each atomically; paths checked before simulating):
    ``json`` report, Chrome ``trace``, timeline ``plot``, ``breakdown_plot``; ``trace_ranks``
    picks the ranks shown by the trace and the timeline; ``force``: write a trace estimated
    over :data:`sim.viz.trace_size.LIMIT_BYTES` (refused otherwise); ``plot_window_ms`` the
    timeline's time window (ms), ``plot_microbatches`` the window of its first N microbatches."""

    json: str | None = None
    trace: str | None = None
    trace_ranks: str = "stage-reps"
    plot: str | None = None
    breakdown_plot: str | None = None
    force: bool = False
    trace_format: str = "chrome"  # chrome | kineto (--trace is then a folder of rank files)
    chakra: str | None = None  # folder of per-rank Chakra .et files (sim/workload/chakra_write)
    plot_window_ms: tuple[float, float] | None = None
    plot_microbatches: int | None = None

    @property
    def wants_spans(self) -> bool:
        """True if the run must record spans (a trace or a timeline was requested)."""
        return bool(self.trace or self.plot)


@dataclass(frozen=True)
class Scenario:
    """One run: a workload file or a model, a topology file (``nodes``: override its node
    count; ``topology_overrides``: ``--set KEY=VALUE`` what-ifs of its fields,
    :mod:`sim.topology.overrides`; ``nproc_per_node``: processes per node, torchrun's
    ``--nproc-per-node``, :mod:`sim.topology.nproc`; ``None``: one per GPU), the requested
    layout and the options."""

    workload: WorkloadInput | ModelInput
    topology: str
    layout: LayoutRequest = field(default_factory=LayoutRequest)
    nodes: int | None = None
    network: NetworkOptions = field(default_factory=NetworkOptions)
    faults: FaultOptions = field(default_factory=FaultOptions)
    simulation: SimulationOptions = field(default_factory=SimulationOptions)
    outputs: OutputOptions = field(default_factory=OutputOptions)
    compute: ComputeOptions = field(default_factory=ComputeOptions)
    topology_overrides: tuple[str, ...] = ()
    nproc_per_node: int | None = None

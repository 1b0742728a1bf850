"""simrun's Python API: build a run from typed objects, simulate it, read its report.

The calls are the stages ``simrun``, ``simrun sweep`` and ``simrun validate`` go through
(:mod:`sim.scenario.steps`): :func:`prepare_model` (or :func:`prepare_workload`) fixes the
program, placement, faults and network options; :func:`run` simulates the iteration (and
the healthy cluster of a run with faults, and the jitter samples) and builds the report. The
same inputs give the same iteration time, to the nanosecond, as the command line.

Everything is a typed value: a model spec (:class:`ModelSpec`, or the path or shipped name
of one), a topology (:class:`Topology`, or a path or shipped name), the requested layout
(:class:`LayoutRequest`), the training options (:class:`Training`), how collectives are
costed (:class:`NetworkOptions`), how the engine runs (:class:`SimulationOptions`), faults
(:class:`FaultOptions`) and how operators are timed (:class:`ComputeOptions`). A value this
module refuses raises :class:`~sim.errors.UsageError` whose ``field`` names the option
(``"tp"``, ``"global_batch"``, ``"samples"``, …). Times are in ns (``*_ns``) or s (``*_s``).
docs/api.md has a worked example.
"""

from __future__ import annotations

import math
from typing import Any

from sim.errors import UsageError
from sim.models.compute_setup import ComputeOptions
from sim.models.vocab.spec import ModelSpec, load_model
from sim.parallel.config import Training
from sim.parallel.layout import LayoutRequest
from sim.scenario import steps
from sim.scenario.model_run import model_run
from sim.scenario.options import FaultOptions, NetworkOptions, SimulationOptions, WorkloadInput
from sim.scenario.run import workload_program
from sim.scenario.steps import Outcome, Prepared
from sim.topology import load_topology
from sim.topology.spec import Topology

__all__ = [
    "ComputeOptions", "FaultOptions", "LayoutRequest", "ModelSpec", "NetworkOptions",
    "Outcome", "Prepared", "SimulationOptions", "Topology", "Training", "WorkloadInput",
    "load_model", "load_topology", "prepare_model", "prepare_workload", "run",
]

_LAYOUT_SIZES = ("tp", "pp", "dp", "ep", "vpp", "cp", "etp", "microbatches", "gpus",
                 "microbatch_group_size")


def prepare_model(model: ModelSpec | str, topology: Topology | str,
                  layout: LayoutRequest | None = None, training: Training | None = None, *,
                  nodes: int | None = None, network: NetworkOptions | None = None,
                  simulation: SimulationOptions | None = None,
                  faults: FaultOptions | None = None, compute: ComputeOptions | None = None,
                  ignore_memory: bool = False) -> Prepared:
    """A model-driven run ready to simulate, as ``simrun --model`` prepares it: ``layout``'s
    unset sizes derived (DP from the cluster's GPUs, the microbatches from the global
    batch), the memory checked (a layout that does not fit is refused unless
    ``ignore_memory``), the program generated. ``nodes``: the topology's node count (a
    topology given by path only)."""
    _check_type(model, (ModelSpec, str), "model", "a ModelSpec or the path of a model spec")
    layout = _layout(layout)
    training = _training(training)
    sim = _simulation(simulation)
    topo, topo_path = _topology(topology, nodes)
    path = model if isinstance(model, str) else ""
    run_ = model_run(model, layout, training, topo, ignore_memory=ignore_memory,
                     compute=_typed(compute, ComputeOptions, "compute"),
                     placement=sim.placement)
    return steps.prepare(run_.program, topo, network=_typed(network, NetworkOptions, "network"),
                         simulation=sim, faults=_typed(faults, FaultOptions, "faults"),
                         model_run=run_, workload=path, topology_path=topo_path)


def prepare_workload(workload: WorkloadInput | str, topology: Topology | str,
                     layout: LayoutRequest | None = None, *, nodes: int | None = None,
                     network: NetworkOptions | None = None,
                     simulation: SimulationOptions | None = None,
                     faults: FaultOptions | None = None,
                     compute: ComputeOptions | None = None) -> Prepared:
    """A run of a workload file (AICB text or operator table; a path, or a
    :class:`WorkloadInput` saying how to read it) ready to simulate, as ``simrun
    --workload`` prepares it; ``layout``: sizes the file does not fix."""
    _check_type(workload, (WorkloadInput, str), "workload",
                "a WorkloadInput or the path of a workload file")
    wl = WorkloadInput(workload) if isinstance(workload, str) else workload
    layout = _layout(layout)
    sim = _simulation(simulation)
    topo, topo_path = _topology(topology, nodes)
    prog = workload_program(wl, layout, topo, _typed(compute, ComputeOptions, "compute"))
    return steps.prepare(prog, topo, network=_typed(network, NetworkOptions, "network"),
                         simulation=sim, faults=_typed(faults, FaultOptions, "faults"),
                         workload=wl.path, topology_path=topo_path)


def run(prepared: Prepared) -> Outcome:
    """Simulate ``prepared`` and build its report: :attr:`Outcome.iteration_ns`, the
    :class:`~sim.engine.result.SimResult` (``result``), the JSON-ready ``report`` dict
    (docs/report-schema.md) and, with faults, the ``healthy`` cluster's result."""
    _check_type(prepared, (Prepared,), "prepared", "a Prepared (from prepare_model or "
                "prepare_workload)")
    return steps.run(prepared)


def _check_type(value: Any, types: tuple[type, ...], field: str, what: str) -> None:
    if not isinstance(value, types) or (isinstance(value, str) and not value.strip()):
        raise UsageError(f"expected {what}, got {value!r}", field=field)


def _typed(value: Any, cls: type, field: str) -> Any:
    """``value`` (``None``: ``cls()``) if it is a ``cls``."""
    if value is None:
        return cls()
    _check_type(value, (cls,), field, f"a {cls.__name__}")
    return value


def _positive_int(value: Any, field: str, *, low: int = 1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < low):
        raise UsageError(f"expected an integer ≥ {low}, got {value!r}", field=field)


def _layout(layout: LayoutRequest | None) -> LayoutRequest:
    layout = _typed(layout, LayoutRequest, "layout")
    for name in _LAYOUT_SIZES:
        _positive_int(getattr(layout, name), name)
    if layout.zero not in (None, 0, 1, 2, 3) or isinstance(layout.zero, bool):
        raise UsageError(f"expected a ZeRO stage 0, 1, 2 or 3, got {layout.zero!r}",
                         field="zero")
    if layout.schedule is not None and not isinstance(layout.schedule, str):
        raise UsageError(f"expected a schedule name, got {layout.schedule!r}", field="schedule")
    return layout


def _training(training: Training | None) -> Training:
    training = _typed(training, Training, "training")
    _positive_int(training.global_batch, "global_batch")
    _positive_int(training.micro_batch, "micro_batch")
    return training


def _simulation(simulation: SimulationOptions | None) -> SimulationOptions:
    sim = _typed(simulation, SimulationOptions, "simulation")
    _positive_int(sim.samples, "samples")
    _positive_int(sim.seed, "seed", low=0)
    _positive_int(sim.host_dispatch_ns, "host_dispatch_ns", low=0)
    _positive_int(sim.nccl_channels, "nccl_channels", low=0)
    for name, low, strict in (("jitter_cv", 0.0, False), ("max_sim_time_s", 0.0, True),
                              ("comm_overlap_slowdown", 1.0, False)):
        v = getattr(sim, name)
        bad = isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
        if bad or v < low or (strict and v == low):
            raise UsageError(f"expected a number {'>' if strict else '≥'} {low:g}, got {v!r}",
                             field=name)
    if sim.samples > 1 and not sim.jitter_cv:
        raise UsageError("needs jitter_cv > 0 (without noise every sample is the "
                         "deterministic run)", field="samples")
    return sim


def _topology(topology: Topology | str, nodes: int | None) -> tuple[Topology, str]:
    """The topology (loaded from a path or shipped name, with ``nodes`` nodes) and its label."""
    _check_type(topology, (Topology, str), "topology", "a Topology or the path of a topology "
                "file")
    _positive_int(nodes, "nodes")
    if isinstance(topology, str):
        return load_topology(topology, nodes=nodes), topology
    if nodes is not None and nodes != topology.num_nodes:
        raise UsageError("give the node count when loading the topology "
                         "(load_topology(path, nodes=...)); this one has "
                         f"{topology.num_nodes}", field="nodes")
    return topology, ""


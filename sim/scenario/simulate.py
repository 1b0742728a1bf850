"""One layout of a sweep (or one case of ``simrun validate``) simulated as ``simrun --model``
simulates it.

The steps are the single run's (:func:`sim.scenario.model_run.model_run` and
:func:`sim.scenario.run.run_scenario` for a model on a healthy cluster, one representative rank
per stage, no outputs): the training's model-spec overrides, the nodes an EP group spans, the
memory check, the program timed by the resolved compute setup, the flex dispatcher's
all-to-all, SM interference, host dispatch and the watchdog. Only the inputs differ: objects
(model spec, topology, compute setup) instead of paths, so that Dask workers need no files.
"""

from __future__ import annotations

from dataclasses import replace

from sim import engine, report
from sim.engine.interference import ran_beside
from sim.models.compute_setup import ComputeSetup
from sim.models.generator import generate
from sim.models.memory import check_memory
from sim.models.metrics import metrics
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig
from sim.runtime.watchdog import simulate_watched
from sim.scenario.model_run import ep_nodes, with_training_overrides
from sim.scenario.options import NetworkOptions, SimulationOptions
from sim.scenario.run import (
    ModelOutcome,
    dispatcher_network,
    interference_of,
    network_of,
    placement_of,
)
from sim.topology.spec import Topology


def with_ep_nodes(par: ParallelConfig, topology: Topology, order: str) -> ParallelConfig:
    """``par`` with the nodes one EP group spans on ``topology`` in rank order ``order`` (as a
    single run sets it: :func:`sim.scenario.model_run.model_run`)."""
    if par.ep == 1:
        return par
    return ParallelConfig.of(par.layout, replace(par.training,
                                                 ep_nodes=ep_nodes(par, topology, order)))


def simulate_layout(model: ModelSpec, par: ParallelConfig, topology: Topology, *,
                    network: NetworkOptions, simulation: SimulationOptions,
                    compute: ComputeSetup | None,
                    ignore_memory: bool = False) -> tuple[ModelOutcome, list[str]]:
    """Memory check and, when the layout fits (or ``ignore_memory``, as ``--ignore-memory``
    and ``simrun validate`` run measured layouts the memory model calls too large), its
    simulation; returns the outcome and the run-level assumption lines a single run adds
    (interference, host dispatch) that the applicability checks read
    (:func:`sim.options.applicable.check_effect`)."""
    model = with_training_overrides(model, par.training)
    par = with_ep_nodes(par, topology, simulation.placement)
    par.layout.require_gpus_of(topology)
    plan = build_model_plan(model, par)
    mem = check_memory(model, par, topology.gpu, plan=plan)
    if not mem.feasible and not ignore_memory:
        return ModelOutcome(par, mem), []
    program = generate(model, par, topology.gpu, plan=plan, compute=compute)
    net = network_of(topology, dispatcher_network(network, par))
    intf, intf_src = interference_of(topology.gpu, simulation)
    result = simulate_watched(engine.simulate, program, net,
                              max_sim_time_s=simulation.max_sim_time_s,
                              placement=placement_of(program, simulation.placement),
                              fuse=simulation.fuse, interference=intf,
                              host_dispatch_ns=simulation.host_dispatch_ns)
    lines = [intf.describe(intf_src, ran_beside(result.beside_compute_ns, result.nccl_ctas),
                           result.nccl_ctas)]
    return (ModelOutcome(par, mem, result, report.build_report(result),
                         metrics(model, par, topology.gpu, result.iteration_ns)), lines)

"""One sweep task: check a layout's memory, simulate it, and summarise it as a flat row.

:func:`evaluate` is what local worker processes and Dask workers run. It never raises: a
layout that fails (bad input, internal error) comes back as a row with ``status = "error"``
and the error text, so one bad configuration cannot stop a sweep. Everything it needs travels
in a picklable :class:`SweepContext` (model spec and topology as objects, not paths), so
remote workers need simrun installed but not the input files.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from sim.calibration.ranges import prediction_range
from sim.errors import UsageError
from sim.models.compute_setup import ComputeSetup
from sim.models.vocab.spec import ModelSpec
from sim.options.applicable import check_interference
from sim.parallel.config import Training
from sim.scenario import NetworkOptions, SimulationOptions, steps
from sim.scenario.model_run import fit_model, model_run_of
from sim.sweep.space import SweepPoint
from sim.topology.spec import Topology

GROUPS = ("TP", "EP", "PP", "DP", "DP_EP")


@dataclass(frozen=True)
class SweepContext:
    """What every task of one sweep shares: ``simulation`` the engine options (its placement
    is ``placement``'s), ``compute`` the resolved compute setup (``None``: the topology GPU's
    default), ``given`` the flags on the command line whose refusals need the simulated
    layout (:func:`sim.options.applicable.check_interference`)."""

    model: ModelSpec
    topology: Topology
    training: Training
    network: NetworkOptions = field(default_factory=NetworkOptions)
    placement: str = "tp-dp-pp"
    simulation: SimulationOptions = field(default_factory=SimulationOptions)
    compute: ComputeSetup | None = None
    given: frozenset[str] = frozenset()


def base_row(layout: SweepPoint) -> dict[str, Any]:
    row = {"layout": layout.key, "tp": layout.tp, "pp": layout.pp, "dp": layout.dp,
           "vpp": layout.vpp, "ep": layout.ep, "micro_batch": layout.micro_batch}
    if layout.cp > 1:  # new dimensions: in the JSON rows when swept (results.csv: the key)
        row["cp"] = layout.cp
    if layout.zero:
        row["zero"] = layout.zero
    if layout.etp:
        row["etp"] = layout.etp
    return row


def evaluate(ctx: SweepContext, layout: SweepPoint) -> dict[str, Any]:
    """Memory check + simulation of ``layout``; returns a JSON-ready row (units in the keys):

    ``status`` (``ok`` | ``infeasible`` | ``inapplicable`` (a given flag changes nothing in
    this layout, known only after simulating it; the reason says which) | ``error``),
    ``reason``, ``microbatches``,
    ``schedule``, ``memory_per_gpu_bytes`` (busiest stage), ``memory_capacity_bytes``,
    ``iteration_time_s``, ``tokens_per_s``, ``tflops_per_gpu``, ``mfu``,
    ``bubble_fraction``, ``ideal_bubble_fraction``, ``exposed_<GROUP>_s`` (mean over stages),
    ``events`` and ``elapsed_s`` (wall time of the task; not part of the final outputs).
    """
    t0 = time.perf_counter()
    row = base_row(layout)
    try:
        row.update(_evaluate(ctx, layout))
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        row.update(status="error", reason=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    row["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return row


def _evaluate(ctx: SweepContext, layout: SweepPoint) -> dict[str, Any]:
    par = layout.config(ctx.training)
    out: dict[str, Any] = {"microbatches": par.microbatches, "schedule": par.schedule_name}
    sim = replace(ctx.simulation, placement=ctx.placement)
    # the single run's stages (sim.scenario.steps), from objects: workers need no files
    fit = fit_model(ctx.model, par, ctx.topology, sim.placement)
    mem = fit.memory
    out["memory_per_gpu_bytes"] = mem.peak.total_bytes
    out["memory_capacity_bytes"] = mem.capacity_bytes
    if not mem.feasible:
        out.update(status="infeasible", reason=mem.reason)
        return out
    run = model_run_of(fit, ctx.topology, compute=ctx.compute)
    done = steps.run(steps.prepare(run.program, ctx.topology, network=ctx.network,
                                   simulation=sim, model_run=run))
    rep = done.report  # a model run's report holds its metrics
    try:
        check_interference(ctx.given, rep["assumptions"])
    except UsageError as exc:
        out.update(status="inapplicable", reason=str(exc))
        return out
    n = max(len(rep["stages"]), 1)
    out.update(
        status="ok", reason="",
        iteration_time_s=rep["iteration_time_s"],
        tokens_per_s=rep["tokens_per_s"],
        tflops_per_gpu=rep["tflops_per_gpu"],
        mfu=rep["mfu"],
        bubble_fraction=rep["bubble_fraction"],
        ideal_bubble_fraction=rep["ideal_bubble_fraction"],
    )
    rng = prediction_range(rep["iteration_time_s"], ctx.topology.gpu.name,
                           ctx.model.moe is not None, getattr(ctx.compute, "calibration", None))
    out.update(iteration_time_low_s=rng["low_s"], iteration_time_high_s=rng["high_s"])
    for g in GROUPS + (("CP",) if par.cp > 1 else ()) + (("ETP",) if par.etp != par.tp else ()):
        out[f"exposed_{g}_s"] = sum(s["exposed_comm_s"].get(g, 0.0) for s in rep["stages"]) / n
    out["events"] = done.result.events
    return out

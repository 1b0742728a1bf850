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
from sim.pipeline.registry import SCHEDULES
from sim.scenario import NetworkOptions, SimulationOptions, steps
from sim.scenario.model_run import fit_model, model_run_of
from sim.scenario.periodic_run import counts_for
from sim.sweep.space import SweepPoint
from sim.topology.spec import Topology

GROUPS = ("TP", "EP", "PP", "DP", "DP_EP")


@dataclass(frozen=True)
class SweepContext:
    """What every task of one sweep shares: ``simulation`` the engine options (its placement
    is ``placement``'s), ``compute`` the resolved compute setup (``None``: the topology GPU's
    default), ``given`` the flags on the command line whose refusals need the simulated
    layout (:func:`sim.options.applicable.check_interference`); ``variants`` the training of
    each combination of swept training options, by label (:mod:`sim.sweep.variants`);
    ``periodic``: take the periodic shortcut where it applies (:mod:`sim.scenario.periodic_run`)."""

    model: ModelSpec
    topology: Topology
    training: Training
    network: NetworkOptions = field(default_factory=NetworkOptions)
    placement: str = "tp-dp-pp"
    simulation: SimulationOptions = field(default_factory=SimulationOptions)
    compute: ComputeSetup | None = None
    given: frozenset[str] = frozenset()
    variants: tuple[tuple[tuple[tuple[str, str], ...], Training], ...] = ()
    periodic: bool = True
    twins: tuple[tuple[str, tuple[SweepPoint, ...]], ...] = ()
    """Layouts evaluated with another by :func:`evaluate_twins` (by that one's key): those
    whose simulation may be the same (:func:`sim.sweep.best.twin_groups`)."""

    def training_for(self, layout: SweepPoint) -> Training:
        """The training of ``layout``: its variant's (swept training options), else the
        sweep's."""
        return next((t for label, t in self.variants if label == layout.variant),
                    self.training)

    def with_twins(self, layout: SweepPoint) -> tuple[SweepPoint, ...]:
        """``layout`` and the layouts evaluated with it (:attr:`twins`), in that order."""
        return (layout, *next((t for k, t in self.twins if k == layout.key), ()))


def base_row(layout: SweepPoint) -> dict[str, Any]:
    row = {"layout": layout.key, "tp": layout.tp, "pp": layout.pp, "dp": layout.dp,
           "vpp": layout.vpp, "ep": layout.ep, "micro_batch": layout.micro_batch}
    if layout.cp > 1:  # new dimensions: in the JSON rows when swept (results.csv: the key)
        row["cp"] = layout.cp
    if layout.zero:
        row["zero"] = layout.zero
    if layout.etp:
        row["etp"] = layout.etp
    row.update(layout.variant)  # swept training options: one column each
    return row


def evaluate(ctx: SweepContext, layout: SweepPoint, memory_only: bool = False,
             shared: list | None = None) -> dict[str, Any]:
    """Memory check + simulation of ``layout``; returns a JSON-ready row (units in the keys):

    ``status`` (``ok`` | ``infeasible`` | ``inapplicable`` (a given flag changes nothing in
    this layout, known only after simulating it; the reason says which) | ``error``),
    ``reason``, ``microbatches``,
    ``schedule``, ``memory_per_gpu_bytes`` (busiest stage), ``memory_capacity_bytes``,
    ``iteration_time_s``, ``tokens_per_s``, ``tflops_per_gpu``, ``mfu``,
    ``bubble_fraction``, ``ideal_bubble_fraction``, ``exposed_<GROUP>_s`` (mean over stages),
    ``events`` and ``elapsed_s`` (wall time of the task; not part of the final outputs).
    ``memory_only``: stop after the memory check (:func:`infeasible_row`); ``shared``: the
    simulations of the layouts evaluated before this one in the same task
    (:func:`evaluate_twins`).
    """
    t0 = time.perf_counter()
    row = base_row(layout)
    try:
        row.update(_evaluate(ctx, layout, memory_only, shared))
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        row.update(status="error", reason=error_text(exc))
    row["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return row


def error_text(exc: Exception) -> str:
    """An error row's reason: the exception's type and message on one line."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def memory_row(ctx: SweepContext, layout: SweepPoint) -> tuple[dict[str, Any], Any]:
    """The memory check of ``layout`` (no simulation): the row's ``microbatches``,
    ``schedule``, ``memory_per_gpu_bytes``, ``memory_capacity_bytes`` and, when it does not
    fit, ``status = "infeasible"`` with the reason; and the :class:`ModelFit` (``None`` when
    infeasible). The sweep's early feasibility pass (:mod:`sim.sweep.driver`) and
    :func:`evaluate` both start here, so a layout is judged the same way in both."""
    par = layout.config(ctx.training_for(layout))
    out: dict[str, Any] = {"microbatches": par.microbatches, "schedule": par.schedule_name}
    # the single run's stages (sim.scenario.steps), from objects: workers need no files
    fit = fit_model(ctx.model, par, ctx.topology, ctx.placement)
    mem = fit.memory
    out["memory_per_gpu_bytes"] = mem.peak.total_bytes
    out["memory_capacity_bytes"] = mem.capacity_bytes
    if not mem.feasible:
        out.update(status="infeasible", reason=mem.reason)
        return out, None
    return out, fit


def infeasible_row(ctx: SweepContext, layout: SweepPoint, keep: bool = False
                   ) -> dict[str, Any] | None:
    """The final row of ``layout`` when its memory check alone decides it (does not fit, or
    the check itself fails: ``error``), else ``None`` (it has to be simulated); ``keep``:
    the row in every case, with ``status = "fits"`` when it has to be simulated."""
    row = evaluate(ctx, layout, memory_only=True)
    if row.get("status") in ("infeasible", "error"):
        return row
    return {**row, "status": "fits"} if keep else None


def evaluate_twins(ctx: SweepContext, layout: SweepPoint) -> list[dict[str, Any]]:
    """The rows of ``layout`` and of its twins (``ctx.twins``), in that order, each as
    :func:`evaluate` makes it; a twin whose simulation would be that of a layout before it is
    not simulated again (:func:`_simulated`)."""
    shared: list = []
    return [evaluate(ctx, lay, shared=shared) for lay in ctx.with_twins(layout)]


def _simulated(prepared, shared: list | None):
    """``steps.run(prepared)``, or, when ``shared`` (the simulations of the layouts before it
    in one task) holds a run whose every simulation input equals ``prepared``'s — the program
    but for its assumption lines (text for the report only), the topology, its faults, the
    network, interference and engine options (the placement and rank classes follow from
    them) — that run's result with
    ``prepared``'s program, and ``prepared``'s own report of it. The engine and the network
    model are deterministic functions of those inputs (the periodic shortcut's result is the
    full simulation's, tests/test_periodic_run.py), so the result is the one
    ``steps.run(prepared)`` would give; e.g. ``--recompute none`` and ``selective`` with a
    fused attention kernel generate the same work. Whether the periodic shortcut may be tried
    is not compared, for the same reason: the twin of a layout whose short runs did not step
    evenly (then simulated with the shortcut off, :data:`_APERIODIC`) reuses that layout's
    full simulation. Never reused with faults or jitter (a healthy run or samples to add)."""
    if shared is None or not prepared.faults.empty or prepared.simulation.jitter_cv > 0:
        return steps.run(prepared)
    # placement and rank classes: functions of the program's sizes, the topology, its faults
    # and the engine options, all compared (objects without equality of their own)
    key = replace(prepared, program=replace(prepared.program, assumptions=[]), model_run=None,
                  placement=None, classes=None,
                  simulation=replace(prepared.simulation, periodic=True))
    for seen, result in shared:
        if seen == key:
            result = replace(result, program=prepared.program)
            return steps.Outcome(result, steps.report(prepared, result), 0.0)
    done = steps.run(prepared)
    shared.append((key, done.result))
    return done


_APERIODIC: set[str] = set()
"""The schedules whose periodic shortcut was tried in this process and failed (the short runs'
integers did not step evenly: the full run was simulated), e.g. the zero-bubble schedules,
whose deferred weight-gradient passes keep shifting the pipeline over the short runs' few
periods. A later layout of such a schedule is simulated in full at once, without the short
runs (up to ~90% of a full run's work when they fail). The row is the same either way: the
shortcut's result is the full simulation's (tests/test_periodic_run.py, the sweep benchmark's
check of its top layouts); only the work differs. On local workers, also those another worker
of the sweep found (:data:`_SHARED_FLAGS`)."""

_SHARED_FLAGS: list = []
"""A local worker's view of the flags its sweep's workers share (:func:`share_aperiodic`):
one byte per registered schedule (:data:`~sim.pipeline.registry.SCHEDULES` order), set by the
worker that found the schedule's shortcut failing, so that no other worker tries it again."""


def share_aperiodic(flags) -> None:
    """Share :data:`_APERIODIC` through ``flags`` (a shared byte array, one per registered
    schedule: :func:`aperiodic_flags`) with the other workers that received it."""
    _SHARED_FLAGS[:] = [flags]


def aperiodic_flags(mp_context):
    """A new shared byte array for :func:`share_aperiodic` (all clear), from ``mp_context``
    (a :mod:`multiprocessing` context; passed to each worker when it starts)."""
    return mp_context.RawArray("b", len(SCHEDULES))


def _aperiodic(schedule: str) -> bool:
    """Whether the shortcut of ``schedule`` is known to fail here or, where the flags are
    shared, in another worker of the sweep."""
    if schedule not in _APERIODIC and _SHARED_FLAGS and schedule in SCHEDULES \
            and _SHARED_FLAGS[0][SCHEDULES.index(schedule)]:
        _APERIODIC.add(schedule)
    return schedule in _APERIODIC


def _mark_aperiodic(schedule: str) -> None:
    _APERIODIC.add(schedule)
    if _SHARED_FLAGS and schedule in SCHEDULES:
        _SHARED_FLAGS[0][SCHEDULES.index(schedule)] = 1


def _evaluate(ctx: SweepContext, layout: SweepPoint, memory_only: bool = False,
              shared: list | None = None) -> dict[str, Any]:
    out, fit = memory_row(ctx, layout)
    if fit is None or memory_only:
        return out
    # a periodic pipeline: three short runs, the same report (sim.scenario.periodic_run);
    # not tried again for a schedule whose short runs did not step evenly in this sweep's worker
    schedule = fit.par.schedule_name
    sim = replace(ctx.simulation, placement=ctx.placement,
                  periodic=ctx.periodic and not _aperiodic(schedule))
    run = model_run_of(fit, ctx.topology, compute=ctx.compute)
    prepared = steps.prepare(run.program, ctx.topology, network=ctx.network, simulation=sim,
                             model_run=run)
    done = _simulated(prepared, shared)
    if counts_for(prepared) is not None and not done.result.periodic_runs:
        _mark_aperiodic(schedule)  # tried and the full run simulated: see _APERIODIC
    rep = done.report  # a model run's report holds its metrics
    vals = {k: rep[k] for k in ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu",
                                "bubble_fraction", "ideal_bubble_fraction", "stages")}
    vals["events"] = done.result.events
    try:
        check_interference(ctx.given, rep["assumptions"])
    except UsageError as exc:
        out.update(status="inapplicable", reason=str(exc))
        return out
    stages = vals.pop("stages")
    events = vals.pop("events")
    n = max(len(stages), 1)
    out.update(status="ok", reason="", **vals)
    par = fit.par
    rng = prediction_range(vals["iteration_time_s"], ctx.topology.gpu.name,
                           ctx.model.moe is not None, getattr(ctx.compute, "calibration", None))
    out.update(iteration_time_low_s=rng["low_s"], iteration_time_high_s=rng["high_s"])
    for g in GROUPS + (("CP",) if par.cp > 1 else ()) + (("ETP",) if par.etp != par.tp else ()):
        out[f"exposed_{g}_s"] = sum(s["exposed_comm_s"].get(g, 0.0) for s in stages) / n
    out["events"] = events
    return out

"""A model run simulated as three short runs (:mod:`sim.engine.periodic`), with the same report.

A model run of ``M`` identical microbatches is simulated with ``M₀``, ``M₀ + k`` and
``M₀ + 2k`` microbatches (:func:`sim.engine.periodic.short_counts`; where those do not step
evenly, also ``M₀ + 3k``, and the last three are used), each program generated as
the full one is (:meth:`sim.scenario.model_run.ModelRun.with_microbatches`), and extrapolated
to ``M`` — every integer the report reads: per-rank and per-layer times, the critical path's
totals, the events and the interference counts. The result then carries the full run's
program, so the report is built from it exactly as from the full simulation's
(``tests/test_periodic_run.py`` compares the JSON reports byte for byte). Where the shortcut
cannot be proven (any integer whose two differences differ, any name or note that differs
between the short runs) the full run is simulated.

Never taken (the full run is simulated): ``--full-simulation``; a workload file (its
microbatches are the file's) or an AICB collective log; faults (a slow GPU breaks the
symmetry); a trace or a timeline (they show every microbatch); options whose effect depends
on the microbatch count (``--wgrad-deferral-limit``); too few microbatches for three short
runs to save :data:`sim.engine.periodic.MIN_SAVING`; an extrapolated iteration longer than the
watchdog's ``--max-sim-time-s`` (the full run then stops with the watchdog's error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sim.engine.periodic import (
    extrapolate,
    extrapolate_counts,
    later_windows,
    period_of,
    short_counts,
)
from sim.engine.result import SimResult
from sim.network.base import Network


def counts_for(prepared) -> tuple[int, ...] | None:
    """The short runs' microbatch counts for ``prepared`` (a
    :class:`sim.scenario.steps.Prepared`): two windows of three, the second one period after
    the first (:func:`sim.engine.periodic.short_counts`), with a tolerance also the later
    windows of :func:`sim.engine.periodic.later_windows`; or ``None`` where the shortcut is
    never taken."""
    run, prog = prepared.model_run, prepared.program
    if (not prepared.simulation.periodic or run is None or run.log is not None
            or run.program is not prog or not prepared.faults.empty or prepared.record_spans
            or run.par.training.wgrad_deferral_limit):
        return None
    k = period_of(prog.pp, prog.microbatch_group_size, prog.schedule_type)
    counts = short_counts(prog.microbatches, k, prog.pp)
    if counts is not None and prepared.simulation.periodic_tolerance > 0.0:
        counts = later_windows(counts, prog.microbatches)
    return counts


def simulate_periodic(prepared, simulate: Callable[[object], tuple[SimResult, Network]]
                      ) -> SimResult | None:
    """The full run's result from three short runs, or ``None`` (simulate the full run).
    ``simulate(p)``: the deterministic result of the prepared run ``p`` and the network model
    it ran on. The first window of :func:`counts_for` is tried, then (its integers not
    stepping evenly) the next, which reuses two of its runs, and so on. The network's report lines
    are those of the window's first run's network with its counters extrapolated
    (:meth:`sim.network.base.Network.counters`)."""
    counts = counts_for(prepared)
    if counts is None:
        return None
    run = prepared.model_run
    runs: list[tuple[SimResult, Network]] = []
    for i, m in enumerate(counts):
        try:  # a short count the layout refuses, or a short run that fails, proves nothing
            short = run.with_microbatches(m, prepared.topology, prepared.simulation.placement)
            if short.microbatches != m:
                return None
            runs.append(simulate(dataclasses.replace(prepared, program=short)))
        except Exception:  # noqa: BLE001 - the full run is simulated instead
            return None
        if i >= 2:
            got = _extrapolated(prepared, runs[i - 2:], counts[i - 2:i + 1])
            if got is not None:
                return dataclasses.replace(got, periodic_runs=tuple(
                    (r.program.microbatches, r.events) for r, _ in runs))
    return None


def _extrapolated(prepared, window: list[tuple[SimResult, Network]],
                  counts: tuple[int, ...]) -> SimResult | None:
    """The full run's result from the three short runs of ``window`` (``counts``
    microbatches), or ``None`` when they do not step evenly: exactly, else (a
    ``periodic_tolerance``) within it, for what a validation row reads (:func:`_within`)."""
    prog = prepared.program
    results, nets = [r for r, _ in window], [net for _, net in window]
    n = (prog.microbatches - counts[0]) // (counts[1] - counts[0])
    res = extrapolate(results, n, full=True)
    if res is None:
        return _within(prepared, results, n)
    counters = extrapolate_counts([net.counters() for net in nets], n)
    if counters is None:
        return _within(prepared, results, n)
    if res.iteration_ns > prepared.simulation.max_sim_time_s * 1e9:
        return None  # past the watchdog's limit: the full run stops there, as without this
    nets[0].set_counters(counters)
    return dataclasses.replace(res, program=prog, network_notes=nets[0].describe())


def _within(prepared, results: list[SimResult], n: int) -> SimResult | None:
    """With a ``periodic_tolerance``: the iteration and the per-rank integers (times, exposed
    communication by group: what a validation row reads) extrapolated within it; the
    per-layer totals, the critical path and the network's counters are not (near-tied ranks
    and links trade places from one short run to the next) and are left out of the result."""
    tolerance = prepared.simulation.periodic_tolerance
    if tolerance <= 0.0:
        return None
    res = extrapolate(results, n, full=False, tolerance=tolerance)
    if res is None or res.iteration_ns > prepared.simulation.max_sim_time_s * 1e9:
        return None
    return dataclasses.replace(res, program=prepared.program, periodic_tolerance=tolerance,
                               network_notes=[WITHIN_NOTE], beside_compute_ns=0, nccl_ctas={})


WITHIN_NOTE = ("network: extrapolated from short runs within a tolerance; the network's "
               "counters, the critical path and per-layer totals are not extrapolated "
               "(--full-simulation simulates every microbatch)")


def periodic_mode(result: SimResult) -> str:
    """How ``result``'s iteration was simulated: ``"full"`` (every microbatch), ``"exact"``
    (extrapolated exactly from short periodic runs) or ``"within"`` (within a tolerance)."""
    if not result.periodic_runs:
        return "full"
    return "within" if result.periodic_tolerance else "exact"


def simulated_as(result: SimResult) -> str:
    """:func:`periodic_mode` in words, with the tolerance and the short runs (a validation
    row's ``simulated``)."""
    mode = periodic_mode(result)
    if mode == "full":
        return "in full"
    how = f"within {result.periodic_tolerance:g} of a period" if mode == "within" else "exactly"
    runs = ", ".join(str(m) for m, _ in result.periodic_runs)
    return f"extrapolated {how} from {runs} microbatches"

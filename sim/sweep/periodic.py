"""The periodic shortcut of a sweep task: a pipeline of identical microbatches repeats itself.

With ``M`` identical microbatches, a pipeline schedule is a warm-up, a steady state that
repeats every ``k`` microbatches (one round of every stage, ``k`` = the pipeline size, or the
interleaved schedule's microbatch group), and a cool-down (the last microbatches' backwards,
the gradient reductions, the optimizer). Adding ``k`` microbatches adds one steady period: every
integer the engine counts (iteration time, events, each stage's compute, exposed
communication by group, idle time, pipeline start and end) grows by the same amount.

:func:`evaluate_periodic` simulates the same layout with ``M₁``, ``M₁ + k`` and ``M₁ + 2k``
microbatches (``M₁ ≡ M`` mod ``k``, past the warm-up), requires the two differences of every
counted integer to be *equal* — the run is then periodic in those counts — and extrapolates
them to ``M`` exactly (integers, ns). The row's other numbers are computed from the
extrapolated integers exactly as the full run's report computes them (the same functions:
:func:`sim.report.build.rank_entry`, :func:`sim.models.metrics.metrics`), so the row equals
the full simulation's (``tests/test_sweep_periodic.py`` checks it to the ns on several
schedules).

It returns ``None`` — the full run is simulated — where the equality is not established: a
topology with faults (one slow GPU breaks the symmetry the stages rely on), options whose
effect depends on the microbatch count (``--wgrad-deferral-limit``), too few microbatches for
three short runs to be cheaper, a short run Megatron would refuse, or any counted integer whose
two differences differ.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.engine.periodic import extrapolate, period_of, short_counts
from sim.engine.result import SimResult
from sim.report.build import NS, rank_entry


def period(par) -> int:
    """Microbatches of one steady period of ``par`` (:func:`sim.engine.periodic.period_of`)."""
    return period_of(par.pp, par.layout.microbatch_group_size, par.layout.schedule_type)


def stage_rows(result: SimResult) -> list[dict[str, Any]]:
    """The report's ``stages`` entries of ``result`` (:func:`sim.report.build.rank_entry`)."""
    stats = result.stage_stats()
    span = (max(st.pipeline_end_ns for st in stats) - min(st.pipeline_start_ns for st in stats)
            if stats else 0)
    return [rank_entry(st, result, span) for st in stats]


def applies(ctx, par) -> bool:
    """Whether the shortcut may be tried for ``par`` in the sweep ``ctx`` (see the module)."""
    return (ctx.periodic and ctx.topology.faults.empty
            and not par.training.wgrad_deferral_limit)


def evaluate_periodic(ctx, layout, fit, simulate) -> tuple[dict[str, Any], Any] | None:
    """``(row values, first short report)`` of ``layout`` from three short runs, or ``None``
    (simulate the full run). ``simulate(par)`` → the ``steps.run`` outcome of the config
    ``par``; ``fit``: the full layout's memory fit (its model and config give the metrics)."""
    par = fit.par
    if not applies(ctx, par):
        return None
    k = period(par)
    counts = short_counts(par.microbatches, k, par.pp)
    if counts is None:
        return None
    mb_dp = par.global_batch // par.microbatches
    outcomes = []
    for m in counts:
        training = replace(ctx.training_for(layout), global_batch=m * mb_dp)
        try:
            short = layout.config(training)
        except Exception:  # noqa: BLE001 - a short count Megatron refuses: the full run
            return None
        if short.microbatches != m:
            return None
        outcomes.append(simulate(short))
    res = extrapolate([o.result for o in outcomes], (par.microbatches - counts[0]) // k)
    if res is None:
        return None
    return row_values(res, fit, ctx.topology.gpu), outcomes[0].report


def row_values(res: SimResult, fit, gpu) -> dict[str, Any]:
    """The simulated part of a sweep row from ``res`` (computed as the report computes it)."""
    from sim.models.metrics import metrics
    from sim.pipeline.schedules import ideal_bubble_fraction

    par = fit.par
    stages = stage_rows(res)
    fractions = [s["bubble_fraction"] for s in stages]
    m = metrics(fit.model, par, gpu, res.iteration_ns)
    prog = res.program
    out = {"iteration_time_s": res.iteration_ns * NS, "tokens_per_s": m["tokens_per_s"],
           "tflops_per_gpu": m["tflops_per_gpu"], "mfu": m["mfu"],
           "bubble_fraction": sum(fractions) / len(fractions) if fractions else 0.0,
           "ideal_bubble_fraction": ideal_bubble_fraction(prog.schedule, prog.pp,
                                                          par.microbatches, prog.vpp),
           "stages": stages, "events": res.events}
    return out

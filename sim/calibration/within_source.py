"""What calibration buys, measured: ``simrun validate --calibrate-within-source K``.

For each source (one validation file: one stack on one cluster), the knobs are fitted
(:func:`sim.calibration.fit.fit_knobs`: the knobs taken by the share of the cases' time they
act on) on its ``K`` cases with the fewest GPUs (ties: the first listed) and every other case
of the source is predicted again under them. Each evaluated row keeps its uncalibrated
``error_pct`` and gains ``calibrated_predicted_s`` and ``calibrated_error_pct``; the rows
calibrated on gain ``calibrated_on: true`` and no calibrated error. The summary gives, per
source and over all sources, the mean and largest absolute error of the evaluated cases,
uncalibrated and calibrated.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from sim.calibration.fit import Fit, fit_knobs
from sim.calibration.profile import check_applies
from sim.calibration.runs import case_run, case_topology, predict_case
from sim.runtime.progress import Progress
from sim.sweep.runner import default_workers, stop_pool, worker_pool
from sim.validation.cases import Case


def split(cases: list[Case], k: int) -> tuple[list[Case], list[Case]]:
    """The ``k`` cases with the fewest GPUs (ties: file order), and the others (file order)."""
    order = sorted(range(len(cases)), key=lambda i: (cases[i].par.world_size, i))
    used = set(order[:k])
    return ([cases[i] for i in sorted(used, key=order.index)],
            [c for i, c in enumerate(cases) if i not in used])


def _fit(file: str, cases: list[Case]) -> Fit:
    return fit_knobs([case_run(c, file) for c in cases])


def calibrate_within_source(groups: list[tuple[str, list[Case]]], rows: list[dict[str, Any]],
                            k: int, workers: int | None = None) -> dict[str, Any]:
    """Run the protocol over ``groups`` (validation file, its cases), whose uncalibrated
    ``rows`` (:func:`sim.validation.cases.run_cases`, same order as the cases of the groups in
    turn) gain the calibrated fields; returns the JSON summary."""
    by_name = {}
    i = 0
    for file, cases in groups:
        for c in cases:
            by_name[(file, c.name)] = rows[i]
            i += 1
    plans = [(file, *split(cases, k)) for file, cases in groups]
    n = max(1, min(workers or default_workers(), sum(len(c) for _, _, c in plans)))
    pool = worker_pool(n) if n > 1 else None
    try:
        with Progress("calibrate within source: sources fitted", total=len(plans)) as pr:
            pending = [pool.submit(_fit, file, cal) if pool else None for file, cal, _ in plans]
            fits = []
            for (file, cal, _), fut in zip(plans, pending, strict=True):
                fits.append(fut.result() if fut else _fit(file, cal))
                pr.advance()
        tasks = [(file, c, f.knobs) for (file, _, ev), f in zip(plans, fits, strict=True)
                 for c in ev]
        with Progress("calibrate within source: cases evaluated", total=len(tasks)) as pr:
            futs = [pool.submit(predict_case, c, kn) if pool else None for _, c, kn in tasks]
            times = []
            for (_, c, kn), fut in zip(tasks, futs, strict=True):
                times.append(fut.result() if fut else predict_case(c, kn))
                pr.advance()
    except BaseException:
        if pool is not None:
            stop_pool(pool)
        raise
    if isinstance(pool, ProcessPoolExecutor):
        pool.shutdown()
    for (file, c, _), t in zip(tasks, times, strict=True):
        row = by_name[(file, c.name)]
        row["calibrated_predicted_s"] = t
        row["calibrated_error_pct"] = (t - c.measured_s) / c.measured_s * 100
    sources = []
    for (file, cal, ev), fit in zip(plans, fits, strict=True):
        for c in cal:
            by_name[(file, c.name)]["calibrated_on"] = True
        evaluated = [by_name[(file, c.name)] for c in ev]
        sources.append({
            "file": file, "calibrated_on": [c.name for c in cal],
            "knobs": fit.knobs.changed(), "identified": list(fit.identified),
            "calibration_residual_pct": [r[3] for r in fit.residuals],
            "uncalibrated": stats([r["error_pct"] for r in evaluated]),
            "calibrated": stats([r["calibrated_error_pct"] for r in evaluated])})
    every = [r for r in rows if "calibrated_error_pct" in r]
    return {"k": k, "sources": sources,
            "overall": {"uncalibrated": stats([r["error_pct"] for r in every]),
                        "calibrated": stats([r["calibrated_error_pct"] for r in every])}}


def stats(errs: list[float]) -> dict[str, float]:
    """Count, mean absolute, mean signed and largest absolute error (percent)."""
    if not errs:
        return {"cases": 0}
    return {"cases": len(errs), "mean_abs_error_pct": sum(abs(e) for e in errs) / len(errs),
            "mean_error_pct": sum(errs) / len(errs),
            "max_abs_error_pct": max(abs(e) for e in errs)}


def lines(summary: dict[str, Any]) -> list[str]:
    """The printed report of the protocol: one line per source, then overall."""

    def pair(s: dict[str, Any]) -> str:
        u, c = s["uncalibrated"], s["calibrated"]
        if not u["cases"]:
            return "no case left to evaluate"
        return (f"{u['cases']} evaluated: uncalibrated MAPE {u['mean_abs_error_pct']:.1f}% "
                f"(max {u['max_abs_error_pct']:.1f}%), calibrated MAPE "
                f"{c['mean_abs_error_pct']:.1f}% (max {c['max_abs_error_pct']:.1f}%)")

    if summary.get("profile"):
        out = [f"every case predicted again under the calibration profile {summary['profile']}:"]
    else:
        out = [f"calibrated within each source on its {summary['k']} case"
               f"{'s' if summary['k'] > 1 else ''} with the fewest GPUs (simrun calibrate's "
               "fit), evaluated on the others:"]
    for s in summary["sources"]:
        knobs = ", ".join(f"{k} {v:.3f}" for k, v in s["knobs"].items()) or "all neutral"
        out.append(f"  {Path(s['file']).name}: on {', '.join(s['calibrated_on'])} -> {knobs}; "
                   f"{pair(s)}")
    out.append(f"  all sources: {pair(summary['overall'])}")
    return out


def with_profile(groups: list[tuple[str, list[Case]]], rows: list[dict[str, Any]], profile,
                 override: bool, workers: int | None = None) -> dict[str, Any]:
    """``simrun validate --calibration PROFILE``: every case predicted again under the
    profile's knobs (a case on another GPU or topology refused unless ``override``); the rows
    gain the calibrated fields; returns the JSON summary (the same shape as
    :func:`calibrate_within_source`'s, one entry per file)."""
    cases = [(file, c) for file, cs in groups for c in cs]
    for _, c in cases:
        topo = case_topology(c)
        check_applies(profile, gpu=topo.gpu.name, topology=topo.name, override=override)
    n = max(1, min(workers or default_workers(), len(cases)))
    if n > 1:
        pool = worker_pool(n)
        try:
            times = list(pool.map(predict_case, [c for _, c in cases],
                                  [profile.knobs] * len(cases)))
        except BaseException:
            stop_pool(pool)
            raise
        pool.shutdown()
    else:
        times = [predict_case(c, profile.knobs) for _, c in cases]
    for row, (_, c), t in zip(rows, cases, times, strict=True):
        row["calibrated_predicted_s"] = t
        row["calibrated_error_pct"] = (t - c.measured_s) / c.measured_s * 100
    sources = []
    for file, _ in groups:
        mine = [r for r, (f, _) in zip(rows, cases, strict=True) if f == file]
        sources.append({"file": file, "calibrated_on": [f"profile {profile.path}"],
                        "knobs": profile.knobs.changed(), "identified": list(profile.knobs
                                                                             .changed()),
                        "uncalibrated": stats([r["error_pct"] for r in mine]),
                        "calibrated": stats([r["calibrated_error_pct"] for r in mine])})
    return {"k": 0, "profile": profile.path, "sources": sources,
            "overall": {"uncalibrated": stats([r["error_pct"] for r in rows]),
                        "calibrated": stats([r["calibrated_error_pct"] for r in rows])}}

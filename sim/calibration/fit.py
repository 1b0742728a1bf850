"""Fitting the knobs (:mod:`sim.calibration.knobs`) to measured iteration times.

Each measured run gives one equation, ``predicted_s(knobs) = measured_s``, so ``n`` runs
identify at most ``n`` knobs. Which ones is a rule, not a fit: the knobs are taken in the
order of the share of the runs' time they act on (the largest relative change of a run's time
for a 10% step of the knob, largest first; ties keep the order of
:data:`~sim.calibration.knobs.KNOBS`), because a run's time says most about the kernels that
fill most of it: in a dense transformer step that is the GEMMs, in a small MoE step it can be
the memory-bound kernels (the per-kernel overhead, a time the model does not have, comes
after the scales). A knob is kept when the runs' times are sensitive to it (a 10% step
moves some run's time by at least :data:`MIN_SENSITIVITY`) and its sensitivities are not a
multiple of the kept knobs' (then the runs cannot tell them apart); the others stay neutral and
are listed as not identified, with why. The kept knobs are solved by
Gauss-Newton on the log of predicted over measured time (derivatives by finite differences,
each step clipped to the knobs' bounds), until every run's residual moves less than
:data:`TOL` or :data:`MAX_STEPS` steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sim.calibration.knobs import KNOBS, SPEC, Knobs

#: the least relative change of some run's time, per 10% step of a knob, that identifies it
MIN_SENSITIVITY = 0.002
#: convergence: change of every residual (log of predicted / measured) between steps
TOL = 1e-5
MAX_STEPS = 8


@dataclass(frozen=True)
class MeasuredRun:
    """One measurement: ``name``, the measured iteration time (s), ``predict(knobs)`` → the
    predicted time (s), ``what``: the measurement, as a profile names it, and
    ``spread_pct``: half the spread of the measured times around ``measured_s`` (percent)."""

    name: str
    measured_s: float
    predict: Callable[[Knobs], float]
    what: str
    spread_pct: float = 0.0


@dataclass(frozen=True)
class Fit:
    """The fitted knobs, which were identified and which not (name → why), and each run's
    ``(name, measured_s, predicted_s, error_pct)`` after the fit and before it."""

    knobs: Knobs
    identified: tuple[str, ...]
    not_identified: dict[str, str]
    residuals: tuple[tuple[str, float, float, float], ...]
    uncalibrated: tuple[tuple[str, float, float, float], ...]

    def range_pct(self) -> tuple[float, float]:
        """The residuals' range in percent (``(0, 0)`` when there are none)."""
        errs = [r[3] for r in self.residuals] or [0.0]
        return min(errs), max(errs)


def _to_u(name: str, v: float) -> float:
    """The fit's coordinate of knob ``name``: the log of a scale, the overhead in 10 µs."""
    return v / 10.0 if SPEC[name].neutral == 0.0 else math.log(v)


def _from_u(name: str, u: float) -> float:
    spec = SPEC[name]
    v = u * 10.0 if spec.neutral == 0.0 else math.exp(u)
    return min(spec.high, max(spec.low, v))


def _step(name: str) -> float:
    return 0.2 if SPEC[name].neutral == 0.0 else math.log(1.1)  # 2 µs, or 10%


def fit_knobs(runs: Sequence[MeasuredRun], candidates: Sequence[str] | None = None,
              base: Knobs | None = None) -> Fit:
    """Fit ``candidates`` (default: every knob) to ``runs``, the other knobs held at ``base``
    (default: neutral); the candidates are taken by :func:`share_order`."""
    base = base or Knobs()
    t0 = np.array([r.predict(base) for r in runs])
    meas = np.array([r.measured_s for r in runs])
    sens = share_order(runs, list(candidates or [k.name for k in KNOBS]), base, t0)
    chosen: list[str] = []
    cols: list[np.ndarray] = []
    why: dict[str, str] = {}
    for name, col in sens:
        if len(chosen) >= len(runs):
            why[name] = (f"{len(runs)} measured run{'s' if len(runs) > 1 else ''} identif"
                         f"{'y' if len(runs) > 1 else 'ies'} at most {len(runs)} knob"
                         f"{'s' if len(runs) > 1 else ''} (taken by the share of the runs' "
                         "time each acts on, largest first)")
            continue
        if np.max(np.abs(col)) < MIN_SENSITIVITY:
            why[name] = "the measured runs' times do not depend on it (under 0.2% per step)"
            continue
        trial = np.column_stack([*cols, col])
        if np.linalg.matrix_rank(trial / np.linalg.norm(trial, axis=0), tol=1e-3) < len(chosen) + 1:
            why[name] = "the measured runs move with it as with the knobs already fitted"
            continue
        chosen.append(name)
        cols.append(col / _step(name))
    knobs = _solve(runs, chosen, np.column_stack(cols) if cols else None, t0, meas, base)
    pred = np.array([r.predict(knobs) for r in runs]) if chosen else t0
    return Fit(knobs, tuple(chosen), why, _rows(runs, meas, pred), _rows(runs, meas, t0))


def share_order(runs: Sequence[MeasuredRun], names: list[str], base: Knobs,
                t0: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``names`` with each knob's sensitivity column (log change of every run's time for a
    10% step of the knob, 2 µs for the overhead): the scales ordered by the largest absolute
    entry, largest first (the share of the runs' time the knob acts on; ties keep ``names``'
    order), then the per-kernel overhead (it adds a time the model does not have: no share)."""
    cols = []
    for name in names:
        u = _to_u(name, base.value(name)) + _step(name)
        t = np.array([r.predict(base.with_value(name, _from_u(name, u))) for r in runs])
        cols.append((name, np.log(t / t0)))
    return sorted(cols, key=lambda nc: (SPEC[nc[0]].neutral == 0.0,
                                        -round(float(np.max(np.abs(nc[1]))), 9)))


def _rows(runs, meas, pred) -> tuple[tuple[str, float, float, float], ...]:
    return tuple((r.name, float(m), float(p), float((p - m) / m * 100))
                 for r, m, p in zip(runs, meas, pred, strict=True))


def _solve(runs, chosen: list[str], jac, t0, meas, base: Knobs) -> Knobs:
    """Gauss-Newton from ``base`` with Jacobian ``jac`` (d log t / d u) at first, re-measured
    along each step's direction (Broyden's rank-one update) afterwards. A step is taken whole,
    halved or quartered, whichever first lowers the sum of squared residuals; none: the fit
    stops (it never ends worse than it began)."""
    knobs = base
    if not chosen:
        return knobs
    u = np.array([_to_u(n, knobs.value(n)) for n in chosen])
    r = np.log(t0 / meas)
    for _ in range(MAX_STEPS):
        du = np.linalg.lstsq(jac, -r, rcond=None)[0]
        for frac in (1.0, 0.5, 0.25):
            new_u = np.array([_to_u(n, _from_u(n, x))
                              for n, x in zip(chosen, u + frac * du, strict=True)])
            step = new_u - u
            if not np.any(step):
                return knobs
            trial = knobs
            for n, x in zip(chosen, new_u, strict=True):
                trial = trial.with_value(n, _from_u(n, x))
            new_r = np.log(np.array([rn.predict(trial) for rn in runs]) / meas)
            jac = jac + np.outer(new_r - r - jac @ step, step) / float(step @ step)
            if float(new_r @ new_r) < float(r @ r):
                break
        else:
            return knobs
        converged = np.max(np.abs(new_r - r)) < TOL
        u, r, knobs = new_u, new_r, trial
        if converged or np.max(np.abs(r)) < TOL:
            break
    return knobs

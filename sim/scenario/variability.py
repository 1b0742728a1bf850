"""``--jitter CV --samples N --seed S``: the iteration time over seeded samples of kernel and
transfer noise (:mod:`sim.engine.jitter`), against the deterministic run.

Symmetry: with noise, the DP and TP copies of a rank no longer run the same times, and at
every synchronisation (a collective, a pipeline receive) the group waits for its slowest
member — the effect that grows with the cluster. A representative rank per stage would
simulate one draw per stage and miss it, so every sample simulates every rank (per-rank rank
classes, said so in the assumptions); a run of thousands of GPUs therefore costs about as
much per sample as ``--per-rank``. The samples are variants of the run
(:func:`sim.scenario.steps.jitter_sample`): the same program, placement and network options.
"""

from __future__ import annotations

from typing import Any

from sim.engine.jitter import Jitter


def summary(times_ns: list[int], deterministic_ns: int, jitter: Jitter) -> dict[str, Any]:
    """The report's ``variability`` block: the samples, their 50th/90th/99th percentiles
    (linear interpolation between order statistics, numpy's default) and the mean of
    sample / deterministic iteration time."""
    import numpy as np

    t = np.array(times_ns, dtype=float) * 1e-9
    p50, p90, p99 = (float(x) for x in np.percentile(t, [50, 90, 99]))
    return {"jitter_cv": jitter.cv, "seed": jitter.seed, "samples": len(times_ns),
            "deterministic_iteration_s": deterministic_ns * 1e-9,
            "iteration_times_s": [float(x) for x in t],
            "p50_iteration_s": p50, "p90_iteration_s": p90, "p99_iteration_s": p99,
            "mean_slowdown": float(np.mean(t)) / (deterministic_ns * 1e-9)}


def notes(jitter: Jitter, samples: int) -> list[str]:
    """The assumption lines of the variability samples."""
    return [jitter.describe() + f"; {samples} sample(s), sample i drawn with (seed, i)",
            "variability samples simulate every rank (per-rank classes): noise breaks the "
            "symmetry of the DP/TP copies and every synchronisation waits for its slowest "
            "member; the report's breakdown is the deterministic run's"]


def line(v: dict[str, Any]) -> str:
    """One line for the text report."""
    return (f"variability: {v['samples']} sample(s), jitter CV {v['jitter_cv']:g}, seed "
            f"{v['seed']}: iteration p50 {v['p50_iteration_s'] * 1e3:.3f} ms, p90 "
            f"{v['p90_iteration_s'] * 1e3:.3f} ms, p99 {v['p99_iteration_s'] * 1e3:.3f} ms; "
            f"mean slowdown ×{v['mean_slowdown']:.4f} over the deterministic "
            f"{v['deterministic_iteration_s'] * 1e3:.3f} ms\n")

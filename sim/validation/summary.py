"""Error statistics of validation rows (:func:`sim.validation.cases.run_cases`): all cases,
each role, and each role's cases by source, by GPU family and by GPU (percent of the measured
time)."""

from __future__ import annotations

from typing import Any

ROLES = ("calibration", "evaluation")
"""A case's roles (:mod:`sim.validation.cases`)."""


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Error statistics of all cases (``all``), of each role (``calibration``,
    ``evaluation``), and of each role's cases by source (``<role>_by_source``: source line →
    statistics, in file order), by GPU family (``<role>_by_gpu_family``: ``A100``,
    ``H100``, …) and by GPU (``<role>_by_gpu``: the catalogue name, e.g. ``GB200`` and
    ``GB300`` of the ``B200`` family), in percent of the measured time; each group's
    ``cases`` is its count."""

    def stats(group: list[dict[str, Any]]) -> dict[str, float]:
        errs = [r["error_pct"] for r in group]
        if not errs:
            return {"cases": 0}
        return {"cases": len(errs),
                "mean_abs_error_pct": sum(abs(e) for e in errs) / len(errs),
                "mean_error_pct": sum(errs) / len(errs),
                "max_abs_error_pct": max(abs(e) for e in errs)}

    def by(group: list[dict[str, Any]], key) -> dict[str, Any]:
        return {k: stats([r for r in group if key(r) == k])
                for k in dict.fromkeys(key(r) for r in group)}

    out = {"all": stats(rows), **{role: stats([r for r in rows if r["role"] == role])
                                  for role in ROLES}}
    for role in ROLES:
        group = [r for r in rows if r["role"] == role]
        out[f"{role}_by_source"] = by(group, lambda r: r["source"])
        out[f"{role}_by_gpu_family"] = by(group, gpu_family)
        out[f"{role}_by_gpu"] = by(group, lambda r: r["gpu"])
    return out


def gpu_family(row: dict[str, Any]) -> str:
    """A row's GPU family (the GPU catalogue's, e.g. ``H100``; else the name's first part)."""
    return row.get("gpu_family") or row["gpu"].split("-")[0]

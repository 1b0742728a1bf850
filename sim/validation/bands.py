"""Accuracy bands of the shipped validation cases: each case's error (percent, predicted vs
measured, as ``simrun validate`` prints it) recorded in a data file, and the check that a run
stays within a stated margin of it (docs/validation.md, "Accuracy bands").

The data file (``tests/data/validation_bands.json``) is written by ``python
scripts/validation_bands.py --write`` from a run of every shipped case; the test suite
(tests/test_validation_bands.py) runs each case again and fails, naming the case with its
recorded and new error, where the two differ by more than the margin. A change meant to move
cases regenerates the file and says so in its commit: the file's diff is the change's effect
on every case.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.validation.cases import Case, default_files, load_cases

#: the margin, in percentage points of error, a case may move before a test fails: wide
#: enough for floating-point noise across platforms (none is expected: runs are
#: deterministic), narrow enough that a change of one mechanism that moves a case by a few
#: percent of its iteration time is seen and named
MARGIN_PCT = 3.0
SCHEMA = "simrun.validation-bands/1"
COMMAND = "python scripts/validation_bands.py --write"


def shipped_cases() -> dict[str, Case]:
    """Every case of the shipped validation files, by name (names are unique across the files:
    the bands file and ``simrun validate``'s rows are keyed by them), in file order."""
    out: dict[str, Case] = {}
    for f in default_files():
        for c in load_cases(f)[1]:
            if c.name in out:
                raise ValueError(f"{f}: case name {c.name!r} is used by another shipped case")
            out[c.name] = c
    return out


def bands_document(rows: dict[str, dict[str, Any]], margin: float = MARGIN_PCT) -> dict:
    """The bands file's content for ``rows`` (key → ``run_case`` row)."""
    return {"schema": SCHEMA, "written_by": COMMAND, "margin_pct": margin,
            "cases": {k: {"role": r["role"], "gpu": r["gpu"],
                          "error_pct": round(r["error_pct"], 2)} for k, r in rows.items()}}


def read_bands(path: Path) -> dict[str, Any]:
    """The bands file at ``path`` (a JSON mapping with ``margin_pct`` and ``cases``)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} file")
    return data


def band_problem(key: str, recorded: float | None, new: float, margin: float) -> str | None:
    """Why a case's ``new`` error breaks its band (``None`` if it does not)."""
    if recorded is None:
        return (f"{key}: no band recorded (new error {new:+.2f}%); run {COMMAND} and "
                "commit the file")
    if abs(new - recorded) > margin:
        return (f"{key}: error moved from {recorded:+.2f}% to {new:+.2f}% "
                f"({new - recorded:+.2f} points, band ±{margin:g}); if the change is meant, "
                f"run {COMMAND} and say so in the commit")
    return None


def coverage_problems(recorded: set[str], shipped: set[str]) -> list[str]:
    """Cases shipped without a band and bands of cases no longer shipped."""
    return ([f"{k}: shipped case without a band" for k in sorted(shipped - recorded)]
            + [f"{k}: band of a case that is not shipped" for k in sorted(recorded - shipped)])

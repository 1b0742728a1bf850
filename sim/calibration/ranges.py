"""The range every prediction carries (docs/calibration.md, "Ranges").

A prediction ``t`` whose model errs by ``e`` percent on measured runs like it
(``e = (predicted − measured) / measured``) stands for a measured time between
``t / (1 + e_max/100)`` and ``t / (1 + e_min/100)``. The errors come from:

- the calibration profile's residuals (``range_pct``, widened by the spread of the measured
  iteration times: :mod:`sim.cli.calibrate`), when the run is calibrated;
- otherwise (no profile, or one fitted on no measured iteration: nccl-tests alone) the
  uncalibrated validation error of the nearest source class, GPU family and
  dense or mixture-of-experts (``sim/data/calibration/error_bands.yaml``, written by
  ``scripts/calibration_bands.py`` from ``simrun validate --json``: the smallest and largest
  signed error of the evaluation cases of that class); a GPU family with no validation case
  takes the widest band over every class, said so.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sim.kernels.gpus import find

BANDS = "error_bands.yaml"


@lru_cache(maxsize=1)
def bands() -> dict[str, Any]:
    """The shipped error bands (class name → {cases, min_error_pct, max_error_pct})."""
    text = (resources.files("sim") / "data" / "calibration" / BANDS).read_text("utf-8")
    # libyaml's parser where PyYAML has it (same safe constructors, same data; ~5x faster)
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def class_of(gpu_name: str, moe: bool) -> str:
    """The source class of a run: ``<GPU family> dense`` or ``<GPU family> MoE``."""
    entry = find(gpu_name)
    family = entry.family if entry is not None else gpu_name
    return f"{family} {'MoE' if moe else 'dense'}"


def prediction_range(predicted_s: float, gpu_name: str, moe: bool,
                     profile=None) -> dict[str, Any]:
    """``{low_s, high_s, error_pct: [min, max], basis}`` for a prediction of ``predicted_s``."""
    if profile is not None and profile.residuals:
        lo, hi = profile.range_pct
        basis = (f"residuals of {len(profile.residuals)} calibration run(s) of "
                 f"{Path(profile.path).name or 'the profile'}, spread included")
    else:
        data = bands()
        name = class_of(gpu_name, moe)
        c = data["classes"].get(name)
        if c is None:
            lo = min(x["min_error_pct"] for x in data["classes"].values())
            hi = max(x["max_error_pct"] for x in data["classes"].values())
            basis = f"no validated {name} run: the widest band of all classes ({BANDS})"
        else:
            lo, hi = c["min_error_pct"], c["max_error_pct"]
            basis = f"validation error of {c['cases']} {name} runs, uncalibrated ({BANDS})"
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    return {"low_s": predicted_s / (1 + hi / 100), "high_s": predicted_s / (1 + lo / 100),
            "error_pct": [lo, hi], "basis": basis}


def range_line(r: dict[str, Any]) -> str:
    """The report's line of a range."""
    return (f"{r['low_s']:.4g} .. {r['high_s']:.4g} s per iteration (model error "
            f"{r['error_pct'][0]:+.1f}% .. {r['error_pct'][1]:+.1f}%: {r['basis']})")

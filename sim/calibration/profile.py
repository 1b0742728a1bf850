"""Calibration profiles: the knobs ``simrun calibrate`` fitted, with their provenance
(docs/calibration.md, "Calibrating to your own stack").

A profile is a YAML file (``schema: simrun.calibration/1``)::

    schema: simrun.calibration/1
    gpu: H100-SXM5-80GB            # the GPU the measurements ran on (topology's node.gpu.name)
    topology: dgx-h100             # the topology's name
    stack: NeMo 25.02              # what the measurements say of the software, or "unknown"
    knobs:                         # the fitted knobs only (the others stay neutral)
      gemm_efficiency_scale: {value: 0.93, measurement: "<what it was fitted on>"}
    not_identified: [attention_scale, ...]   # knobs the data could not identify, with why
    inputs:                        # every measurement file, with its SHA-256
      - {path: runs.yaml, sha256: <hex>, what: validation-format measured runs}
    residuals:                     # each run after the fit, in percent of the measured time
      - {run: <name>, measured_s: 1.2, predicted_s: 1.19, error_pct: -0.8}
    range_pct: [-0.8, 0.8]         # the range a prediction under this profile carries
    network_curves:                # from nccl-tests: measured / modelled time by size
      - {op: allreduce, ranks: 16, sizes: [1048576, ...], factors: [1.04, ...],
         measurement: "<file and lines>"}

Every key is checked (unknown ones refused with file, line and key); a knob outside its bounds
(:mod:`sim.calibration.knobs`) is refused. A profile applies to the GPU and topology it was
made on; :func:`check_applies` refuses another unless overridden, saying why.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from sim.assumption import Assumption
from sim.calibration.knobs import SPEC, Knobs, calibrated_topology, out_of_bounds
from sim.errors import InputError, UsageError
from sim.files.inputs import read_bytes, read_text
from sim.files.outputs import atomic_write
from sim.files.yaml_load import load_yaml_with_lines

SCHEMA = "simrun.calibration/1"
KEYS = ("schema", "gpu", "topology", "stack", "knobs", "not_identified", "inputs", "residuals",
        "range_pct", "network_curves")
MAX_CURVE_SIZES = 64
MAX_ITEMS = 10_000


@dataclass(frozen=True)
class Profile:
    """A read or fitted profile. ``measurements``: knob → what it was fitted on;
    ``range_pct``: (low, high) error band of a prediction made with it, in percent."""

    gpu: str
    topology: str
    knobs: Knobs
    measurements: dict[str, str]
    stack: str = "unknown"
    not_identified: tuple[str, ...] = ()
    inputs: tuple[dict[str, str], ...] = ()
    residuals: tuple[dict[str, Any], ...] = ()
    range_pct: tuple[float, float] = (0.0, 0.0)
    curves: tuple = ()  # sim.network.curves.TimeCurve, from nccl-tests
    path: str = ""
    lines: dict[str, int] = field(default_factory=dict)

    def assumptions(self) -> list[str]:
        """One assumption line per calibrated knob, naming the measurement it came from."""
        where = self.path or "calibration profile"
        out = [Assumption(f"calibrated ({where}): {name} = {value:.4g}"
                          f"{' ' + SPEC[name].unit if SPEC[name].unit else ''}, fitted on "
                          f"{self.measurements.get(name, 'unnamed measurements')}; "
                          f"{SPEC[name].means}", "calibration")
               for name, value in self.knobs.changed().items()]
        out += [Assumption(f"calibrated ({where}): {c.describe()}", "calibration")
                for c in self.curves]
        if not out:
            out.append(Assumption(f"calibrated ({where}): every knob at its neutral value "
                                  "(the measurements matched the uncalibrated model)",
                                  "calibration"))
        return out


def sha256_of(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes (read within :func:`read_bytes`' bounds)."""
    return hashlib.sha256(read_bytes(path)).hexdigest()


def profile_data(p: Profile) -> dict[str, Any]:
    """The YAML mapping of ``p`` (keys in schema order)."""
    return {
        "schema": SCHEMA, "gpu": p.gpu, "topology": p.topology, "stack": p.stack,
        "knobs": {k: {"value": round(v, 6), "measurement": p.measurements.get(k, "")}
                  for k, v in p.knobs.changed().items()},
        "not_identified": list(p.not_identified),
        "inputs": [dict(i) for i in p.inputs],
        "residuals": [dict(r) for r in p.residuals],
        "range_pct": [round(p.range_pct[0], 4), round(p.range_pct[1], 4)],
        **({"network_curves": [{"op": c.op, "ranks": c.ranks, "sizes": list(c.sizes),
                                "factors": [round(f, 6) for f in c.factors],
                                "measurement": c.source} for c in p.curves]}
           if p.curves else {}),
    }


def write_profile(p: Profile, path: str | Path, flag: str = "--out") -> None:
    """Write ``p`` as YAML, atomically (same profile, same bytes)."""
    text = yaml.safe_dump(profile_data(p), sort_keys=False, allow_unicode=True, width=100)
    atomic_write(path, lambda f: f.write(text), flag=flag)


def load_profile(path: str | Path, flag: str = "--calibration") -> Profile:
    """Read and check a profile; :class:`InputError` names the file, line and key."""
    fname = str(path)
    text = read_text(path, what="calibration profile", flag=flag)
    data, lines = load_yaml_with_lines(text, fname)

    def fail(msg: str, at: tuple, key: str) -> None:
        raise InputError(msg, file=fname, line=lines.get(at), field=key)

    if not isinstance(data, dict):
        fail("expected a mapping (a simrun calibration profile)", (), "schema")
    for k in data:
        if k not in KEYS:
            fail(f"unknown key (allowed: {', '.join(KEYS)})", (k,), str(k))
    if data.get("schema") != SCHEMA:
        fail(f"expected {SCHEMA!r}", ("schema",), "schema")
    for k in ("gpu", "topology"):
        if not isinstance(data.get(k), str) or not data[k]:
            fail("required: a name", (k,), k)
    knobs, measured = _knobs(data.get("knobs") or {}, fail)
    lo, hi = _range(data.get("range_pct", [0.0, 0.0]), fail)
    listed = {k: data.get(k) or [] for k in ("not_identified", "inputs", "residuals")}
    for k, v in listed.items():
        if not isinstance(v, list) or len(v) > MAX_ITEMS:
            fail(f"expected a list of at most {MAX_ITEMS} items", (k,), k)
    return Profile(gpu=data["gpu"], topology=data["topology"], knobs=knobs,
                   measurements=measured, stack=str(data.get("stack") or "unknown"),
                   not_identified=tuple(str(x) for x in listed["not_identified"]),
                   inputs=tuple(listed["inputs"]), residuals=tuple(listed["residuals"]),
                   range_pct=(lo, hi), curves=_curves(data.get("network_curves") or [], fail),
                   path=fname,
                   lines={k: lines.get((k,)) for k in ("gpu", "topology")})


def _knobs(raw: Any, fail) -> tuple[Knobs, dict[str, str]]:
    if not isinstance(raw, dict):
        fail("expected a mapping of knob name to {value, measurement}", ("knobs",), "knobs")
    knobs, measured = Knobs(), {}
    for name, entry in raw.items():
        at, key = ("knobs", name), f"knobs.{name}"
        if name not in SPEC:
            fail(f"unknown knob (known: {', '.join(SPEC)})", at, key)
        if not isinstance(entry, dict) or set(entry) - {"value", "measurement"}:
            fail("expected {value: NUMBER, measurement: TEXT}", at, key)
        v = entry.get("value")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            fail(f"expected a number, got {v!r}", at + ("value",), key + ".value")
        problem = out_of_bounds(name, float(v))
        if problem:
            fail(problem, at + ("value",), key + ".value")
        knobs = knobs.with_value(name, float(v))
        measured[name] = str(entry.get("measurement") or "")
    return knobs, measured


def _curves(raw: Any, fail) -> tuple:
    """``network_curves``: each ``{op, ranks, sizes, factors, measurement}`` checked (sizes
    ascending positive integers, one factor each within the curve bounds)."""
    from sim.network.curves import CURVE_OPS, FACTOR_BOUNDS, TimeCurve

    if not isinstance(raw, list) or len(raw) > MAX_ITEMS:
        fail(f"expected a list of at most {MAX_ITEMS} curves", ("network_curves",),
             "network_curves")
    out = []
    for i, c in enumerate(raw):
        at, key = ("network_curves", i), f"network_curves[{i}]"
        if not isinstance(c, dict) or set(c) != {"op", "ranks", "sizes", "factors",
                                                 "measurement"}:
            fail("expected {op, ranks, sizes, factors, measurement}", at, key)
        if c["op"] not in CURVE_OPS:
            fail(f"unknown collective (known: {', '.join(CURVE_OPS)})", at + ("op",),
                 key + ".op")
        r, sz, fs = c["ranks"], c["sizes"], c["factors"]
        if isinstance(r, bool) or not isinstance(r, int) or r < 2:
            fail("expected a rank count of at least 2", at + ("ranks",), key + ".ranks")
        ints = isinstance(sz, list) and 0 < len(sz) <= MAX_CURVE_SIZES and all(
            isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in sz)
        if not ints or any(a >= b for a, b in zip(sz, sz[1:], strict=False)):
            fail(f"expected 1 to {MAX_CURVE_SIZES} ascending positive byte counts",
                 at + ("sizes",), key + ".sizes")
        lo, hi = FACTOR_BOUNDS
        ok = isinstance(fs, list) and len(fs) == len(sz) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and lo <= x <= hi
            for x in fs)
        if not ok:
            fail(f"expected one factor per size, each within {lo:g}..{hi:g}",
                 at + ("factors",), key + ".factors")
        out.append(TimeCurve(c["op"], r, tuple(sz), tuple(float(x) for x in fs),
                             str(c["measurement"])))
    return tuple(out)


def _range(raw: Any, fail) -> tuple[float, float]:
    ok = (isinstance(raw, list) and len(raw) == 2
          and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                  for x in raw) and raw[0] <= raw[1])
    if not ok:
        fail("expected [low, high] in percent, low <= high", ("range_pct",), "range_pct")
    return float(raw[0]), float(raw[1])


def check_applies(p: Profile, *, gpu: str | None = None, topology: str | None = None,
                  override: bool = False) -> list[str]:
    """Refuse ``p`` for a run on another GPU or topology (:class:`UsageError` naming
    ``--calibration``), unless ``override``: then the WARNING lines saying what differs."""
    notes = []
    for what, mine, theirs in (("GPU", p.gpu, gpu), ("topology", p.topology, topology)):
        if theirs is None or mine == theirs:
            continue
        why = (f"the profile {p.path} was calibrated on {what} {mine!r}, this run's is "
               f"{theirs!r}: its knobs are properties of that {what}'s stack")
        if not override:
            raise UsageError(why + " (--calibration-any-cluster uses it anyway)",
                             field="calibration")
        notes.append(Assumption(f"WARNING: {why}; used anyway (--calibration-any-cluster)",
                                "calibration", departs=True))
    return notes


def apply_to_topology(topo, profile: Profile | None, override: bool = False):
    """``topo`` under ``profile``'s network knob (the same object without a profile or at
    factor 1); a profile of another topology is refused unless ``override`` (then said among
    the topology's warnings)."""
    if profile is None:
        return topo
    if not override:  # the GPU first (the compute model says so again with its notes)
        check_applies(profile, gpu=topo.gpu.name)
    notes = check_applies(profile, topology=topo.name, override=override)
    topo = calibrated_topology(topo, profile.knobs.network_busbw_factor)
    if profile.curves:
        topo = replace(topo, collectives=replace(topo.collectives, time_curves=profile.curves))
    if notes:
        topo = replace(topo, warnings=(*topo.warnings, *(n.removeprefix("WARNING: ")
                                                         for n in notes)))
    return topo

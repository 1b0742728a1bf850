"""nccl-tests output (``all_reduce_perf`` and friends) as a measurement of the network.

Reads the standard table nccl-tests prints (NVIDIA/nccl-tests ``src/common.cu``): a header line
``#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong``
(``root`` absent in some versions), a units line, then one row per size whose first
``time``/``algbw``/``busbw`` are the out-of-place run (µs, GB/s). The collective comes from
``# Collective test starting: all_reduce_perf`` (or ``--op``), the ranks from the
``#  Rank  N Group ... device ... <GPU name>`` lines (or ``--gpus``), the GPU from those lines.
A launcher's prefix before a row (``[1,0]<stdout>:``) is ignored: a row is the last tokens of
its line. Every problem names the file, line and column.

:func:`fit_network` fits ``network_busbw_factor`` (:mod:`sim.calibration.knobs`) to the
bandwidth-bound rows (busbw at least 90% of the largest measured) and gives, for every size, the
measured over the predicted bus bandwidth (the efficiency by size) before and after the fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sim.calibration.fit import Fit, MeasuredRun, fit_knobs
from sim.calibration.knobs import Knobs, calibrated_topology
from sim.errors import InputError
from sim.files.inputs import read_text, split_lines
from sim.kernels.gpus import find
from sim.limits import parse_float, parse_int
from sim.network.predict import predict_rows
from sim.scenario import NetworkOptions, network_of

MAX_ROWS = 10_000
#: rows whose busbw reaches this fraction of the largest measured are fitted (the others are
#: latency-bound: the bus-bandwidth factor hardly moves them). 0.9: a ring's curve reaches 0.8
#: of its peak while NCCL's latency is still ~12 % of the time (8 A100, 64 MB), which would bias
#: the factor; at 0.9 the latency share is under ~5 %.
BANDWIDTH_BOUND = 0.9
#: the columns a row must have (the first time/algbw/busbw are the out-of-place run's)
NEEDED = ("size", "count", "type", "time", "algbw", "busbw")
#: nccl-tests binary name (without ``_perf``) → ``simrun collective --op`` name
OPS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
       "alltoall": "alltoall", "broadcast": "broadcast", "sendrecv": "sendrecv"}
_TEST = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_RANK = re.compile(r"#\s*Rank\s+(\d+)\s.*\bdevice\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    time_us: float
    busbw_GBps: float
    line: int


@dataclass(frozen=True)
class NcclTests:
    """One nccl-tests output: collective (``simrun collective --op`` name or ``None``),
    ranks (``None``: not printed), GPU name as printed (or ``None``), rows, file."""

    op: str | None
    ranks: int | None
    gpu: str | None
    rows: tuple[NcclRow, ...]
    file: str


def read_nccl_tests(path: str | Path) -> NcclTests:
    return parse_nccl_tests(read_text(path, what="nccl-tests output"), str(path))


def parse_nccl_tests(text: str, file: str) -> NcclTests:
    """Parse nccl-tests' output ``text`` (``file`` names it in errors)."""
    op, ranks, gpu, cols, rows = None, set(), None, None, []
    for no, line in enumerate(split_lines(text), 1):
        m = _TEST.search(line)
        if m:
            if m.group(1) not in OPS:
                raise InputError(f"collective {m.group(1)}_perf is not one simrun predicts "
                                 f"(known: {', '.join(k + '_perf' for k in OPS)})", file=file,
                                 line=no, field="collective")
            op = OPS[m.group(1)]
        m = _RANK.search(line)
        if m:
            ranks.add(int(m.group(1)))
            gpu = gpu or m.group(2)
        body = line.split("#", 1)[1].split() if "#" in line else []
        if "size" in body and "busbw" in body:
            cols = _header(body, file, no)
            continue
        if cols is None or line.lstrip().startswith("#") or not line.strip():
            continue
        row = _row(line.split(), cols, file, no)
        if row is not None:
            rows.append(row)
            if len(rows) > MAX_ROWS:
                raise InputError(f"more than {MAX_ROWS} rows", file=file, line=no)
    if cols is None:
        raise InputError("no nccl-tests table header (a line '#  size  count  type ... time  "
                         "algbw  busbw ...')", file=file, field="header")
    if not rows:
        raise InputError("the nccl-tests table has no rows", file=file, field="rows")
    return NcclTests(op, len(ranks) or None, gpu, tuple(rows), file)


def _header(tokens: list[str], file: str, no: int) -> dict[str, int]:
    missing = [c for c in NEEDED if c not in tokens]
    if missing:
        raise InputError(f"the table header lacks column(s) {', '.join(missing)}", file=file,
                         line=no, field="header")
    return {"n": len(tokens), **{c: tokens.index(c) for c in NEEDED}}


def _row(tokens: list[str], cols: dict[str, int], file: str, no: int) -> NcclRow | None:
    """The row of a data line, ``None`` for a line that is not one (NCCL INFO output)."""
    n = cols["n"]
    if len(tokens) >= n:
        tokens = tokens[-n:]
    elif tokens and tokens[0].isdigit() and parse_int(tokens[0]) is not None:
        raise InputError(f"a row of {len(tokens)} columns, the header has {n} (a missing "
                         "column)", file=file, line=no, field="row")
    if parse_int(tokens[cols["size"]]) is None:
        return None
    size = parse_int(tokens[cols["size"]])
    t, bw = parse_float(tokens[cols["time"]]), parse_float(tokens[cols["busbw"]])
    for name, v in (("time", t), ("busbw", bw)):
        if v is None or v < 0:
            raise InputError(f"expected a number >= 0, got {tokens[cols[name]]!r}", file=file,
                             line=no, field=name)
    return NcclRow(size, t, bw, no)


def check_gpu(tests: NcclTests, topo_gpu: str, what: str = "nccl-tests output") -> None:
    """Refuse a measurement made on another GPU than the topology's (by catalogue entry)."""
    if tests.gpu is None:
        return
    mine = find(tests.gpu) or find(tests.gpu.removeprefix("NVIDIA "))
    theirs = find(topo_gpu)
    if mine is not None and theirs is not None and mine is not theirs:
        line = next((no for no, ln in enumerate(split_lines(read_text(tests.file)), 1)
                     if tests.gpu in ln), None)
        raise InputError(f"the {what} was measured on {tests.gpu} ({mine.name}), the "
                         f"topology's GPU is {theirs.name}", file=tests.file, line=line,
                         field="device")


def bandwidth_bound(tests: NcclTests) -> list[NcclRow]:
    """The rows whose busbw is at least :data:`BANDWIDTH_BOUND` of the largest measured."""
    top = max(r.busbw_GBps for r in tests.rows)
    return [r for r in tests.rows if r.busbw_GBps >= BANDWIDTH_BOUND * top and r.busbw_GBps > 0]


def _predict_us(topo, op: str, ranks: int, size: int, knobs: Knobs) -> float:
    net = network_of(calibrated_topology(topo, knobs.network_busbw_factor), NetworkOptions())
    return predict_rows(op, ranks, [size], net)[0]["time_s"] * 1e6


def fit_network(tests: NcclTests, topo, op: str, ranks: int) -> tuple[Fit, list[dict]]:
    """Fit ``network_busbw_factor`` to the bandwidth-bound rows; returns the fit and, per
    size, measured and predicted times (µs) and the efficiency measured / predicted busbw
    (= predicted / measured time) uncalibrated and calibrated."""
    runs = [MeasuredRun(f"{r.size_bytes} B", r.time_us * 1e-6,
                        lambda k, s=r.size_bytes: _predict_us(topo, op, ranks, s, k) * 1e-6,
                        f"{tests.file} line {r.line}") for r in bandwidth_bound(tests)]
    fit = fit_knobs(runs, candidates=["network_busbw_factor"])
    table = []
    for r in tests.rows:
        before = _predict_us(topo, op, ranks, r.size_bytes, Knobs())
        after = _predict_us(topo, op, ranks, r.size_bytes, fit.knobs)
        table.append({"size_bytes": r.size_bytes, "measured_us": r.time_us,
                      "predicted_us": before, "calibrated_us": after,
                      "efficiency": before / r.time_us if r.time_us else 0.0,
                      "calibrated_efficiency": after / r.time_us if r.time_us else 0.0})
    return fit, table


def time_curve(tests: NcclTests, topo, knobs: Knobs) -> tuple[object | None, list[str]]:
    """The measured / modelled time of each measured size (the model under ``knobs``, without
    the launch overhead the test's back-to-back iterations hide) as a
    :class:`~sim.network.curves.TimeCurve`, and a note per size left out: a factor outside
    :data:`~sim.network.curves.FACTOR_BOUNDS`, or a repeated size. ``None`` for a collective
    not calibrated by size (``sendrecv``)."""
    from sim.network.curves import CURVE_OPS, FACTOR_BOUNDS, TimeCurve

    assert tests.op is not None and tests.ranks is not None
    if tests.op not in CURVE_OPS:
        return None, [f"{tests.file}: {tests.op} is not calibrated by size (its bus-bandwidth "
                      "factor applies)"]
    net = network_of(calibrated_topology(topo, knobs.network_busbw_factor), NetworkOptions())
    rows = [r for r in tests.rows if r.time_us > 0]
    sizes = sorted({r.size_bytes for r in rows})
    predicted = {p["size_bytes"]: p["time_s"] * 1e6
                 for p in predict_rows(tests.op, tests.ranks, sizes, net)}
    lo, hi = FACTOR_BOUNDS
    keep: dict[int, tuple[float, int]] = {}
    notes = []
    for r in rows:
        k = r.time_us / predicted[r.size_bytes]
        if r.size_bytes in keep:
            notes.append(f"{tests.file} line {r.line}: {r.size_bytes} B measured again; the "
                         f"first row (line {keep[r.size_bytes][1]}) is used")
        elif not lo <= k <= hi:
            notes.append(f"{tests.file} line {r.line}: {r.size_bytes} B measured / modelled "
                         f"{k:.3f}, outside {lo:g}..{hi:g}: left out of the curve")
        else:
            keep[r.size_bytes] = (k, r.line)
    if not keep:
        return None, notes
    s = sorted(keep)
    lines = sorted(v[1] for v in keep.values())
    return TimeCurve(tests.op, tests.ranks, tuple(s), tuple(keep[x][0] for x in s),
                     f"nccl-tests {tests.file} lines {lines[0]}-{lines[-1]}"), notes

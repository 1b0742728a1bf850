"""Reader for per-operator workload tables (NeuSight-style, tab-separated, with a header row).

Columns (by header name, any order): ``name, forward_compute_time, forward_comm_type,
forward_comm_size, backward_compute_time, backward_comm_type, backward_comm_size,
weight_grad_compute_time, weight_grad_comm_type, weight_grad_comm_size[, process_time]``.

Units: compute times in MILLISECONDS (converted to integer ns, rounded to nearest); comm sizes
in ELEMENTS, converted to bytes with ``bytes_per_element`` (default 4: PyTorch DDP with AMP
keeps fp32 gradients; override with ``--bytes-per-element``). ``process_time`` is in ms too.

``ALLREDUCE_ASYNC`` is the data-parallel gradient all-reduce of a parameter, issued
asynchronously during backward (non-blocking, DP group) whichever column it is in. Other comm
types follow the AICB rule (forward / backward columns: TP group, blocking; weight-grad column:
DP group, non-blocking).

Missing backward: if every backward and weight-gradient compute time is 0 while forward times
are not, the generator did not predict them. simrun then applies a stated rule (never a free
backward): input-gradient = weight-gradient = ``backward_ratio / 2`` × forward per row
(default ratio 2.0, i.e. backward = 2 × forward; ``--missing-backward-ratio``).
"""

from __future__ import annotations

import math

from sim.assumption import Assumption
from sim.comm import Comm, GroupKind
from sim.errors import InputError
from sim.files.inputs import INT64_MAX, split_lines
from sim.program.workload import Layer, Phase, Workload, WorkloadHeader
from sim.workload.aicb import parse_comm_type

REQUIRED = (
    "name",
    "forward_compute_time", "forward_comm_type", "forward_comm_size",
    "backward_compute_time", "backward_comm_type", "backward_comm_size",
    "weight_grad_compute_time", "weight_grad_comm_type", "weight_grad_comm_size",
)  # fmt: skip
OPTIONAL = ("process_time",)
DEFAULT_BYTES_PER_ELEMENT = 4
DEFAULT_BACKWARD_RATIO = 2.0


def sniff(text: str) -> bool:
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    return "forward_compute_time" in first and "name" in first


def _ms_to_ns(tok: str, *, file: str, line: int, field: str) -> int:
    try:
        ms = float(tok) if tok.isascii() else math.nan
    except ValueError:
        raise InputError(f"expected a time in ms, got {tok[:40]!r}", file=file, line=line,
                         field=field) from None
    if not math.isfinite(ms) or ms < 0:
        raise InputError(f"must be a finite time ≥ 0 ms, got {tok[:40]}", file=file, line=line,
                         field=field)
    ns = ms * 1e6
    if ns > INT64_MAX:
        raise InputError(f"{tok[:40]} ms exceeds 2^63−1 ns", file=file, line=line, field=field)
    return int(round(ns))


def _elements(tok: str, *, file: str, line: int, field: str) -> int:
    try:
        f = float(tok) if tok.isascii() else math.nan
    except ValueError:
        raise InputError(f"expected an element count, got {tok[:40]!r}", file=file, line=line,
                         field=field) from None
    if not math.isfinite(f) or f < 0 or f != int(f):
        raise InputError(f"must be a whole element count ≥ 0, got {tok[:40]}", file=file,
                         line=line, field=field)
    if f > INT64_MAX:
        raise InputError(f"{tok[:40]} exceeds 2^63−1", file=file, line=line, field=field)
    t = tok.strip().lstrip("+")
    return int(t) if t.isdigit() else int(f)


def _comm(ctype: str, elements: int, default_group: GroupKind, bpe: int, post_ns: int,
          file: str, line: int, field: str) -> Comm | None:
    t = ctype.strip()
    asynchronous = t.upper().endswith("_ASYNC")
    if asynchronous:
        t = t[: -len("_ASYNC")]
    parsed = parse_comm_type(t, default_group, file=file, line=line, field=field)
    if parsed is None or elements == 0:
        return None
    kind, group = parsed
    if asynchronous:
        group = GroupKind.DP if group not in (GroupKind.DP, GroupKind.DP_EP) else group
    blocking = group not in (GroupKind.DP, GroupKind.DP_EP)
    if elements * bpe > INT64_MAX:
        raise InputError(f"{elements} elements × {bpe} bytes exceeds 2^63−1 bytes", file=file,
                         line=line, field=field.replace("_type", "_size"))
    return Comm(kind, group, elements * bpe, blocking, post_ns)


def read_optable(
    text: str,
    file: str,
    *,
    bytes_per_element: int = DEFAULT_BYTES_PER_ELEMENT,
    backward_ratio: float = DEFAULT_BACKWARD_RATIO,
) -> Workload:
    """Parse an operator table into a :class:`Workload` (times → ns, elements → bytes)."""
    col, rows = _table(split_lines(text.lstrip("\ufeff")), file)

    def ns(cols: list[str], line: int, name: str) -> int:
        return _ms_to_ns(cols[col[name]], file=file, line=line, field=name)

    parsed = []
    for line, cols in rows:
        post = ns(cols, line, "process_time") if "process_time" in col else 0
        phases = []
        for prefix, group in (("forward", GroupKind.TP), ("backward", GroupKind.TP),
                              ("weight_grad", GroupKind.DP)):
            t = ns(cols, line, f"{prefix}_compute_time")
            elems = _elements(cols[col[f"{prefix}_comm_size"]], file=file, line=line,
                              field=f"{prefix}_comm_size")
            c = _comm(cols[col[f"{prefix}_comm_type"]], elems, group, bytes_per_element, post,
                      file, line, f"{prefix}_comm_type")
            phases.append((t, c))
        parsed.append((line, cols[col["name"]], phases))

    assumptions = [
        Assumption("operator table units: compute times in ms (converted to ns), comm sizes in "
                   f"elements × {bytes_per_element} bytes per element (--bytes-per-element)",
                   "optable-units"),
        "ALLREDUCE_ASYNC = asynchronous data-parallel gradient all-reduce, overlapped with "
        "backward",
    ]
    total_fwd = sum(p[0][0] for _, _, p in parsed)
    total_bwd = sum(p[1][0] + p[2][0] for _, _, p in parsed)
    fill = total_bwd == 0 and total_fwd > 0
    if fill:
        if not (backward_ratio > 0 and math.isfinite(backward_ratio)):
            raise InputError(f"must be > 0, got {backward_ratio}", field="missing_backward_ratio")
        assumptions.append(Assumption(
            f"every backward and weight-grad time in the file is 0 (not predicted): using "
            f"input-grad = weight-grad = {backward_ratio / 2:g} × forward per operator "
            f"(backward = {backward_ratio:g} × forward; --missing-backward-ratio)",
            "missing-backward"))
    layers = [_layer(line, name, phases, backward_ratio if fill else None)
              for line, name, phases in parsed]
    return Workload(path=file, format="optable", header=WorkloadHeader(), layers=layers,
                    assumptions=assumptions)


def _table(lines: list[str], file: str) -> tuple[dict[str, int], list[tuple[int, list[str]]]]:
    """Column index of every header name, and the non-blank rows as (1-based line, cells);
    checks the header's columns and every row's column count."""
    if not lines or not lines[0].strip():
        raise InputError("empty file (expected a header row)", file=file, line=1, field="header")
    sep = "\t" if "\t" in lines[0] else None
    header = [h.strip() for h in lines[0].split(sep)]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(f"header lacks column(s) {', '.join(missing)}", file=file, line=1,
                         field="header")
    unknown = [c for c in header if c not in REQUIRED and c not in OPTIONAL]
    if unknown:
        raise InputError(f"unknown column(s) {', '.join(unknown)}", file=file, line=1,
                         field="header")
    rows: list[tuple[int, list[str]]] = []
    for idx in range(1, len(lines)):
        if not lines[idx].strip():
            continue
        cols = [c.strip() for c in lines[idx].split(sep)]
        if len(cols) != len(header):
            raise InputError(f"expected {len(header)} columns, found {len(cols)}", file=file,
                             line=idx + 1, field="row")
        rows.append((idx + 1, cols))
    if not rows:
        raise InputError("no operator rows after the header", file=file, line=1, field="rows")
    return {name: i for i, name in enumerate(header)}, rows


def _layer(line: int, name: str, phases: list, backward_ratio: float | None) -> Layer:
    """One operator row as a layer; ``backward_ratio`` (when the file has no backward times):
    input-grad = weight-grad = ratio / 2 × forward."""
    (tf, cf), (tb, cb), (tw, cw) = phases
    if backward_ratio is not None:
        half = tf * backward_ratio / 2
        if not half <= INT64_MAX:
            raise InputError(f"{backward_ratio:g} × the forward time of line {line} exceeds "
                             "2^63−1 ns", field="missing_backward_ratio")
        tb = tw = int(round(half))
    return Layer(name, Phase(tf, cf), Phase(tb, cb), Phase(tw, cw), line=line)

"""Kernel tables: measured operator times of one GPU (format: docs/kernel-tables.md).

A table is a CSV file. Lines starting with ``#`` are comments; ``# key: value`` comments before
the header row are metadata (``gpu`` is required, ``source`` and ``date`` say where the numbers
come from). The header names the columns; ``kind`` and ``time_ms`` are required on every row,
the shape columns a kind needs (:data:`SHAPE_FIELDS`) are required on its rows and must be
positive integers; other cells may be empty. Unknown kinds and unknown columns are errors.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from sim.errors import InputError
from sim.files.catalog import resolve
from sim.files.inputs import decode_text, read_bytes, show, split_lines
from sim.files.outputs import atomic_write
from sim.kernels.gpus import find
from sim.limits import parse_float, parse_int

ATTN_BACKENDS = ("flash", "cudnn", "efficient")  # PyTorch SDPA backends as measured
#: ``gemm_<dtype>``: output in the 16-bit activation dtype, no accumulation (fp8: Transformer
#: Engine's split accumulator, ``use_split_accumulator=True``, as its dgrad and wgrad GEMMs run);
#: ``gemm_fp8_fastacc``: fp8 with fast accumulation (TE's forward GEMMs, ``_2X_ACC_FPROP =
#: False``); ``gemm_<dtype>_acc32``: a weight-gradient GEMM written in fp32 into the main-grad
#: buffer (Megatron's gradient-accumulation fusion; docs/kernel-tables.md says how each was timed)
GEMM_KINDS = ("gemm_bf16", "gemm_fp16", "gemm_fp8", "gemm_fp8_fastacc", "gemm_bf16_acc32",
              "gemm_fp8_acc32")
ATTN_KINDS = tuple(f"attn_{b}_{d}" for b in ATTN_BACKENDS for d in ("fwd", "bwd"))
ELEMENTWISE_KINDS = ("layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "gelu_fwd",
                     "gelu_bwd", "swiglu_fwd", "swiglu_bwd", "add", "dropout_add")
CE_KINDS = ("cross_entropy_fp32_fwd", "cross_entropy_fp32_fwdbwd")
OPTIMIZER_KINDS = ("adamw_fused_fp32",)

#: shape columns each kind needs (all positive integers; ``causal`` is 0 or 1)
SHAPE_FIELDS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(GEMM_KINDS, ("m", "k", "n")),
    **dict.fromkeys(ATTN_KINDS, ("b", "s", "hq", "hkv", "d", "causal")),
    **dict.fromkeys(ELEMENTWISE_KINDS, ("tokens", "h")),
    **dict.fromkeys(CE_KINDS, ("tokens", "vocab")),
    **dict.fromkeys(OPTIMIZER_KINDS, ("params",)),
}
COLUMNS = ("kind", "time_ms", "m", "k", "n", "b", "s", "hq", "hkv", "d", "causal", "tokens", "h",
           "vocab", "params", "note")
MAX_ROWS = 100_000


@dataclass(frozen=True)
class KernelRow:
    """One measured kernel: ``kind``, its shape (column name → value) and time in ms."""

    kind: str
    shape: tuple[tuple[str, int], ...]
    time_ms: float
    line: int = 0

    def get(self, name: str) -> int:
        return dict(self.shape)[name]


@dataclass
class KernelTable:
    """Measured kernels of one GPU. ``meta``: the ``# key: value`` header comments."""

    gpu: str
    rows: list[KernelRow]
    path: str = ""
    meta: dict[str, str] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[KernelRow]:
        return [r for r in self.rows if r.kind == kind]

    def describe(self) -> str:
        src = self.meta.get("source", "no source given")
        date = self.meta.get("date")
        return (f"kernel table {self.path or '(built in)'}: {len(self.rows)} kernels measured on "
                f"{self.gpu}" + (f" ({date})" if date else "") + f"; {src}")


TIME_RANGE_MS = (1e-4, 1e5)
"""Range of a measured kernel time, ms: no GPU kernel runs in under 100 ns (a launch alone
takes microseconds) or, in one launch, over 100 s; beyond either the cell is a typo or a unit
error (µs or s given as ms)."""
MAX_DIM = 2**40
"""Largest shape value (as model sizes, docs/errors.md)."""


def _int_cell(text: str, file: str, line: int, col: str) -> int:
    value = parse_int(text)  # ASCII digits only: no "1_0", " 8" or non-ASCII digits
    if value is None or value > MAX_DIM:
        raise InputError(f"must be a positive integer ≤ 2^40, got {show(text)}", file=file,
                         line=line, field=col)
    if value < 1 and not (col == "causal" and value == 0):
        raise InputError(f"must be a positive integer, got {text!r}", file=file, line=line,
                         field=col)
    if col == "causal" and value not in (0, 1):
        raise InputError(f"must be 0 or 1, got {text!r}", file=file, line=line, field=col)
    return value


def _time_cell(text: str, file: str, line: int) -> float:
    value = parse_float(text)
    lo, hi = TIME_RANGE_MS
    if value is None or not lo <= value <= hi:
        raise InputError(f"must be a number of milliseconds from {lo:g} to {hi:g}, got "
                         f"{show(text)}", file=file, line=line, field="time_ms")
    return value


def _check_physical(rows: list[KernelRow], gpu: str, file: str) -> None:
    """Refuse rows no GPU can have: the same kind and shape twice (which time would count?) and,
    on a GPU of the catalogue, a GEMM faster than the datasheet's dense peak of its dtype
    (2·m·k·n FLOPs over the time; measured GEMMs reach 65–77 % of it on H100)."""
    seen: dict[tuple, int] = {}
    entry = find(gpu)
    for r in rows:
        key = (r.kind, r.shape)
        if key in seen:
            raise InputError(f"the same kind and shape as line {seen[key]}", file=file,
                             line=r.line, field="kind")
        seen[key] = r.line
        dtype = next((d for d in ("fp8", "fp16", "bf16") if d in r.kind), None)
        peak = entry.peak_tflops.get(dtype) if entry and r.kind in GEMM_KINDS else None
        if peak:
            tflops = 2 * r.get("m") * r.get("k") * r.get("n") / (r.time_ms * 1e-3) / 1e12
            if tflops > peak:
                raise InputError(f"{tflops:.4g} TFLOP/s (2·m·k·n / time), above the {gpu}'s "
                                 f"dense {dtype} peak of {peak:g} TFLOP/s", file=file,
                                 line=r.line, field="time_ms")


def parse_table(text: str, file: str) -> KernelTable:
    """Parse kernel-table ``text`` (``file`` names it in errors)."""
    meta: dict[str, str] = {}
    body: list[tuple[int, str]] = []
    for no, raw in enumerate(split_lines(text), start=1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            key, sep, value = stripped[1:].partition(":")
            if sep and not body and key.strip().isidentifier():
                meta[key.strip()] = value.strip()
                if key.strip().startswith("sustained_slowdown"):
                    _check_sustained(key.strip(), value.strip(), file, no)
            continue
        if stripped:
            body.append((no, raw))
    if "gpu" not in meta or not meta["gpu"]:
        raise InputError("missing '# gpu: NAME' header comment", file=file, line=1, field="gpu")
    if not body:
        raise InputError("no header row", file=file, line=1)
    header_line, header_text = body[0]
    header = [c.strip() for c in next(csv.reader([header_text]))]
    for col in header:
        if col not in COLUMNS:
            raise InputError(f"unknown column (known: {', '.join(COLUMNS)})", file=file,
                             line=header_line, field=col or "(empty)")
    for col in ("kind", "time_ms"):
        if col not in header:
            raise InputError("required column missing", file=file, line=header_line, field=col)
    if len(body) - 1 > MAX_ROWS:
        raise InputError(f"more than {MAX_ROWS} rows", file=file, line=body[MAX_ROWS + 1][0])
    rows = [_row(header, no, raw, file) for no, raw in body[1:]]
    _check_physical(rows, meta["gpu"], file)
    return KernelTable(gpu=meta["gpu"], rows=rows, path=file, meta=meta)


#: ``# sustained_slowdown_<dtype>: F`` header keys (docs/kernel-tables.md, "Sustained load")
SUSTAINED_KEYS = ("sustained_slowdown_bf16", "sustained_slowdown_fp8")


def _check_sustained(key: str, value: str, file: str, line: int) -> None:
    if key not in SUSTAINED_KEYS:
        raise InputError(f"unknown header key (known: {', '.join(SUSTAINED_KEYS)})", file=file,
                         line=line, field=key)
    factor = parse_float(value)
    if factor is None or not 1.0 <= factor <= 3.0:
        raise InputError(f"must be a factor from 1 to 3 (times under sustained load ÷ times as "
                         f"measured), got {value!r}", file=file, line=line, field=key)


def _row(header: list[str], no: int, raw: str, file: str) -> KernelRow:
    cells = [c.strip() for c in next(csv.reader([raw]))]
    if len(cells) != len(header):
        raise InputError(f"{len(cells)} cells but the header has {len(header)} columns",
                         file=file, line=no)
    rec = dict(zip(header, cells, strict=True))
    kind = rec["kind"]
    if kind not in SHAPE_FIELDS:
        raise InputError(f"unknown kind {kind!r} (known: {', '.join(SHAPE_FIELDS)})",
                         file=file, line=no, field="kind")
    shape = []
    for col in SHAPE_FIELDS[kind]:
        if col not in rec or rec[col] == "":
            raise InputError(f"needed by kind {kind}", file=file, line=no, field=col)
        shape.append((col, _int_cell(rec[col], file, no, col)))
    return KernelRow(kind, tuple(shape), _time_cell(rec["time_ms"], file, no), no)


def read_table(path: str | Path, flag: str = "--kernel-table") -> KernelTable:
    """Read a kernel table file; raises :class:`InputError` naming file, line and field."""
    path = resolve("kernels", path, flag)  # a shipped table's name works too (sim.files.catalog)
    data = read_bytes(path, what="kernel table", flag=flag)
    return parse_table(decode_text(data, str(path)), str(path))


def shipped_table(name: str) -> KernelTable:
    """A kernel table shipped in ``sim/data/kernels/`` (e.g. ``h100-sxm.csv``)."""
    res = resources.files("sim") / "data" / "kernels" / name
    table = parse_table(res.read_text(encoding="utf-8"), f"sim/data/kernels/{name}")
    return table


def format_table(table: KernelTable) -> str:
    """The CSV text of ``table`` (metadata comments, header, one row per kernel)."""
    out = io.StringIO()
    meta = {"gpu": table.gpu, **{k: v for k, v in table.meta.items() if k != "gpu"}}
    for key, value in meta.items():
        out.write(f"# {key}: {' '.join(str(value).split())}\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS[:-1])
    for r in table.rows:
        shape = dict(r.shape)
        w.writerow([r.kind, repr(round(r.time_ms, 6))] + [shape.get(c, "") for c in COLUMNS[2:-1]])
    return out.getvalue()


def write_table(table: KernelTable, path: str | Path) -> None:
    """Write ``table`` to ``path`` atomically (:func:`sim.files.outputs.atomic_write`: temp file
    beside it, then rename; devices, read-only files and symlinks handled as for every output)."""
    text = format_table(table)
    atomic_write(path, lambda f: f.write(text), flag="--out")

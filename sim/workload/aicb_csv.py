"""AICB's physical workload format: the collective log of one DeepSpeed ZeRO-3 iteration (CSV).

aliyun/aicb writes it from its mocked DeepSpeed engine
(``workload_generator/generate_deepspeed_stage3_workload.py``), e.g.
``workload/physical/model_workload/L65B-D1-C07_Llama65B_zero3_mbs1.csv`` (shipped as
``workloads/aicb-llama65b-deepspeed-zero3-physical.csv``). Line 1 names the ranks
(``[rank0 ~ rank127]``), line 2 the columns (:data:`COLUMNS`, any order); each further line is
one collective. The file has **no compute times**: the reader keeps what it says about
communication, and :func:`weave` places it around compute timed from a model spec (the
scenario's ``--workload CSV --model SPEC``). Rows by ``stage`` (docs/workload-formats.md):

- ``forward.allgather_fn``: one parameter all-gather per tensor, before its use in forward;
- ``backward.allgather_fn``: the tensors gathered again, in backward order;
- ``backward.reduce_scatter_fn``: a gradient bucket's reduce-scatter (``reduce_bucket_size``);
- ``step.*``: at the optimizer step — the last bucket's reduce-scatter, the overflow and
  gradient-norm all-reduces, then the all-gathers of the persistent (small) parameters;
- ``init.*`` (engine set-up) and ``epoch_end`` rows are not part of an iteration: counted and
  skipped. ``dst``, ``src``, ``additional``, ``_elapsed_time``, ``algbw`` and ``busbw`` are
  checked for form and not used.

``msg_size`` is the whole 16-bit tensor (or bucket) in bytes: 2 bytes per parameter.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from enum import Enum

from sim.comm import CollKind
from sim.errors import InputError

COLUMNS = ("comm_type", "comm_group", "comm_group_size", "msg_size", "stage", "dst", "src",
           "additional", "_elapsed_time", "algbw", "busbw", "count")
PARAM_BYTES = 2  # DeepSpeed ZeRO-3's 16-bit parameters and gradients
_RANKS = re.compile(r"^\[rank0 ~ rank(\d+)\]$")
_KINDS = {"all_gather": CollKind.ALLGATHER, "reduce_scatter": CollKind.REDUCESCATTER,
          "all_reduce": CollKind.ALLREDUCE}


class Role(str, Enum):
    """What a row of the iteration does (its ``stage``), in the order they must come."""

    FWD_GATHER = "forward.allgather_fn"
    BWD_GATHER = "backward.allgather_fn"
    BWD_RS = "backward.reduce_scatter_fn"
    STEP_RS = "step.reduce_scatter_fn"
    STEP_ALLREDUCE = "step.all_reduce"  # step.has_overflow, step.get_grad_norm_direct
    STEP_GATHER = "step.allgather_fn"


_PHASE = {Role.FWD_GATHER: 0, Role.BWD_GATHER: 1, Role.BWD_RS: 1, Role.STEP_RS: 2,
          Role.STEP_ALLREDUCE: 2, Role.STEP_GATHER: 3}
_ROLE_KIND = {Role.FWD_GATHER: "all_gather", Role.BWD_GATHER: "all_gather",
              Role.BWD_RS: "reduce_scatter", Role.STEP_RS: "reduce_scatter",
              Role.STEP_ALLREDUCE: "all_reduce", Role.STEP_GATHER: "all_gather"}


@dataclass(frozen=True)
class LogRow:
    """One collective of the iteration: its file ``line``, ``role``, ``stage`` as written and
    ``size_bytes`` (``msg_size``)."""

    line: int
    role: Role
    stage: str
    size_bytes: int


@dataclass
class CollectiveLog:
    """A parsed physical-format file: ``ranks`` (line 1), the data-parallel ``group_size`` of
    its collectives, the iteration's ``rows`` in file order, and the rows not read
    (``skipped``: stage → count)."""

    path: str
    ranks: int
    group_size: int
    rows: list[LogRow]
    skipped: dict[str, int] = field(default_factory=dict)

    def of(self, *roles: Role) -> list[LogRow]:
        return [r for r in self.rows if r.role in roles]


def sniff(text: str) -> bool:
    """Whether ``text`` looks like AICB's physical format: the ranks line or, after a first
    line, the columns (a malformed file of the format is then refused line by line)."""
    lines = text.lstrip("\ufeff").splitlines()[:2]
    return bool(lines) and (_RANKS.match(lines[0].strip()) is not None
                            or (len(lines) == 2 and lines[1].startswith("comm_type,")))


def read_log(text: str, path: str) -> CollectiveLog:
    """Parse a physical-format file; a malformed row raises :class:`InputError` naming the
    file, line and field."""
    lines = text.lstrip("\ufeff").splitlines()
    m = _RANKS.match(lines[0].strip()) if lines else None
    if m is None:
        raise InputError("expected AICB's ranks line '[rank0 ~ rankN]'", file=path, line=1,
                         field="ranks")
    header = [c.strip() for c in lines[1].split(",")] if len(lines) > 1 else []
    if sorted(header) != sorted(COLUMNS):
        extra = sorted(set(header) - set(COLUMNS)) or sorted(set(COLUMNS) - set(header))
        raise InputError(f"the columns must be {', '.join(COLUMNS)} (any order); "
                         f"{'unknown' if set(header) - set(COLUMNS) else 'missing'}: "
                         f"{', '.join(extra) or 'a repeated column'}", file=path, line=2,
                         field="header")
    log = CollectiveLog(path, int(m.group(1)) + 1, 0, [])
    for i, values in enumerate(csv.reader(lines[2:]), start=3):
        if not values:
            continue
        if len(values) != len(header):
            raise InputError(f"{len(values)} fields; the header has {len(header)}", file=path,
                             line=i, field="columns")
        _row(log, dict(zip(header, (v.strip() for v in values), strict=True)), i)
    if not log.of(Role.FWD_GATHER):
        raise InputError("no forward.allgather_fn rows: not a ZeRO-3 iteration", file=path,
                         line=len(lines), field="stage")
    return log


def _int(value: str, path: str, line: int, name: str, *, none_ok: bool = False) -> int | None:
    if none_ok and value in ("None", ""):
        return None
    if not value.isdigit():
        raise InputError(f"expected a non-negative integer, got {value!r}", file=path,
                         line=line, field=name)
    return int(value)


def _check_unused(row: dict[str, str], path: str, line: int) -> None:
    """The columns simrun does not use: numbers, ``None`` or empty (a measured time is ignored:
    the compute comes from the model)."""
    for name in ("dst", "src", "_elapsed_time", "algbw", "busbw"):
        v = row[name]
        if v not in ("None", ""):
            try:
                float(v)
            except ValueError:
                raise InputError(f"expected a number or None, got {v!r}", file=path,
                                 line=line, field=name) from None


def _row(log: CollectiveLog, row: dict[str, str], line: int) -> None:
    """Check one data row and add it to ``log`` (or count it as skipped)."""
    path = log.path
    _check_unused(row, path, line)
    ctype, stage = row["comm_type"], row["stage"]
    if not ctype.startswith("CommType."):
        raise InputError(f"expected CommType.<name>, got {ctype!r}", file=path, line=line,
                         field="comm_type")
    kind = ctype.removeprefix("CommType.")
    size = _int(row["msg_size"], path, line, "msg_size")
    group_size = _int(row["comm_group_size"], path, line, "comm_group_size", none_ok=True)
    if _int(row["count"], path, line, "count") != 1:
        raise InputError(f"count {row['count']}: simrun reads one collective per row",
                         file=path, line=line, field="count")
    if kind == "epoch_end" or stage.startswith("init."):
        key = "epoch_end" if kind == "epoch_end" else stage
        log.skipped[key] = log.skipped.get(key, 0) + 1
        return
    role = _role(stage, path, line)
    if kind != _ROLE_KIND[role]:
        raise InputError(f"{ctype} in stage {stage}: expected CommType.{_ROLE_KIND[role]}",
                         file=path, line=line, field="comm_type")
    if row["comm_group"] != "CommGroup.dp_group":
        raise InputError(f"{row['comm_group']!r}: ZeRO-3 collectives run in "
                         "CommGroup.dp_group", file=path, line=line, field="comm_group")
    if not group_size or group_size > log.ranks:
        raise InputError(f"{row['comm_group_size']}: expected 1 to {log.ranks} (line 1's "
                         "ranks)", file=path, line=line, field="comm_group_size")
    if log.rows and group_size != log.group_size:
        raise InputError(f"{group_size}, but line {log.rows[0].line} says {log.group_size}: "
                         "one data-parallel group runs the iteration", file=path, line=line,
                         field="comm_group_size")
    if log.rows and _PHASE[role] < _PHASE[log.rows[-1].role]:
        raise InputError(f"{stage} after {log.rows[-1].stage} (line {log.rows[-1].line}): "
                         "a second iteration, or rows out of order; simrun reads files of "
                         "one iteration", file=path, line=line, field="stage")
    log.group_size = group_size
    log.rows.append(LogRow(line, role, stage, size))


def _role(stage: str, path: str, line: int) -> Role:
    if stage in ("step.has_overflow", "step.get_grad_norm_direct"):
        return Role.STEP_ALLREDUCE
    try:
        return Role(stage)
    except ValueError:
        raise InputError(f"{stage!r} is not a stage of AICB's DeepSpeed ZeRO-3 log "
                         f"({', '.join(r.value for r in Role if r is not Role.STEP_ALLREDUCE)},"
                         " step.has_overflow, step.get_grad_norm_direct, init.*)", file=path,
                         line=line, field="stage") from None

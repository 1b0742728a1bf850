"""Reader for SimAI / AICB workload text files (``HYBRID_TRANSFORMER_FWD_IN_BCKWD`` header).

Format (see docs/workload-formats.md): line 1 is a policy word followed by ``key: value``
tokens in any order (``key:value``, ``key: value`` and ``pp_comm value`` without a colon are all
accepted; ``checkpoints: N id…`` carries N ids); line 2 is the row count; then one row per
layer with 12 whitespace-separated columns: name, placeholder, then (compute ns, comm type,
comm bytes) for forward, input-gradient and weight-gradient, and the process time in ns.

Communicator groups: forward and input-gradient comms run in the TP group, weight-gradient comms
in the DP group; suffix ``_EP`` selects the EP group, ``_DP_EP`` the DP×EP group (``_TP``,
``_DP`` are accepted too; ``_PP`` is refused, docs/errors.md says why). TP and EP comms block
the layer; DP and DP_EP comms are asynchronous gradient reductions. Zero-size comms are no-ops.
"""

from __future__ import annotations

import re
from dataclasses import replace

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import InputError
from sim.files.inputs import INT64_MAX, split_lines
from sim.program.workload import Layer, Phase, Workload, WorkloadHeader

POLICIES = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER", "HYBRID_DLRM", "DATA", "MICRO")
INT_KEYS = {
    "model_parallel_NPU_group": "tp",
    "tp": "tp",
    "ep": "ep",
    "pp": "pp",
    "vpp": "vpp",
    "ga": "ga",
    "all_gpus": "all_gpus",
    "pp_comm": "pp_comm_bytes",
}
LIST_KEYS = ("checkpoints", "checkpoint_initiates")
N_COLUMNS = 12
COLUMN_NAMES = (
    "name", "placeholder",
    "forward_compute_ns", "forward_comm_type", "forward_comm_bytes",
    "input_grad_compute_ns", "input_grad_comm_type", "input_grad_comm_bytes",
    "weight_grad_compute_ns", "weight_grad_comm_type", "weight_grad_comm_bytes",
    "process_time_ns",
)  # fmt: skip
_SUFFIXES = (("_DP_EP", GroupKind.DP_EP), ("_EP", GroupKind.EP), ("_DP", GroupKind.DP),
             ("_TP", GroupKind.TP), ("_PP", GroupKind.PP))  # fmt: skip
_NUM = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$")
_INT = re.compile(r"[+-]?[0-9]+")


def sniff(text: str) -> bool:
    """True if ``text`` looks like an AICB workload (policy word first)."""
    first = text.lstrip("\ufeff").split(None, 1)
    return bool(first) and first[0] in POLICIES


def parse_int(tok: str, *, file: str, line: int, field: str, allow_float: bool = True) -> int:
    """An integer field in [0, 2^63−1]; floats (e.g. ``1.5e6``) are rounded to the nearest
    integer. Sizes and times above 2^63−1 (the int64 range of the tools that write these files)
    are rejected as corrupt."""
    if len(tok) < 19 and tok.isascii() and tok.isdigit():  # the common case: < 10^18
        return int(tok)
    if not _NUM.match(tok):
        raise InputError(f"expected a number, got {tok[:40]!r}", file=file, line=line,
                         field=field)
    if _INT.fullmatch(tok):
        if len(tok.lstrip("+-0")) > 19:  # more digits than 2^63 has: no int() of huge strings
            raise InputError(f"{tok[:24]}… ({len(tok)} characters) exceeds 2^63−1", file=file,
                             line=line, field=field)
        value = int(tok)
    else:
        if not allow_float:
            raise InputError(f"expected an integer, got {tok[:40]!r}", file=file, line=line,
                             field=field)
        f = float(tok)
        if f != f or f in (float("inf"), float("-inf")):
            raise InputError(f"not a finite number: {tok[:40]!r}", file=file, line=line,
                             field=field)
        if abs(f) > INT64_MAX:
            raise InputError(f"{tok[:40]} exceeds 2^63−1", file=file, line=line, field=field)
        value = int(round(f))
    if value < 0:
        raise InputError(f"must be ≥ 0, got {tok[:40]}", file=file, line=line, field=field)
    if value > INT64_MAX:
        raise InputError(f"{value} exceeds 2^63−1", file=file, line=line, field=field)
    return value


def parse_comm_type(tok: str, default_group: GroupKind, *, file: str, line: int, field: str):
    """``ALLREDUCE_DP_EP`` → (CollKind.ALLREDUCE, GroupKind.DP_EP); ``NONE`` → None."""
    t = tok.upper()
    known = _COMM_TYPES.get((t, default_group), _COMM_TYPES)
    if known is not _COMM_TYPES:  # a type this process has read before (a file repeats a few)
        return known
    out = _comm_type(t, tok, default_group, file=file, line=line, field=field)
    if len(_COMM_TYPES) < 1024:
        _COMM_TYPES[t, default_group] = out
    return out


_COMM_TYPES: dict = {}  # (upper-case type, default group) -> parse_comm_type's answer


def _comm_type(t: str, tok: str, default_group: GroupKind, *, file: str, line: int, field: str):
    if t in ("NONE", "NULL", "-"):
        return None
    group = default_group
    for suffix, g in _SUFFIXES:
        if t.endswith(suffix) and t[: -len(suffix)] in CollKind.__members__:
            t, group = t[: -len(suffix)], g
            break
    if t not in CollKind.__members__ or t == "SENDRECV":
        raise InputError(
            f"unknown communication type {tok!r} (expected ALLREDUCE, ALLGATHER, REDUCESCATTER, "
            "ALLTOALL, BROADCAST or NONE, optionally with _EP / _DP_EP)",
            file=file, line=line, field=field,
        )
    if group is GroupKind.PP:  # docs/errors.md: "A collective in the PP group"
        raise InputError(
            f"{tok!r}: a collective over the pipeline (PP) group cannot run in a pipeline "
            "schedule (each stage would wait in it for stages that wait for its activations); "
            "pipeline traffic is the send/recv between adjacent stages (header pp_comm or "
            "--pp-comm-bytes)",
            file=file, line=line, field=field,
        )
    return CollKind[t], group


def _parse_header(text: str, file: str, assumptions: list[str]) -> WorkloadHeader:
    toks = text.replace(":", ": ").split()
    if not toks or toks[0] not in POLICIES:
        raise InputError(
            f"first token must be a policy word such as HYBRID_TRANSFORMER_FWD_IN_BCKWD, "
            f"got {toks[0] if toks else 'an empty line'!r}",
            file=file, line=1, field="header",
        )
    h = WorkloadHeader()
    h.extra["policy"] = toks[0]
    i = 1
    while i < len(toks):
        key = toks[i].rstrip(":")
        i += 1
        if not key:
            continue
        if key in LIST_KEYS:
            count = parse_int(_take(toks, i, file, key), file=file, line=1, field=key,
                              allow_float=False)
            ids = toks[i + 1 : i + 1 + count]
            if len(ids) != count:
                raise InputError(f"declares {count} ids but {len(ids)} follow", file=file, line=1,
                                 field=key)
            h.extra[key] = " ".join([str(count), *ids])
            i += 1 + count
            continue
        value = _take(toks, i, file, key)
        i += 1
        if key in INT_KEYS:
            v = parse_int(value, file=file, line=1, field=key, allow_float=False)
            attr = INT_KEYS[key]
            if attr != "pp_comm_bytes" and v < 1:
                raise InputError(f"must be ≥ 1, got {v}", file=file, line=1, field=key)
            old = getattr(h, attr)
            if old is not None and old != v:
                raise InputError(f"given twice with different values ({old} and {v})",
                                 file=file, line=1, field=key)
            setattr(h, attr, v)
        elif key == "gpu":  # simrun's extension: the GPU the compute times were measured on
            h.extra[key] = value
        else:
            h.extra[key] = value
            assumptions.append(f"header field {key!r} = {value!r} is not used by simrun")
    return h


def _take(toks: list[str], i: int, file: str, key: str) -> str:
    if i >= len(toks) or toks[i].endswith(":"):
        raise InputError("has no value", file=file, line=1, field=key)
    return toks[i]


def _phase(cols: list[str], start: int, default_group: GroupKind, process_ns: int,
           file: str, line: int) -> Phase:
    compute = parse_int(cols[start], file=file, line=line, field=COLUMN_NAMES[start])
    ctype = parse_comm_type(cols[start + 1], default_group, file=file, line=line,
                            field=COLUMN_NAMES[start + 1])
    size = parse_int(cols[start + 2], file=file, line=line, field=COLUMN_NAMES[start + 2],
                     allow_float=False)
    if ctype is None or size == 0:
        return Phase(compute, None)
    kind, group = ctype
    blocking = group not in (GroupKind.DP, GroupKind.DP_EP)
    return Phase(compute, Comm(kind, group, size, blocking, process_ns))


def _phase_of(phases: dict[tuple, Phase], cols: list[str], start: int,
              default_group: GroupKind, process_ns: int, file: str, line: int) -> Phase:
    """:func:`_phase`, read once per distinct ``(column, tokens, process time)`` of a file
    (phases are immutable: equal rows share one; a bad token fails where it first appears)."""
    key = (start, cols[start], cols[start + 1], cols[start + 2], process_ns)
    ph = phases.get(key)
    if ph is None:
        ph = phases[key] = _phase(cols, start, default_group, process_ns, file, line)
    return ph


def in_embedding_group(lay: Layer) -> Layer:
    """``embedding_grads`` with its all-reduce moved from the default TP group to Megatron's
    embedding group (first and last pipeline stage: the tied input/output embedding's gradient,
    Megatron-LM ``_allreduce_embedding_grads``). AICB writes it without a group suffix, which
    reads as TP; any other row, or one whose collective is in another group, is unchanged."""
    ph = lay.input_grad
    if lay.name != "embedding_grads" or ph.comm is None or ph.comm.group is not GroupKind.TP:
        return lay
    return replace(lay, input_grad=Phase(ph.compute_ns, replace(ph.comm, group=GroupKind.EMB)))


def read_aicb(text: str, file: str) -> Workload:
    """Parse AICB text. Raises :class:`InputError` naming file, line and field on bad input."""
    lines = split_lines(text.lstrip("\ufeff"))
    assumptions: list[str] = ["AICB units: compute times in ns, communication sizes in bytes"]
    if not lines or not lines[0].strip():
        raise InputError("empty file (expected an AICB header line)", file=file, line=1,
                         field="header")
    header = _parse_header(lines[0], file, assumptions)
    body_start = 1
    if len(lines) > 1 and len(lines[1].split()) == 1:
        header.declared_rows = parse_int(lines[1].strip(), file=file, line=2, field="row_count",
                                         allow_float=False)
        body_start = 2
    else:
        assumptions.append("no row-count line after the header; counting the rows present")
    layers: list[Layer] = []
    phases: dict[tuple, Phase] = {}  # a file repeats its rows once per microbatch: read once
    for idx in range(body_start, len(lines)):
        raw = lines[idx]
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        lineno = idx + 1
        cols = raw.split()
        if len(cols) != N_COLUMNS:
            raise InputError(
                f"expected {N_COLUMNS} columns, found {len(cols)}", file=file, line=lineno,
                field="row",
            )
        process_ns = parse_int(cols[11], file=file, line=lineno, field=COLUMN_NAMES[11])
        layers.append(Layer(
            name=cols[0],
            forward=_phase_of(phases, cols, 2, GroupKind.TP, process_ns, file, lineno),
            input_grad=_phase_of(phases, cols, 5, GroupKind.TP, process_ns, file, lineno),
            weight_grad=_phase_of(phases, cols, 8, GroupKind.DP, process_ns, file, lineno),
            line=lineno,
        ))
    if not layers:
        raise InputError("no layer rows after the header", file=file, line=len(lines) or 1,
                         field="rows")
    if header.declared_rows is not None and header.declared_rows != len(layers):
        raise InputError(
            f"declares {header.declared_rows} rows but {len(layers)} rows follow",
            file=file, line=2, field="row_count",
        )
    return Workload(path=file, format="aicb", header=header, layers=layers,
                    assumptions=assumptions)

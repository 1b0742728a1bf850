"""PyTorch profiler (Kineto) traces → a kernel table of that stack (docs/kernel-tables.md),
with a match report.

A trace is Chrome trace-event JSON (``.json`` or ``.json.gz``) as ``torch.profiler`` writes it:
``traceEvents`` with ``cat`` ``kernel`` (GPU kernels, ``dur`` in µs, ``args.correlation``),
``cuda_runtime`` (the launch on a CPU thread, same ``correlation``) and ``cpu_op`` (ATen
operators; ``args["Input Dims"]`` and ``args["Input type"]`` when recorded with
``record_shapes=True``), and ``deviceProperties`` (the GPU's name). Each kernel is tied to the
innermost operator of its launching thread that holds the launch and has shapes; the kernels
of one operator call are summed. Operators become table rows where the table has a kind for
them, each row the median over calls and ranks:

- ``aten::mm`` / ``aten::addmm`` / ``aten::linear`` in bf16 or fp16 → ``gemm_bf16`` /
  ``gemm_fp16`` with ``m, k, n`` (``A[m×k] @ B[k×n]``);
- ``aten::native_layer_norm`` in bf16 → ``layernorm_fwd`` (``tokens × h``);
- ``aten::_scaled_dot_product_flash_attention`` (and its ``_backward``) in bf16 →
  ``attn_flash_fwd`` / ``attn_flash_bwd`` (``b, s, hq, hkv, d``; causal from its arguments
  when recorded, else 1).

Everything else is counted in the match report by category (GEMM, attention, norm,
element-wise, optimizer, NCCL, other) with why it is not a row: no shapes recorded, a dtype the
table does not time (fp32 GEMMs: simrun trains in bf16/fp16/fp8), no table kind (NCCL kernels:
collectives are timed by the network model; optimizer and element-wise kernels without a
matching kind), or no launching operator found.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sim.errors import InputError
from sim.files.inputs import decode_text, max_input_bytes, read_bytes, split_lines
from sim.kernels.gpus import find
from sim.kernels.table import KernelRow, KernelTable

MAX_EVENTS = 5_000_000
_DTYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32"}
_CATEGORIES = (("nccl", re.compile(r"nccl", re.I)),
               ("attention", re.compile(r"flash|fmha|attn|attention", re.I)),
               ("gemm", re.compile(r"gemm|cutlass|xmma|cublas|wgrad|dgrad", re.I)),
               ("norm", re.compile(r"norm|moments", re.I)),
               ("optimizer", re.compile(r"multi_tensor|adam|sgd|adagrad", re.I)),
               ("elementwise", re.compile(r"elementwise|vectorized|unrolled|reduce_kernel|"
                                          r"softmax|dropout|copy|fill|cat", re.I)))
_GEMM_OPS = ("aten::mm", "aten::addmm", "aten::linear")


@dataclass
class Trace:
    """One rank's trace: its file, GPU name (or ``None``), rank, events."""

    file: str
    gpu: str | None
    rank: int | None
    events: list


@dataclass
class Report:
    """The match report: per category, kernels seen and kernels written as rows, and the
    reasons the others fell back (reason → count)."""

    kernels: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    written: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    fallback: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(
        lambda: defaultdict(int)))

    def lines(self) -> list[str]:
        out = []
        for cat in sorted(self.kernels):
            reasons = self.fallback[cat]
            ops = sorted(((n, r.removeprefix("no table kind: ")) for r, n in reasons.items()
                          if r.startswith("no table kind: ")), reverse=True)
            parts = [f"{n} {r}" for r, n in sorted(reasons.items())
                     if not r.startswith("no table kind: ")]
            if ops:
                parts.append(f"{sum(n for n, _ in ops)} of {len(ops)} operators with no table "
                             f"kind (most: {', '.join(f'{o} {n}' for n, o in ops[:3])})")
            why = "; ".join(parts)
            out.append(f"{cat}: {self.kernels[cat]} kernels, {self.written[cat]} in table rows"
                       + (f"; not rows: {why}" if why else ""))
        return out


def read_trace(path: str | Path) -> Trace:
    """Read one trace file (size bounded like every input; gzip bounded after inflating)."""
    fname = str(path)
    data = read_bytes(path, what="profiler trace", flag="--kineto")
    if fname.endswith(".gz") or data[:2] == b"\x1f\x8b":
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = d.decompress(data, max_input_bytes())
            if d.unconsumed_tail:
                raise InputError(f"inflates to more than {max_input_bytes()} bytes", file=fname)
        except (zlib.error, gzip.BadGzipFile) as e:
            raise InputError(f"not a gzip file: {e}", file=fname) from None
    text = decode_text(data, fname)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON: {e.msg}", file=fname, line=e.lineno) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError("not a PyTorch profiler trace (no 'traceEvents' list)", file=fname,
                         field="traceEvents")
    if len(doc["traceEvents"]) > MAX_EVENTS:
        raise InputError(f"more than {MAX_EVENTS} events", file=fname, field="traceEvents")
    props = doc.get("deviceProperties") or []
    gpu = props[0].get("name") if props and isinstance(props[0], dict) else None
    rank = (doc.get("distributedInfo") or {}).get("rank")
    trace = Trace(fname, gpu, rank, [e for e in doc["traceEvents"] if isinstance(e, dict)])
    trace.text = text  # for the line of a field in errors
    return trace


def _line_of(text: str, needle: str) -> int | None:
    for no, line in enumerate(split_lines(text), 1):
        if needle in line:
            return no
    return None


def check_gpu(traces: list[Trace], gpu: str | None) -> str:
    """The one catalogue GPU of the traces (and ``--gpu``): a trace of another GPU is refused
    naming its file and line."""
    want = find(gpu) if gpu else None
    if gpu and want is None:
        raise InputError(f"GPU {gpu!r} is not in the GPU catalogue", field="gpu")
    for t in traces:
        if t.gpu is None:
            continue
        have = find(t.gpu) or find(t.gpu.removeprefix("NVIDIA "))
        if have is None:
            continue
        if want is not None and have is not want:
            raise InputError(f"a trace of {t.gpu} ({have.name}), not of {want.name} (--gpu or "
                             "the first trace)", file=t.file, line=_line_of(t.text, t.gpu),
                             field="deviceProperties.name")
        want = have
    if want is None:
        raise InputError("the traces do not name their GPU (no deviceProperties); give --gpu "
                         "NAME", field="gpu")
    return want.name


def _category(name: str) -> str:
    for cat, pat in _CATEGORIES:
        if pat.search(name):
            return cat
    return "other"


def _launching_ops(trace: Trace) -> dict[int, dict]:
    """correlation id → the innermost cpu_op with shapes holding its launch."""
    ops = defaultdict(list)
    for e in trace.events:
        if e.get("cat") == "cpu_op" and "Input Dims" in (e.get("args") or {}):
            ops[(e.get("pid"), e.get("tid"))].append(e)
    for v in ops.values():
        v.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    out = {}
    for e in trace.events:
        if e.get("cat") != "cuda_runtime":
            continue
        corr = (e.get("args") or {}).get("correlation")
        best = None
        for op in ops.get((e.get("pid"), e.get("tid")), ()):
            if op["ts"] > e["ts"]:
                break
            if op["ts"] + op.get("dur", 0) >= e["ts"]:
                best = op  # later start within: innermost
        if best is not None and corr is not None:
            out[corr] = best
    return out


def _row_of(op: dict) -> tuple[str, tuple] | str:
    """The table kind and shape of operator ``op``, or why it has none."""
    name, a = op["name"], op["args"]
    dims, types = a.get("Input Dims") or [], a.get("Input type") or []
    dtype = _DTYPES.get(types[0] if types else "", types[0] if types else "unknown")
    if name in _GEMM_OPS:
        if dtype not in ("bf16", "fp16"):
            return f"{dtype} GEMM (the table times bf16/fp16/fp8 GEMMs)"
        if name == "aten::addmm":
            dims = dims[1:]
        x, w = dims[0], dims[1]
        if name == "aten::linear":  # x[..., k] @ W[n, k]^T
            m = 1
            for d in x[:-1]:
                m *= d
            return f"gemm_{dtype}", (("m", m), ("k", x[-1]), ("n", w[0]))
        return f"gemm_{dtype}", (("m", x[0]), ("k", x[1]), ("n", w[1]))
    if name == "aten::native_layer_norm":
        if dtype != "bf16":
            return f"{dtype} layer norm (the table's norms are bf16)"
        tokens = 1
        for d in dims[0][:-1]:
            tokens *= d
        return "layernorm_fwd", (("tokens", tokens), ("h", dims[0][-1]))
    if name.startswith("aten::_scaled_dot_product_flash_attention"):
        if dtype != "bf16":
            return f"{dtype} attention (the table's attention is bf16)"
        b, hq, s, d = dims[0]
        hkv = dims[1][1] if len(dims) > 1 and len(dims[1]) == 4 else hq
        bwd = name.endswith("_backward")
        return f"attn_flash_{'bwd' if bwd else 'fwd'}", (("b", b), ("s", s), ("hq", hq),
                                                         ("hkv", hkv), ("d", d), ("causal", 1))
    return f"no table kind: {name}"


def kernel_table(traces: list[Trace], gpu: str) -> tuple[KernelTable, Report]:
    """The kernel table of ``traces`` (one GPU) and the match report."""
    rep = Report()
    calls: dict[tuple, float] = defaultdict(float)  # (file, op id) → summed kernel µs
    kinds: dict[tuple, tuple] = {}
    for t in traces:
        launch = _launching_ops(t)
        for e in t.events:
            if e.get("cat") != "kernel":
                continue
            cat = _category(e.get("name", ""))
            rep.kernels[cat] += 1
            if cat == "nccl":
                rep.fallback[cat]["collectives (timed by the network model)"] += 1
                continue
            op = launch.get((e.get("args") or {}).get("correlation"))
            if op is None:
                rep.fallback[cat]["no launching operator with shapes"] += 1
                continue
            row = _row_of(op)
            if isinstance(row, str):
                rep.fallback[cat][row] += 1
                continue
            key = (t.file, op.get("pid"), op.get("tid"), op["ts"])
            calls[key] += float(e.get("dur", 0.0))
            kinds[key] = row
            rep.written[cat] += 1
    times: dict[tuple, list[float]] = defaultdict(list)
    for key, us in calls.items():
        times[kinds[key]].append(us)
    rows = [KernelRow(kind, shape, statistics.median(v) / 1e3)
            for (kind, shape), v in sorted(times.items())]
    files = ", ".join(Path(t.file).name for t in traces)
    table = KernelTable(gpu=gpu, rows=rows, meta={
        "source": f"PyTorch profiler traces {files} (median kernel time per operator call "
                  "over calls and ranks; simrun calibrate --kineto)"})
    return table, rep


def kineto_main(args) -> None:
    """``simrun calibrate --kineto``: write the table and print the match report."""
    from sim.kernels.table import write_table

    traces = [read_trace(p) for p in args.kineto]
    gpu = check_gpu(traces, args.gpu)
    table, rep = kernel_table(traces, gpu)
    ranks = sorted({t.rank for t in traces if t.rank is not None})
    print(f"{len(traces)} trace(s) of {gpu} (ranks {', '.join(map(str, ranks)) or 'unknown'}):"
          f" {sum(rep.kernels.values())} kernels, {len(table.rows)} table rows")
    print("\n".join("  " + line for line in rep.lines()))
    if args.kernel_table_out:
        write_table(table, args.kernel_table_out)
        print(f"wrote {args.kernel_table_out}")

"""Chrome trace-event export (``--trace run.trace.json``) for Perfetto and chrome://tracing.

Layout (docs/visualisation.md): one *process* per shown rank (``pid = rank + 1``; in symmetric
mode one rank per pipeline stage), named ``stage s · rank r``. Its *threads* (tracks):

- ``pipeline ops`` — one box per forward/backward op of a microbatch (``F3``, ``B3``, or
  ``F3.1`` = microbatch 3, chunk 1), the same boxes as the timeline plot (category ``op``; they
  summarise the compute track and are not counted in breakdown sums);
- ``compute`` — the compute stream: forward / input-grad / weight-grad of every layer and
  microbatch, iteration-level compute, optimizer, ``bubble`` spans, and ``exposed`` spans when
  the stream waits for a pipeline transfer or for outstanding DP gradient reductions;
- ``TP comm``, ``EP comm``, ``PP send``, ``DP comm``, ``DP_EP comm`` — every collective and
  pipeline send with its group, members, bytes, algorithm and achieved bandwidth. Overlapping
  transfers of one stream go to extra tracks (``PP send #2``) so no track has overlapping events.

Complete events (``"ph": "X"``) carry ``ts``/``dur`` in microseconds as the format requires,
written as ``ns / 1000`` so nanosecond precision is kept. Per rank, the durations of category
``forward``/``input_grad``/``weight_grad``/``compute`` sum to the report's compute,
``optimizer`` to its optimizer, ``bubble`` to its bubble, and ``comm_blocking`` plus
``exposed_comm`` of group G to its exposed communication of G.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sim import __version__
from sim.comm import CollKind, GroupKind
from sim.engine.result import SimResult, Span
from sim.files.outputs import atomic_write
from sim.network.base import nccl_busbw_factor
from sim.parallel.placement import Placement
from sim.viz.boxes import COMM_ORDER, PHASE_KINDS, arg, is_blocking, timeline_boxes
from sim.viz.select import select_ranks

PHASE_SHORT = {"forward": "fwd", "input_grad": "bwd-input", "weight_grad": "bwd-weight"}
TID_OPS, TID_COMPUTE = 1, 2


def us(ns: int) -> float:
    """Nanoseconds → trace microseconds (float, exact to the nanosecond)."""
    return ns / 1000


def rank_list(ranks: Sequence[int]) -> str:
    """Compact text for a group's members: ``0-7``, ``0..56 step 8`` or ``0,3,5``."""
    r = list(ranks)
    if len(r) >= 3:
        step = r[1] - r[0]
        if step > 0 and all(b - a == step for a, b in zip(r, r[1:], strict=False)):
            return f"{r[0]}-{r[-1]}" if step == 1 else f"{r[0]}..{r[-1]} step {step}"
    return ",".join(map(str, r))


def _lanes(spans: list[Span]) -> list[tuple[int, Span]]:
    """Greedy interval partitioning: (lane, span) so spans on one lane never overlap."""
    ends: list[int] = []
    out = []
    for s in sorted(spans, key=lambda s: (s.start_ns, s.end_ns, s.label)):
        for i, e in enumerate(ends):
            if e <= s.start_ns:
                ends[i] = s.end_ns
                out.append((i, s))
                break
        else:
            ends.append(s.end_ns)
            out.append((len(ends) - 1, s))
    return out


class _Builder:
    def __init__(self, result: SimResult, placement: Placement, vpp: int,
                 gpus_per_node: int | None):
        self.res, self.pl, self.vpp, self.gpn = result, placement, vpp, gpus_per_node
        self.stage_of = {r.rank: r.stage for r in result.ranks}
        self.meta: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def mb_label(self, mb: int, chunk: int) -> str:
        return f"{mb}.{chunk}" if self.vpp > 1 and chunk >= 0 else str(mb)

    def name_process(self, pid: int, rank: int, order: int) -> None:
        where = f" (node {rank // self.gpn}, GPU {rank % self.gpn})" if self.gpn else ""
        name = f"stage {self.stage_of[rank]} · rank {rank}{where}"
        self.meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                          "args": {"name": name}})
        self.meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                          "args": {"sort_index": order}})

    def name_thread(self, pid: int, tid: int, name: str) -> None:
        self.meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                          "args": {"name": name}})
        self.meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                          "args": {"sort_index": tid}})

    def x(self, pid: int, tid: int, s0: int, s1: int, name: str, cat: str,
          args: dict[str, Any]) -> None:
        self.events.append({"name": name, "cat": cat, "ph": "X", "ts": us(s0), "dur": us(s1 - s0),
                            "pid": pid, "tid": tid, "args": args})

    def compute_event(self, pid: int, s: Span) -> None:
        if s.kind in PHASE_KINDS and s.microbatch >= 0:
            name = f"{PHASE_SHORT[s.kind]} {s.label}"
            args = {"layer": s.label, "phase": s.kind, "microbatch": s.microbatch,
                    "chunk": s.chunk}
            self.x(pid, TID_COMPUTE, s.start_ns, s.end_ns, name, s.kind, args)
        elif s.kind in PHASE_KINDS:
            self.x(pid, TID_COMPUTE, s.start_ns, s.end_ns, s.label, "compute",
                   {"row": s.label, "note": "iteration-level compute (runs once)"})
        elif s.kind == "optimizer":
            self.x(pid, TID_COMPUTE, s.start_ns, s.end_ns, s.label, "optimizer", {"row": s.label})
        elif s.kind == "bubble":
            self.x(pid, TID_COMPUTE, s.start_ns, s.end_ns, "bubble", "bubble",
                   {"reason": s.label})
        elif s.kind == "recv_wait":
            self.x(pid, TID_COMPUTE, s.start_ns, s.end_ns, "exposed PP: transfer in flight",
                   "exposed_comm", {"group": "PP", "reason": s.label})
        elif s.kind == "comm_wait":
            g = str(arg(s, "group", "DP"))
            self.x(pid, TID_COMPUTE, s.start_ns, s.end_ns,
                   f"exposed {g}: outstanding gradient reductions", "exposed_comm",
                   {"group": g, "reason": s.label})
        else:
            raise ValueError(f"unknown compute span kind {s.kind!r}")

    def comm_args(self, s: Span) -> dict[str, Any]:
        dur = s.end_ns - s.start_ns
        size = int(arg(s, "bytes", 0))
        if s.stream == "PP":
            peer = int(arg(s, "peer", -1))
            out: dict[str, Any] = {"op": CollKind.SENDRECV.value, "group": "PP", "bytes": size,
                                   "from_rank": s.rank, "to_rank": peer,
                                   "to_stage": self.pl.coord(peer).pp if peer >= 0 else -1,
                                   "microbatch": s.microbatch, "chunk": s.chunk}
            n, kind = 2, CollKind.SENDRECV
        else:
            op = str(arg(s, "op", ""))
            kind = CollKind(op) if op in CollKind.__members__ else None
            try:
                members: tuple[int, ...] = self.pl.group(GroupKind(s.stream), s.rank)
            except ValueError:  # a stream that is not a process group
                members = ()
            n = len(members)
            out = {"op": op, "group": s.stream, "group_size": n,
                   "group_ranks": rank_list(members), "bytes": size,
                   "algorithm": str(arg(s, "algorithm", "")),
                   "exposed": is_blocking(s)}
            if s.microbatch >= 0:
                out.update(microbatch=s.microbatch, chunk=s.chunk)
        if dur > 0 and size > 0:
            algbw = size / dur  # bytes per ns = GB/s
            out["algbw_GBps"] = round(algbw, 6)
            if kind is not None and n:
                out["busbw_GBps"] = round(algbw * nccl_busbw_factor(kind, n), 6)
        return out

    def comm_name(self, s: Span) -> str:
        if s.stream == "PP":
            d = s.label[:1]
            peer = int(arg(s, "peer", -1))
            return f"send {d}{self.mb_label(s.microbatch, s.chunk)} → stage " \
                   f"{self.pl.coord(peer).pp if peer >= 0 else '?'}"
        return f"{arg(s, 'op')} {s.label}"

    def rank(self, rank: int, order: int, spans: list[Span], op_boxes) -> None:
        pid = rank + 1
        self.name_process(pid, rank, order)
        self.name_thread(pid, TID_OPS, "pipeline ops")
        self.name_thread(pid, TID_COMPUTE, "compute")
        for b in op_boxes:
            d = {"forward": "F", "backward": "B", "weight_grad": "W"}[b.kind]
            self.x(pid, TID_OPS, b.start_ns, b.end_ns, f"{d}{self.mb_label(b.microbatch, b.chunk)}",
                   "op", {"microbatch": b.microbatch, "chunk": b.chunk, "kind": b.kind})
        by_stream: dict[str, list[Span]] = {}
        for s in spans:
            if s.stream == "compute":
                self.compute_event(pid, s)
            else:
                by_stream.setdefault(s.stream, []).append(s)
        tid = TID_COMPUTE
        streams = sorted(by_stream, key=lambda g: (COMM_ORDER.index(g) if g in COMM_ORDER
                                                   else len(COMM_ORDER), g))
        for g in streams:
            base = tid + 1
            n_lanes = 0
            for lane, s in _lanes(by_stream[g]):
                n_lanes = max(n_lanes, lane + 1)
                cat = "pp_transfer" if g == "PP" else (
                    "comm_blocking" if is_blocking(s) else "comm_async")
                self.x(pid, base + lane, s.start_ns, s.end_ns, self.comm_name(s), cat,
                       self.comm_args(s))
            title = "PP send" if g == "PP" else f"{g} comm"
            for lane in range(n_lanes):
                self.name_thread(pid, base + lane, title + (f" #{lane + 1}" if lane else ""))
            tid = base + n_lanes - 1


def _prepare(result: SimResult, ranks: str | Sequence[int] | None,
             placement: Placement | None):
    if not result.spans:
        raise ValueError("the result has no spans: simulate with record_spans=True")
    prog = result.program
    if placement is None:
        placement = Placement(prog.tp, prog.dp, prog.pp, prog.ep, cp=prog.cp, etp=prog.etp)
    chosen = select_ranks(result, ranks if ranks is None or isinstance(ranks, str)
                          else tuple(ranks))
    spans_of: dict[int, list[Span]] = {r: [] for r in chosen}
    for s in result.spans:
        lst = spans_of.get(s.rank)
        if lst is not None:
            lst.append(s)
    ops = [bx for bx in timeline_boxes(result, chosen)
           if bx.lane == "compute" and bx.microbatch >= 0]
    ops_of: dict[int, list] = {i: [] for i in range(len(chosen))}
    for bx in ops:
        ops_of[bx.row].append(bx)
    return placement, chosen, spans_of, ops_of


def _other(result: SimResult, chosen: list[int], report: dict[str, Any] | None) -> dict:
    prog = result.program
    other: dict[str, Any] = {
        "generator": f"simrun {__version__}",
        "time_unit": "ts and dur in microseconds (= simulated ns / 1000)",
        "iteration_time_s": result.iteration_ns * 1e-9,
        "schedule": prog.schedule, "pipeline_stages": prog.pp,
        "microbatches": prog.microbatches, "virtual_pipeline_size": prog.vpp,
        "parallelism": f"{prog.layout.describe()} (EP {prog.ep})",
        "simulation_mode": "per-rank" if result.per_rank else "symmetric",
        "ranks_shown": rank_list(chosen),
    }
    if report is not None:
        other["workload"] = report.get("workload", "")
        other["topology"] = report.get("topology", "")
    return other


def _sort_key(e: dict[str, Any]) -> tuple:
    return (e["pid"], e["tid"], e["ts"], -e["dur"], e["name"])


def build_trace(result: SimResult, *, ranks: str | Sequence[int] | None = None,
                placement: Placement | None = None, gpus_per_node: int | None = None,
                report: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trace document (a JSON-ready dict) for the ranks chosen by ``ranks``.

    ``ranks``: a ``--trace-ranks`` value (``'stage-reps'``, ``'all'``, ``'0,8,16'``) or a
    sequence of ranks. Needs ``result`` from ``simulate(..., record_spans=True)``. Holds every
    event in memory; :func:`write_trace_streaming` writes the same text rank by rank.
    """
    placement, chosen, spans_of, ops_of = _prepare(result, ranks, placement)
    b = _Builder(result, placement, result.program.vpp, gpus_per_node)
    for i, r in enumerate(chosen):
        b.rank(r, i, spans_of[r], ops_of[i])
    b.events.sort(key=_sort_key)
    return {"traceEvents": b.meta + b.events, "displayTimeUnit": "ms",
            "otherData": _other(result, chosen, report)}


def _dump(e: dict[str, Any]) -> str:
    return json.dumps(e, ensure_ascii=False, separators=(",", ":"))


def trace_chunks(result: SimResult, *, ranks: str | Sequence[int] | None = None,
                 placement: Placement | None = None, gpus_per_node: int | None = None,
                 report: dict[str, Any] | None = None) -> Iterator[str]:
    """The text of :func:`trace_text` (of :func:`build_trace`) in pieces, one rank's events at
    a time, so memory stays bounded by the largest rank: a first pass collects the metadata
    (process and track names come first in the file), a second builds, sorts and yields each
    rank's events (pids are ranks + 1, so sorting per rank is sorting the whole list)."""
    placement, chosen, spans_of, ops_of = _prepare(result, ranks, placement)
    vpp = result.program.vpp
    meta = _Builder(result, placement, vpp, gpus_per_node)
    for i, r in enumerate(chosen):
        meta.rank(r, i, spans_of[r], ops_of[i])
        meta.events.clear()
    yield '{"traceEvents":[\n'
    first = True
    if meta.meta:
        yield ",\n".join(map(_dump, meta.meta))
        first = False
    for i, r in enumerate(chosen):
        b = _Builder(result, placement, vpp, gpus_per_node)
        b.rank(r, i, spans_of[r], ops_of[i])
        if b.events:
            b.events.sort(key=_sort_key)
            yield ("" if first else ",\n") + ",\n".join(map(_dump, b.events))
            first = False
    head = {"displayTimeUnit": "ms", "otherData": _other(result, chosen, report)}
    yield "\n]," + json.dumps(head, ensure_ascii=False, separators=(",", ":"))[1:-1] + "}\n"


def trace_text(trace: dict[str, Any]) -> str:
    """Serialise deterministically, one event per line (diffable, still valid JSON)."""
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    events = ",\n".join(map(_dump, trace["traceEvents"]))
    rest = json.dumps(head, ensure_ascii=False, separators=(",", ":"))[1:-1]
    return '{"traceEvents":[\n' + events + "\n]," + rest + "}\n"


def write_trace(path: str | Path, trace: dict[str, Any] | Iterable[str], *,
                flag: str = "--trace") -> None:
    """Write atomically, from a trace dict or the pieces of :func:`trace_chunks` (streamed:
    never the whole text in memory); ``.gz`` paths are gzip-compressed (fixed header time)."""
    pieces = [trace_text(trace)] if isinstance(trace, dict) else trace

    def write(f) -> None:
        if str(path).endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=6,
                               mtime=0) as z:
                for piece in pieces:
                    z.write(piece.encode("utf-8"))
        else:
            for piece in pieces:
                f.write(piece.encode("utf-8"))

    atomic_write(path, write, binary=True, flag=flag)

"""Kineto-shaped per-rank traces (``--trace DIR --trace-format kineto``) for PyTorch's
profiler tools, HolisticTraceAnalysis (HTA) first.

One JSON file per shown rank, ``DIR/rank<r>.trace.json``, shaped like the trace
``torch.profiler`` writes with Kineto: ``distributedInfo`` (``rank``, ``world_size``,
``backend: nccl``), ``deviceProperties`` (the topology's GPU), and ``traceEvents`` holding one
complete (``"ph": "X"``) event of category ``kernel`` per piece of GPU work the simulation ran
on that rank (``pid`` 0 = the GPU, ``tid`` = ``args.stream``):

- stream 7: compute — every forward / input-gradient / weight-gradient / iteration-level
  compute span and the optimizer, named ``<phase> <row>`` (lower case, so no name looks like a
  communication or memory kernel to HTA's classifier), and the time a compute kernel ran on,
  slowed by NCCL kernels sharing its SMs (``compute slowed by communication``: the report
  counts it as exposed communication);
- streams 20+: one per communication track of the Chrome trace (TP, EP, PP sends, DP, …),
  kernels named ``ncclDevKernel_<Op> <group> <row>`` as NCCL's kernels are, so HTA counts them as
  communication.

Waiting (bubbles, a receive in flight, outstanding gradient reductions) runs no kernel and is
idle time for HTA, as it is on a profiled GPU. Times are µs as floats (``ns / 1000``, exact to
the ns); HTA rounds them to whole µs unless ``HTA_DISABLE_NS_ROUNDING=1``. Per rank, HTA's
temporal breakdown then gives: compute time = the report's compute + optimizer + the slowed
time; non-compute time = communication kernels running while no compute does; idle = waiting
(bubbles, receives in flight, outstanding reductions); kernel time = the rank's first kernel
start to its last kernel end (with one stage: the iteration).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim import __version__
from sim.engine.result import SimResult, Span
from sim.files.outputs import atomic_write
from sim.viz.boxes import COMM_ORDER, PHASE_KINDS, arg
from sim.viz.select import select_ranks
from sim.viz.trace import _lanes, us

COMPUTE_STREAM = 7
FIRST_COMM_STREAM = 20
_COMPUTE_KINDS = (*PHASE_KINDS, "optimizer")
SLOWED = "slowed by communication"  # the label of the engine's slowed-compute spans


def _comm_name(s: Span) -> str:
    op = "SendRecv" if s.stream == "PP" else str(arg(s, "op", "")).title().replace("_", "")
    return f"ncclDevKernel_{op} {s.stream} {s.label}"


def _kernel(name: str, s: Span, stream: int, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
            "ts": us(s.start_ns), "dur": us(s.end_ns - s.start_ns),
            "args": {"device": 0, "stream": stream, "correlation": corr,
                     "External id": corr}}


def rank_trace(result: SimResult, rank: int, world: int, gpu: str) -> dict[str, Any]:
    """The Kineto-shaped trace (a JSON-ready dict) of one simulated rank."""
    spans = [s for s in result.spans if s.rank == rank and s.end_ns > s.start_ns]
    events: list[dict[str, Any]] = []
    for s in spans:
        if s.stream == "compute" and s.kind in _COMPUTE_KINDS:
            name = f"{s.kind} {s.label}".lower()
            events.append(_kernel(name, s, COMPUTE_STREAM, len(events) + 1))
        elif s.stream == "compute" and s.label == SLOWED:
            # the kernel ran on, slowed by NCCL kernels sharing the SMs (sim.engine.interference):
            # GPU work, which the report counts as exposed communication
            events.append(_kernel("compute slowed by communication", s, COMPUTE_STREAM,
                                  len(events) + 1))
    by_stream: dict[str, list[Span]] = {}
    for s in spans:
        if s.stream != "compute":
            by_stream.setdefault(s.stream, []).append(s)
    stream = FIRST_COMM_STREAM
    for g in sorted(by_stream, key=lambda g: (COMM_ORDER.index(g) if g in COMM_ORDER
                                              else len(COMM_ORDER), g)):
        lanes = _lanes(by_stream[g])
        for lane, s in lanes:
            events.append(_kernel(_comm_name(s), s, stream + lane, len(events) + 1))
        stream += 1 + max((lane for lane, _ in lanes), default=0)
    events.sort(key=lambda e: (e["tid"], e["ts"], e["name"]))
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "deviceProperties": [{"id": 0, "name": gpu}],
        "traceEvents": events,
        "traceName": f"rank{rank}.trace.json",
        "displayTimeUnit": "ms",
        "otherData": {"generator": f"simrun {__version__}",
                      "iteration_time_s": result.iteration_ns * 1e-9,
                      "time_unit": "ts and dur in microseconds (= simulated ns / 1000)"},
    }


def write_kineto(folder: str | Path, result: SimResult, *, ranks: str | None = None,
                 gpu: str = "GPU", flag: str = "--trace") -> list[Path]:
    """Write ``folder/rank<r>.trace.json`` for each rank ``ranks`` chooses (a
    ``--trace-ranks`` value), each atomically; returns the paths written."""
    if not result.spans:
        raise ValueError("the result has no spans: simulate with record_spans=True")
    chosen = select_ranks(result, ranks)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    world = result.program.tp * result.program.pp * result.program.dp
    paths = []
    for r in chosen:
        doc = rank_trace(result, r, world, gpu)
        # "rank": N with a space: HTA finds each file's rank with the pattern '"rank":\s+(\d+)'
        text = json.dumps(doc, ensure_ascii=False, separators=(",", ": "))
        p = out / f"rank{r}.trace.json"
        atomic_write(p, lambda f, t=text: f.write(t.encode("utf-8")), binary=True, flag=flag)
        paths.append(p)
    return paths

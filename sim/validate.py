"""``simrun validate``: predicted vs measured iteration times of published training runs.

Runs every case of a validation file (default: ``workloads/validation/*.yaml``, the measured
iterations of docs/calibration.md section B) through the same path as ``simrun --model``: model
spec + layout → memory check → generated program → engine on the flow network of the shipped
Selene-like topology (as many DGX A100 nodes as the case needs). Prints one row per case with
the error in percent and the mean absolute error; ``--json`` writes the same. No per-case
parameter is tuned: the cases only say what ran (model, layout, batch, recompute) and what was
measured. See docs/validation.md for the numbers and what limits them.

Validation file schema (unknown keys are rejected with file, line and key)::

    source: <text>                       # where the measurements come from
    topology: <path>                     # relative to the file
    defaults: {<case key>: value, ...}   # optional, applied to every case
    cases:
      - name, model (path), tp, pp, dp, vpp, global_batch, micro_batch, recompute,
        sequence_parallel, dtype, distributed_optimizer, flash_attention,
        measured_s (s/iteration), measured_mfu (optional, fraction), source (optional)
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import InputError

CASE_KEYS = {
    "name": str, "model": str, "tp": int, "pp": int, "dp": int, "vpp": int,
    "global_batch": int, "micro_batch": int, "recompute": str, "sequence_parallel": bool,
    "dtype": str, "distributed_optimizer": bool, "flash_attention": bool,
    "measured_s": float, "measured_mfu": float, "source": str,
}
REQUIRED = ("name", "model", "tp", "pp", "global_batch", "micro_batch", "measured_s")
DEFAULTS: dict[str, Any] = {"dp": 1, "vpp": 1, "recompute": "none", "sequence_parallel": False,
                            "dtype": "bf16", "distributed_optimizer": False,
                            "flash_attention": False, "measured_mfu": None, "source": ""}
FILE_KEYS = ("source", "topology", "defaults", "cases")


@dataclass(frozen=True)
class Case:
    """One measured run (paths resolved)."""

    name: str
    model_path: str
    topology_path: str
    tp: int
    pp: int
    dp: int
    vpp: int
    global_batch: int
    micro_batch: int
    recompute: str
    sequence_parallel: bool
    dtype: str
    distributed_optimizer: bool
    flash_attention: bool
    measured_s: float
    measured_mfu: float | None
    source: str


def load_cases(path: str | Path) -> tuple[str, list[Case]]:
    """Read a validation file; returns ``(source, cases)``. Raises :class:`InputError` naming the
    file, line and key for anything malformed."""
    from sim.inputs import read_text
    from sim.yaml_load import load_yaml_with_lines

    path = Path(path)
    fname = str(path)
    # encodings, duplicate keys, PyYAML's stray exceptions: sim/inputs.py (docs/errors.md)
    data, lines = load_yaml_with_lines(read_text(path, what="validation file"), fname)

    def fail(msg: str, at: tuple, key: str | None = None):
        raise InputError(msg, file=fname, line=lines.get(at), field=key)

    if not isinstance(data, dict):
        fail("expected a mapping with 'cases'", ())
    for k in data:
        if k not in FILE_KEYS:
            fail(f"unknown key (allowed: {', '.join(FILE_KEYS)})", (k,), str(k))
    if not isinstance(data.get("topology"), str):
        fail("required: path of the topology file", (), "topology")
    if not isinstance(data.get("cases"), list) or not data["cases"]:
        fail("required: a non-empty list of cases", (), "cases")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        fail("expected a mapping", ("defaults",), "defaults")
    base = path.parent
    topo = str(base / data["topology"])
    cases = []
    for i, raw in enumerate(data["cases"]):
        at = ("cases", i)
        if not isinstance(raw, dict):
            fail("expected a mapping", at, f"cases[{i}]")
        merged = {**DEFAULTS, **defaults, **raw}
        for k, v in merged.items():
            src = at + (k,) if k in raw else ("defaults", k)
            if k not in CASE_KEYS:
                fail(f"unknown key (allowed: {', '.join(CASE_KEYS)})", src, f"cases[{i}].{k}")
            want = CASE_KEYS[k]
            if v is None and k in DEFAULTS:
                continue
            ok = isinstance(v, want) and not (want is int and isinstance(v, bool))
            if want is float:
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            elif want is int:
                ok = ok and v > 0
            if not ok:
                fail(f"expected {'a positive ' if want in (int, float) else ''}"
                     f"{want.__name__}, got {v!r}", src, f"cases[{i}].{k}")
        for k in REQUIRED:
            if k not in merged:
                fail("required key is missing", at, f"cases[{i}].{k}")
        cases.append(Case(
            name=merged["name"], model_path=str(base / merged["model"]), topology_path=topo,
            tp=merged["tp"], pp=merged["pp"], dp=merged["dp"], vpp=merged["vpp"],
            global_batch=merged["global_batch"], micro_batch=merged["micro_batch"],
            recompute=merged["recompute"], sequence_parallel=merged["sequence_parallel"],
            dtype=merged["dtype"], distributed_optimizer=merged["distributed_optimizer"],
            flash_attention=merged["flash_attention"], measured_s=float(merged["measured_s"]),
            measured_mfu=merged["measured_mfu"], source=merged["source"] or data.get("source",
                                                                                      "")))
    return str(data.get("source", "")), cases


def run_case(case: Case) -> dict[str, Any]:
    """Simulate one case; returns a JSON-ready row (times in s, memory in bytes)."""
    from sim.engine import simulate
    from sim.models.cli_args import metrics
    from sim.models.generator import generate
    from sim.models.memory import check_memory
    from sim.models.parallel import ParallelConfig
    from sim.models.plan import build_model_plan
    from sim.models.spec import load_model
    from sim.network import build_network
    from sim.placement import Placement
    from sim.report import build_report
    from sim.topology import load_topology

    model = load_model(case.model_path)
    par = ParallelConfig(tp=case.tp, pp=case.pp, dp=case.dp, vpp=case.vpp,
                         micro_batch=case.micro_batch, global_batch=case.global_batch,
                         sequence_parallel=case.sequence_parallel, recompute=case.recompute,
                         dtype=case.dtype, distributed_optimizer=case.distributed_optimizer,
                         flash_attention=case.flash_attention)
    probe = load_topology(case.topology_path)
    nodes = max(1, math.ceil(par.world_size / probe.gpus_per_node))
    topo = load_topology(case.topology_path, nodes=nodes)
    plan = build_model_plan(model, par)
    mem = check_memory(model, par, topo.gpu, plan=plan)
    program = generate(model, par, topo.gpu, plan=plan)
    result = simulate(program, build_network(topo),
                      placement=Placement(par.tp, par.dp, par.pp, par.ep))
    rep = build_report(result)
    m = metrics(model, par, topo.gpu, result.iteration_ns)
    pred = rep["iteration_time_s"]
    return {
        "name": case.name, "model": model.name, "gpus": par.world_size,
        "layout": f"TP{par.tp} PP{par.pp} DP{par.dp} VPP{par.vpp}",
        "global_batch": par.global_batch, "micro_batch": par.micro_batch,
        "recompute": par.recompute, "sequence_parallel": par.sp,
        "measured_s": case.measured_s, "predicted_s": pred,
        "error_pct": (pred - case.measured_s) / case.measured_s * 100,
        "measured_mfu": case.measured_mfu, "predicted_mfu": m["mfu"],
        "bubble_fraction": rep["bubble_fraction"],
        "exposed_comm_s": {g: sum(s["exposed_comm_s"][g] for s in rep["stages"])
                           / len(rep["stages"]) for g in ("TP", "PP", "DP")},
        "memory_per_gpu_bytes": mem.peak.total_bytes, "memory_feasible": mem.feasible,
        "topology": f"{topo.name} with {nodes} nodes", "source": case.source,
    }


def run_cases(cases: list[Case], workers: int | None = None) -> list[dict[str, Any]]:
    """All cases (in file order), on ``workers`` local processes (default: all cores), with a
    progress line on a terminal (sim/progress.py)."""
    from concurrent.futures import as_completed

    from sim.progress import Progress
    from sim.sweep.runner import default_workers, stop_pool, worker_pool

    n = min(workers or default_workers(), len(cases))
    with Progress("validate: cases done", total=len(cases)) as progress:
        if n <= 1:
            out = []
            for c in cases:
                out.append(run_case(c))
                progress.advance()
            return out
        pool = worker_pool(n)
        try:
            # biggest first for load balance; results keep file order
            order = sorted(range(len(cases)),
                           key=lambda i: -cases[i].tp * cases[i].pp * cases[i].dp)
            futs = {i: pool.submit(run_case, cases[i]) for i in order}
            for _ in as_completed(futs.values()):
                progress.advance()
            rows = [futs[i].result() for i in range(len(cases))]
        except BaseException:
            stop_pool(pool)
            raise
        pool.shutdown()
        return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    errs = [r["error_pct"] for r in rows]
    return {"cases": len(rows),
            "mean_abs_error_pct": sum(abs(e) for e in errs) / len(errs),
            "mean_error_pct": sum(errs) / len(errs),
            "max_abs_error_pct": max(abs(e) for e in errs)}


def table(rows: list[dict[str, Any]], stats: dict[str, float]) -> list[str]:
    head = ["case", "GPUs", "layout", "measured_s", "predicted_s", "error_%", "MFU_meas_%",
            "MFU_pred_%"]
    body = [[r["name"], str(r["gpus"]), r["layout"], f"{r['measured_s']:.2f}",
             f"{r['predicted_s']:.2f}", f"{r['error_pct']:+.1f}",
             "–" if r["measured_mfu"] is None else f"{r['measured_mfu'] * 100:.1f}",
             f"{r['predicted_mfu'] * 100:.1f}"] for r in rows]
    w = [max([len(head[i])] + [len(b[i]) for b in body]) for i in range(len(head))]

    def fmt(cells):
        return "  ".join(c.ljust(w[i]) if i in (0, 2) else c.rjust(w[i])
                         for i, c in enumerate(cells))

    return [fmt(head)] + [fmt(b) for b in body] + [
        f"mean absolute error {stats['mean_abs_error_pct']:.1f}% over {stats['cases']} cases "
        f"(mean signed error {stats['mean_error_pct']:+.1f}%, max {stats['max_abs_error_pct']:.1f}"
        "%)"]


def default_files() -> list[Path]:
    """The shipped validation files (:mod:`sim.catalog`: package data, or the checkout's
    ``workloads/validation/``), whatever the current directory."""
    from sim.catalog import shipped

    return list(shipped("validation").values())


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun validate``; returns the exit code."""
    from sim.catalog import resolve
    from sim.cli import Parser, positive_int
    from sim.outputs import check_output_paths, is_stdout, write_json

    ap = Parser(prog="simrun validate",
                description="Predict published measured training iterations and print the "
                            "error (times in s per iteration).")
    ap.add_argument("files", nargs="*", metavar="FILE",
                    help="validation files or names of shipped ones (default: every shipped "
                         "file, see 'simrun list validation')")
    ap.add_argument("--json", metavar="PATH", help="write cases and summary as JSON")
    ap.add_argument("--workers", type=positive_int,
                    help="local worker processes (default: all cores)")
    ap.add_argument("--only", metavar="TEXT", help="run only cases whose name contains TEXT")
    args = ap.parse_args(argv)
    files = [Path(resolve("validation", f, "FILE")) for f in args.files] or default_files()
    if not files:
        raise InputError("no validation files are installed (see 'simrun list validation')")
    check_output_paths({"--json": args.json}, {"FILE": files}, stdout_ok=("--json",))
    cases: list[Case] = []
    sources = []
    for f in files:
        src, cs = load_cases(f)
        sources.append(src)
        cases += cs
    if args.only:
        cases = [c for c in cases if args.only in c.name]
        if not cases:
            raise InputError(f"no case name contains {args.only!r}", field="--only")
    rows = run_cases(cases, args.workers)
    stats = summary(rows)
    text = ["predicted vs measured time per training iteration"]
    text += [f"source: {s}" for s in dict.fromkeys(sources)]
    text += ["  " + line for line in table(rows, stats)]
    text.append("no per-case tuning: one compute model per GPU family, the network model of "
                "the topology file; see docs/validation.md")
    if not is_stdout(args.json):  # `--json -`: stdout holds the JSON only
        print("\n".join(text))
    if args.json:
        write_json(args.json, {"schema": "simrun.validate/1", "files": [str(f) for f in files],
                               **stats, "cases": rows})
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Sweep throughput: layouts per second of ``simrun sweep`` on this machine, and the check that
its best layouts equal their full simulation.

The question (256 H100, Llama 3 70B, global batch 1024, sequence 8192: which layout is fastest
and fits?) as one sweep over every valid TP × PP × VPP × CP × micro batch × schedule ×
recomputation, with sequence parallelism and the distributed optimizer. The sweep runs as one
``python -m sim.cli sweep`` process with ``--workers`` local workers (the periodic shortcut on,
the default), best-first (``--best 5``: simulated in the order of the proven lower bound until
the top 5 are proven, docs/sweeps.md) unless ``--exhaustive``; then the top ``--check``
layouts are simulated again in full (every microbatch, ``periodic=False``) in this process and
compared field by field.

    python benchmarks/sweep.py                # the whole space, --best 5
    python benchmarks/sweep.py --exhaustive   # every feasible layout simulated (long)
    python benchmarks/sweep.py --quick        # TP 8, PP 4/8, CP 1/2, 1F1B/interleaved
    python benchmarks/sweep.py --json out.json

Printed: valid layouts, how many the memory check decided, how many were simulated and
pruned, wall seconds of the sweep process and the CPU seconds of its processes, its workers
included (on Linux; the machine may be shared: CPU time is what the sweep itself used),
layouts per second (valid layouts / wall; and simulated layouts / wall), and the
top-``--check`` equality.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = ["--model", "llama3-70b", "--topo", "dgx-h100-scalable", "--nodes", "32",
        "--global-batch", "1024", "--sequence-parallel", "--distributed-optimizer"]
FULL = ["--tp", "1,2,4,8", "--pp", "1,2,4,8,16", "--vpp", "1,2,4,5", "--cp", "1,2,4",
        "--micro-batch", "1,2", "--schedule", "1f1b,interleaved,zb-h1,zb-v",
        "--recompute", "none,selective,full"]
QUICK = ["--tp", "8", "--pp", "4,8", "--vpp", "1,5", "--cp", "1,2", "--micro-batch", "1",
         "--schedule", "1f1b,interleaved", "--recompute", "selective"]
COMPARED = ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "bubble_fraction",
            "events", "memory_per_gpu_bytes")


def run_sweep(space: list[str], workers: int, out: Path, best: int | None = 5) -> dict:
    """One sweep process: its wall seconds, CPU seconds and results."""
    cmd = [sys.executable, "-m", "sim.cli", "sweep", *BASE, *space, "--workers", str(workers),
           "--out", str(out), "--no-plot", "--no-progress", "--quiet"]
    if best:
        cmd += ["--best", str(best)]
    adopt_orphans()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    reap_orphans()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if proc.returncode:
        raise SystemExit(f"sweep failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    data = json.loads((out / "results.json").read_text())
    return {"wall_s": wall, "cpu_s": cpu, "data": data, "stderr": proc.stderr}


def adopt_orphans() -> None:
    """Become the reaper of this process's orphaned descendants (Linux): the sweep's local
    workers are children of its ``forkserver`` process, which outlives the sweep's main
    process; once reaped here, its CPU time and that of the workers it reaped count in
    ``RUSAGE_CHILDREN`` (elsewhere only the main process's time is counted)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_orphans(timeout_s: float = 30.0) -> None:
    """Wait for the descendants adopted by :func:`adopt_orphans` (the forkserver ends when
    the sweep's main process has ended)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def check_top(data: dict, n: int) -> list[dict]:
    """The top ``n`` rows against their full simulation (every microbatch)."""
    sys.path.insert(0, str(ROOT))
    from dataclasses import replace

    from sim.models import load_model
    from sim.sweep import SweepContext, Training
    from sim.sweep.evaluate import evaluate
    from sim.sweep.space import SweepPoint
    from sim.topology import load_topology

    model = load_model("llama3-70b")
    topo = load_topology("dgx-h100-scalable", nodes=32)
    out = []
    for row in [r for r in data["rows"] if r["status"] == "ok"][:n]:
        lay = SweepPoint(row["tp"], row["pp"], row["dp"], row["vpp"], row["micro_batch"],
                         row["ep"], row.get("cp", 1), row.get("zero", 0),
                         _schedule_of(row["layout"]))
        training = Training(global_batch=1024, sequence_parallel=True,
                            distributed_optimizer=True,
                            recompute=row.get("recompute", "selective"))
        label = (("recompute", row["recompute"]),) if "recompute" in row else ()
        ctx = SweepContext(model, topo, training, periodic=False)
        full = evaluate(ctx, replace(lay, variant=label))
        diff = {k: (row[k], full.get(k)) for k in COMPARED if row[k] != full.get(k)}
        out.append({"layout": row["layout"], "equal": not diff, "diff": diff})
    return out


def _schedule_of(key: str) -> str:
    for name in ("interleaved", "zb-h1", "zb-v", "1f1b"):
        if f"-{name}" in key:
            return name
    return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the small space (see the module)")
    p.add_argument("--exhaustive", action="store_true",
                   help="simulate every feasible layout (default: --best 5)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--check", type=int, default=5, help="top layouts checked in full")
    p.add_argument("--json", help="write the numbers here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        got = run_sweep(QUICK if args.quick else FULL, args.workers, Path(tmp) / "s",
                        None if args.exhaustive else args.check)
    data = got["data"]
    simulated = data["ok"] + data.get("inapplicable", 0) + data["errors"]
    top = check_top(data, args.check)
    res = {"space": "quick" if args.quick else "full", "workers": args.workers,
           "valid_layouts": data["layouts"], "infeasible": data["infeasible"],
           "mode": "exhaustive" if args.exhaustive else f"--best {args.check}",
           "simulated": simulated, "pruned": data.get("pruned", 0),
           "wall_s": round(got["wall_s"], 1), "cpu_s": round(got["cpu_s"], 1),
           "layouts_per_s": round(data["layouts"] / got["wall_s"], 2),
           "simulated_per_s": round(simulated / got["wall_s"], 3),
           "top": top, "top_equal_full": all(t["equal"] for t in top)}
    for k, v in res.items():
        if k != "top":
            print(f"{k:>16}: {v}")
    for t in top:
        print(f"  {t['layout']}: {'equal to the full simulation' if t['equal'] else t['diff']}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0 if res["top_equal_full"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

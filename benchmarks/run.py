"""Scale and speed benchmarks (issue: 1k to 64k GPUs in seconds).

Runs each case as a whole ``simrun`` process (start-up included), several times, and reports
the best wall time, the simulation's own time and events per second (from ``--timing``) and
the process's peak resident memory. Goals are checked and printed.

    python benchmarks/run.py                # all cases, 3 repetitions, table on stdout
    python benchmarks/run.py --quick        # one repetition, skip the per-rank case
    python benchmarks/run.py --json out.json
    python benchmarks/run.py --instructions # also count instructions with valgrind (slow;
                                            # repeatable where wall time is noisy)

Numbers depend on the machine; the README records them for the 2-core reference machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = "workloads/aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt"
MODEL_ARGS = ["--model", "workloads/models/gpt3-175b.yaml", "--topo",
              "topologies/dgx-h100-scalable.yaml", "--tp", "8", "--pp", "16", "--micro-batch",
              "1", "--sequence-parallel", "--recompute", "selective", "--distributed-optimizer"]


def model_case(gpus: int) -> list[str]:
    """GPT-3 175B, TP 8 × PP 16, 16 microbatches per DP replica: DP grows with the GPUs while
    every stage's work stays the same."""
    dp = gpus // 128
    return MODEL_ARGS + ["--nodes", str(gpus // 8), "--global-batch", str(16 * dp)]


CASES = [
    ("seed 1024 GPUs (AICB, TP8 PP16 DP8)", ["--workload", SEED, "--topo",
                                              "topologies/dgx-a100-1024.yaml"]),
    ("GPT-3 175B, 1,024 GPUs", model_case(1024)),
    ("GPT-3 175B, 4,096 GPUs", model_case(4096)),
    ("GPT-3 175B, 16,384 GPUs", model_case(16384)),
    ("GPT-3 175B, 65,536 GPUs", model_case(65536)),
    ("seed 1024 GPUs, one failed NIC (hybrid)", ["--workload", SEED, "--topo",
                                                 "topologies/dgx-a100-1024.yaml",
                                                 "--fail-nic", "37.3"]),
    ("seed 1024 GPUs, --per-rank", ["--workload", SEED, "--topo",
                                    "topologies/dgx-a100-1024.yaml", "--per-rank"]),
]
TIMING = re.compile(r"timing: simulate ([0-9.]+) s, (\d+) events .*?(\d+) simulated ranks")


def run_once(args: list[str]) -> dict:
    """One ``simrun`` process: wall s, peak RSS MB, simulate s, events, simulated ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "sim.cli", *args, "--quiet", "--timing", "--json",
               os.path.join(tmp, "r.json")]
        t0 = os.times().elapsed
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = os.times().elapsed - t0
        err = proc.stderr.read()
        proc.stdout.read()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {err.strip()}")
        m = TIMING.search(err)
        rep = json.loads(Path(tmp, "r.json").read_text())
    return {"wall_s": wall, "peak_rss_MB": usage.ru_maxrss / 1024, "simulate_s": float(m[1]),
            "events": int(m[2]), "simulated_ranks": int(m[3]),
            "iteration_time_s": rep["iteration_time_s"]}


def instructions(args: list[str]) -> int | None:
    """Instructions executed by one ``simrun`` process (valgrind callgrind), or None."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg", sys.executable,
               "-m", "sim.cli", *args, "--quiet"]
        err = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True).stderr
    m = re.search(r"I\s+refs:\s+([\d,]+)", err)
    return int(m[1].replace(",", "")) if m else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (best is kept)")
    ap.add_argument("--quick", action="store_true", help="1 run per case, no per-rank case")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--instructions", action="store_true",
                    help="also count each case's instructions with valgrind (GPT-3 cases)")
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    rows = []
    for name, case in CASES:
        if args.quick and "--per-rank" in case:
            continue
        runs = [run_once(case) for _ in range(repeat)]
        best = min(runs, key=lambda r: r["wall_s"])
        best["name"] = name
        best["peak_rss_MB"] = max(r["peak_rss_MB"] for r in runs)
        if args.instructions and name.startswith("GPT-3"):
            best["instructions"] = instructions(case)
        rows.append(best)
        print(f"{name:<44} wall {best['wall_s']:7.3f} s  simulate {best['simulate_s']:7.3f} s  "
              f"{best['events']:>8} events  {best['events'] / best['simulate_s']:>9,.0f} ev/s  "
              f"peak {best['peak_rss_MB']:6.1f} MB  ranks {best['simulated_ranks']}",
              flush=True)
    by = {r["name"]: r for r in rows}
    goals = [("1024-GPU seed, whole process < 1.0 s",
              by[CASES[0][0]]["wall_s"] < 1.0)]
    small, big = by.get(CASES[1][0]), by.get(CASES[4][0])
    if small and big:
        ratio = big["wall_s"] / small["wall_s"]
        goals.append((f"1,024 -> 65,536 GPUs wall-time growth {ratio:.2f}x <= 1.5x", ratio <= 1.5))
        if small.get("instructions") and big.get("instructions"):
            print(f"instructions: 1,024 GPUs {small['instructions']:,}, 65,536 GPUs "
                  f"{big['instructions']:,} ({big['instructions'] / small['instructions']:.2f}x)")
        goals.append((f"peak memory at 65,536 GPUs {big['peak_rss_MB']:.0f} MB < 500 MB",
                      big["peak_rss_MB"] < 500))
    pr = by.get(CASES[6][0])
    if pr:
        goals.append((f"per-rank 1,024 GPUs {pr['wall_s']:.1f} s < 30 s", pr["wall_s"] < 30))
    print()
    for text, ok in goals:
        print(f"{'PASS' if ok else 'MISS'}  {text}")
    if args.json:
        Path(args.json).write_text(json.dumps({"cases": rows, "goals": [
            {"goal": t, "met": ok} for t, ok in goals]}, indent=2) + "\n")
    return 0 if all(ok for _, ok in goals) else 1


if __name__ == "__main__":
    sys.exit(main())

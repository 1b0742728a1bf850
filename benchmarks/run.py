"""Speed benchmarks that survive a loaded machine: every case as a ratio to a reference process.

Each case runs as a whole ``simrun`` process (``python -m sim.cli``: the command line, then the
scenario pipeline :func:`sim.scenario.run_scenario`; start-up included). In every round the
reference process ``python -c "import simpy, numpy, yaml"`` (the libraries simrun builds on;
a workload-file run with stages of at most 256 ranks no longer imports numpy, docs/scale.md)
runs first, then each case once; after ``--repeat`` rounds (default 5) a case's ratio is the
**median over the rounds of its time divided by the reference's of the same round** (paired
runs). A case is reported as absolute wall and CPU (user + system) seconds (medians) and as
those ratios to the reference measured in the same run: a loaded machine slows both alike, so
the ratios move far less than the seconds. Main runs also report the engine's events per
second (``--timing``), beside raw SimPy's on the same machine (:func:`simpy_events_per_s`: a
process yielding bare timeouts). ``--instructions`` also counts the instructions of each
process with valgrind (callgrind; slow, but independent of the load).

    python benchmarks/run.py                 # all cases, median of 5 paired rounds
    python benchmarks/run.py --quick         # 1 round, no per-rank / micro-test cases
    python benchmarks/run.py --json out.json
    python benchmarks/run.py --instructions

Goals are ratios to the reference: the 1024-GPU seed ≤ 1.5× (the product goal), its
``--per-rank`` run ≤ 10×. The absolute goals on the quiet 2-core machine are converted with
a reference of 0.1 s: AICB's all-to-all micro-test ≤ 5 s → 50×, one Llama 3 70B run of 128
microbatches ≤ 5 s → 50×, ``simrun collective --op
alltoall --gpus 1024`` ≤ 2 s → 20×; GPT-3 on 65,536 GPUs ≤ 1.5× GPT-3 on 1,024.
They are checked on the CPU-time ratio (on a loaded machine a
process's CPU time is close to its wall time on a quiet one; wall ratios are printed too).
The sources are compiled to bytecode first, as an installed package is (``PYTHONDONTWRITEBYTECODE``
would otherwise make every run compile them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = "workloads/aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt"
A100 = "topologies/dgx-a100-1024.yaml"
REFERENCE = ["-c", "import simpy, numpy, yaml"]
MODEL_ARGS = ["--model", "workloads/models/gpt3-175b.yaml", "--topo",
              "topologies/dgx-h100-scalable.yaml", "--tp", "8", "--pp", "16", "--micro-batch",
              "1", "--sequence-parallel", "--recompute", "selective", "--distributed-optimizer"]


# the single run of docs/sweeps.md's question: a pipeline of 128 microbatches × 5 chunks
# (the periodic shortcut: three short runs, sim/scenario/periodic_run.py)
LLAMA_128 = ["--model", "llama3-70b", "--topo", "topologies/dgx-h100-1024.yaml", "--gpus", "256",
             "--tp", "4", "--pp", "4", "--cp", "2", "--vpp", "5", "--micro-batch", "1",
             "--global-batch", "1024", "--sequence-parallel", "--distributed-optimizer"]


def model_case(gpus: int) -> list[str]:
    """GPT-3 175B, TP 8 × PP 16, 16 microbatches per DP replica: DP grows with the GPUs while
    every stage's work stays the same."""
    dp = gpus // 128
    return MODEL_ARGS + ["--nodes", str(gpus // 8), "--global-batch", str(16 * dp)]


# (name, simrun arguments, goal: CPU-time ratio to the reference or None, in --quick?)
CASES: list[tuple[str, list[str], float | None, bool]] = [
    ("1024-GPU AICB seed (TP8 PP16 DP8)", ["--workload", SEED, "--topo", A100], 1.5, True),
    ("GPT-3 175B, 1,024 GPUs", model_case(1024), None, True),
    ("GPT-3 175B, 4,096 GPUs", model_case(4096), None, False),
    ("GPT-3 175B, 16,384 GPUs", model_case(16384), None, False),
    ("GPT-3 175B, 65,536 GPUs", model_case(65536), None, True),
    ("1024-GPU seed, one failed NIC (hybrid)", ["--workload", SEED, "--topo", A100,
                                                "--fail-nic", "37.3"], None, False),
    ("1024-GPU seed, --per-rank", ["--workload", SEED, "--topo", A100, "--per-rank"], 10.0,
     False),
    ("Llama 3 70B, 256 H100, TP4 PP4 CP2 VPP5, 128 microbatches", LLAMA_128, 50.0, False),
    ("AICB all_to_all micro-test, 1024 GPUs", ["--workload",
                                               "workloads/aicb-micro-all-to-all.txt",
                                               "--topo", A100], 50.0, False),
    ("collective alltoall, 1024 GPUs, 8 B-1 GiB", ["collective", "--topo", A100, "--op",
                                                   "alltoall", "--gpus", "1024"], 20.0, True),
]
GROWTH = ("GPT-3 175B, 1,024 GPUs", "GPT-3 175B, 65,536 GPUs", 1.5)
TIMING = re.compile(r"timing: simulate ([0-9.]+) s, (\d+) events .*?(\d+) simulated ranks")
SIMULATED = re.compile(r"microbatches: (\d+) simulated")


def _command(args: list[str], tmp: str) -> list[str]:
    if args[:1] == ["-c"]:
        return [sys.executable, *args]
    if args[:1] == ["collective"]:
        return [sys.executable, "-m", "sim.cli", *args, "--json", os.path.join(tmp, "r.json")]
    return [sys.executable, "-m", "sim.cli", *args, "--quiet", "--timing", "--json",
            os.path.join(tmp, "r.json")]


def run_once(args: list[str]) -> dict:
    """One process: wall s, CPU s (user + system), peak RSS MB, and for a main run the
    simulation's own time, events and simulated ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = os.times().elapsed
        proc = subprocess.Popen(_command(args, tmp), cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = os.times().elapsed - t0
        err = proc.stderr.read()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {err.strip()}")
    out = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
           "peak_rss_MB": usage.ru_maxrss / 1024}
    m = TIMING.search(err)
    if m:
        out.update(simulate_s=float(m[1]), events=int(m[2]), simulated_ranks=int(m[3]))
        # a periodic model run reports the full run's events, extrapolated, and those it
        # simulated (sim/scenario/periodic_run.py): events/s counts the simulated ones
        short = SIMULATED.search(err)
        out["simulated_events"] = int(short[1]) if short else out["events"]
    return out


def instructions(args: list[str]) -> int | None:
    """Instructions executed by one process (valgrind callgrind), or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg",
               *_command(args, tmp)]
        err = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True).stderr
    m = re.search(r"I\s+refs:\s+([\d,]+)", err)
    return int(m[1].replace(",", "")) if m else None


SIMPY_EVENTS = 200_000
_SIMPY_PROBE = f"""
import time, simpy
env = simpy.Environment()
def p(env):
    for _ in range({SIMPY_EVENTS}):
        yield env.timeout(1)
env.process(p(env))
t0 = time.process_time()
env.run()
print(env.now / (time.process_time() - t0))
"""


def simpy_events_per_s() -> float:
    """Raw SimPy on this machine: bare timeouts of one process per CPU second (the floor of a
    SimPy step; the engine's events each also run the simulation's own work)."""
    out = subprocess.run([sys.executable, "-c", _SIMPY_PROBE], capture_output=True, text=True,
                         check=True).stdout
    return float(out.strip())


def _median(values: list[float]) -> float:
    return statistics.median(values)


def measure(cases, repeat: int, count_instructions: bool) -> tuple[dict, list[dict]]:
    """``repeat`` interleaved rounds of the reference and every case: medians of the seconds
    and of each round's ratio to that round's reference."""
    ref_runs: list[dict] = []
    runs: dict[str, list[dict]] = {name: [] for name, *_ in cases}
    for _ in range(repeat):
        ref_runs.append(run_once(REFERENCE))
        for name, args, *_ in cases:
            runs[name].append(run_once(args))
    ref = {"wall_s": _median([r["wall_s"] for r in ref_runs]),
           "cpu_s": _median([r["cpu_s"] for r in ref_runs]), "rounds": repeat,
           "simpy_events_per_s": simpy_events_per_s()}
    if count_instructions:
        ref["instructions"] = instructions(REFERENCE)
    rows = []
    for name, args, goal, _ in cases:
        rs = runs[name]
        best = dict(rs[0])
        best.update(name=name, goal_ratio=goal, wall_s=_median([r["wall_s"] for r in rs]),
                    cpu_s=_median([r["cpu_s"] for r in rs]),
                    peak_rss_MB=max(r["peak_rss_MB"] for r in rs))
        best["wall_ratio"] = _median([r["wall_s"] / f["wall_s"] for r, f in zip(rs, ref_runs,
                                                                                 strict=True)])
        best["cpu_ratio"] = _median([r["cpu_s"] / f["cpu_s"] for r, f in zip(rs, ref_runs,
                                                                              strict=True)])
        if "simulate_s" in best:
            best["simulate_s"] = _median([r["simulate_s"] for r in rs])
            best["events_per_s"] = best["simulated_events"] / best["simulate_s"]
        if count_instructions:
            best["instructions"] = instructions(args)
            if best["instructions"] and ref.get("instructions"):
                best["instructions_ratio"] = best["instructions"] / ref["instructions"]
        rows.append(best)
    return ref, rows


def goals(rows: list[dict]) -> list[tuple[str, bool]]:
    by = {r["name"]: r for r in rows}
    out = [(f"{r['name']}: CPU {r['cpu_ratio']:.2f}x the reference <= {r['goal_ratio']:g}x",
            r["cpu_ratio"] <= r["goal_ratio"]) for r in rows if r["goal_ratio"]]
    small, big, most = by.get(GROWTH[0]), by.get(GROWTH[1]), GROWTH[2]
    if small and big:
        g = big["cpu_s"] / small["cpu_s"]
        out.append((f"GPT-3 1,024 -> 65,536 GPUs: CPU {g:.2f}x <= {most}x", g <= most))
        out.append((f"peak memory at 65,536 GPUs {big['peak_rss_MB']:.0f} MB < 500 MB",
                    big["peak_rss_MB"] < 500))
    return out


def format_table(ref: dict, rows: list[dict]) -> str:
    head = ("| case | wall (s) | CPU (s) | wall / ref | CPU / ref | goal (CPU / ref) | "
            "simulate (s) | events | events/s | peak MB |")
    lines = [head, "|" + "---|" * 10,
             f"| reference `python -c \"import simpy, numpy, yaml\"` | {ref['wall_s']:.3f} | "
             f"{ref['cpu_s']:.3f} | 1 | 1 | | | | | |"]
    for r in rows:
        goal = f"≤ {r['goal_ratio']:g}×" if r["goal_ratio"] else ""
        sim = f"{r['simulate_s']:.3f}" if "simulate_s" in r else ""
        ev = f"{r['events']:,}" if "events" in r else ""
        rate = f"{r['events_per_s']:,.0f}" if "events_per_s" in r else ""
        lines.append(f"| {r['name']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | "
                     f"{r['wall_ratio']:.2f} | {r['cpu_ratio']:.2f} | {goal} | {sim} | {ev} | "
                     f"{rate} | {r['peak_rss_MB']:.0f} |")
    lines.append("")
    lines.append(f"medians of {ref['rounds']} paired rounds; raw SimPy (one process yielding "
                 f"bare timeouts): {ref['simpy_events_per_s']:,.0f} events/s")
    if any("instructions" in r for r in rows):
        lines.append("")
        lines.append(f"instructions: reference {ref.get('instructions') or 0:,}")
        for r in rows:
            if r.get("instructions"):
                lines.append(f"  {r['name']}: {r['instructions']:,} "
                             f"({r.get('instructions_ratio', 0):.2f}x)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5,
                    help="paired rounds (medians are reported)")
    ap.add_argument("--quick", action="store_true", help="1 round, the quick cases only")
    ap.add_argument("--only", metavar="TEXT", help="only the cases whose name contains TEXT")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--instructions", action="store_true",
                    help="also count each process's instructions with valgrind (slow)")
    args = ap.parse_args(argv)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "sim"], cwd=ROOT, check=True)
    cases = [c for c in CASES if (c[3] or not args.quick)
             and (not args.only or args.only in c[0])]
    ref, rows = measure(cases, 1 if args.quick else args.repeat, args.instructions)
    print(format_table(ref, rows))
    print()
    results = goals(rows)
    for text, ok in results:
        print(f"{'PASS' if ok else 'MISS'}  {text}")
    if args.json:
        Path(args.json).write_text(json.dumps({"reference": ref, "cases": rows, "goals": [
            {"goal": t, "met": ok} for t, ok in results]}, indent=2) + "\n")
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())

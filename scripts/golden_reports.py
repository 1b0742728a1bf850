"""Regenerate (or check) the golden JSON reports that pin simrun's behaviour.

The cases are the shipped examples: both AICB workloads, the operator table, a model-driven
GPT-3 run, a small MoE run, a fault run and a small sweep. `python scripts/golden_reports.py
--write` rewrites `tests/golden/`; `tests/test_golden_reports.py` runs the same cases and
compares byte for byte. Regenerate deliberately (and say why in the commit) when a change is
meant to alter results.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"

# name -> simrun arguments (paths relative to the repository root); the report goes to --json.
CASES: dict[str, list[str]] = {
    "aicb-1024": [
        "--workload", "workloads/aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt",
        "--topo", "topologies/dgx-a100-1024.yaml",
    ],
    "aicb-512": [
        "--workload", "workloads/aicb-gpt13b-tp8-pp8-512gpu.txt",
        "--topo", "topologies/dgx-a100-512.yaml",
    ],
    "optable": [
        "--workload", "workloads/optable-gpt2-large-block.tsv",
        "--topo", "topologies/tiny-nvlink-4.yaml",
    ],
    "gpt3-175b": [
        "--model", "workloads/models/gpt3-175b.yaml", "--topo", "topologies/dgx-a100-1024.yaml",
        "--tp", "8", "--pp", "8", "--vpp", "3", "--global-batch", "1536",
        "--sequence-parallel", "--recompute", "selective", "--distributed-optimizer",
    ],
    # MoE with expert parallelism across tensor-parallel peers (expert TP = TP, the default)
    "moe-ep": [
        "--model", "workloads/models/moe-gpt-small.yaml",
        "--topo", "topologies/dgx-h100-scalable.yaml", "--nodes", "2", "--tp", "2", "--pp", "2",
        "--ep", "4", "--global-batch", "64", "--sequence-parallel", "--distributed-optimizer",
    ],
    "fault-slow-gpu": [
        "--workload", "workloads/aicb-gpt13b-tp8-pp8-512gpu.txt",
        "--topo", "topologies/dgx-a100-512.yaml", "--slow-gpu", "300:1.5",
    ],
}
SWEEP = [
    "sweep", "--model", "workloads/models/gpt2-medium.yaml", "--topo",
    "topologies/tiny-fattree-8.yaml", "--tp", "1,2", "--pp", "1,2", "--global-batch", "16",
    "--workers", "1", "--no-plot", "--no-progress", "--quiet",
]


def _simrun(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "sim.cli", *args]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def generate(out: Path) -> dict[str, Path]:
    """Run every case, writing `<name>.json` (and the sweep's `sweep.json`) into `out`."""
    files = {}
    for name, args in CASES.items():
        path = out / f"{name}.json"
        _simrun([*args, "--json", str(path), "--quiet"])
        files[name] = path
    sweep_dir = out / "sweep-dir"
    _simrun([*SWEEP, "--out", str(sweep_dir)])
    shutil.copyfile(sweep_dir / "results.json", out / "sweep.json")
    files["sweep"] = out / "sweep.json"
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite tests/golden/")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp))
        bad = []
        for name, path in files.items():
            golden = GOLDEN / path.name
            if opts.write:
                GOLDEN.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, golden)
            elif not golden.exists() or golden.read_bytes() != path.read_bytes():
                bad.append(name)
    print("differ: " + ", ".join(bad) if bad else "all golden reports identical")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

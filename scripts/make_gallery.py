#!/usr/bin/env python3
"""Regenerate the figures in plots/ from the shipped examples (deterministic).

Usage (from anywhere; paths are resolved against the repository root)::

    python scripts/make_gallery.py

Every figure is produced by the ``simrun`` command recorded next to it in plots/manifest.json
(its arguments parsed by the command line, :func:`sim.cli.run.scenario_of`, and run in-process
by the scenario pipeline, :func:`sim.scenario.run_and_write`, as the console script does), with
the SHA-256 of the JSON report that command writes. tests/test_plots_gallery.py re-runs the
commands and compares those digests, so a stale gallery (the simulator's numbers changed) is
caught; rerun this script then. Running it twice gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.cli import build_parser  # noqa: E402
from sim.cli.run import scenario_of  # noqa: E402
from sim.files.outputs import write_json  # noqa: E402
from sim.scenario import run_and_write  # noqa: E402

PLOTS = "plots"
W1024 = "workloads/aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt"
W512 = "workloads/aicb-gpt13b-tp8-pp8-512gpu.txt"
T1024 = "topologies/dgx-a100-1024.yaml"
T512 = "topologies/dgx-a100-512.yaml"

# (figure files and the flags that write them, title, simrun arguments)
RUNS = [
    ({"timeline-1024gpu-1f1b.png": "--plot", "breakdown-1024gpu-1f1b.png": "--breakdown-plot"},
     "1024-GPU AICB workload (TP 8, PP 16, DP 8), 1F1B, 16 microbatches, 128 DGX A100 nodes",
     ["--workload", W1024, "--topo", T1024]),
    ({"timeline-512gpu-interleaved-v8.png": "--plot",
      "breakdown-512gpu-interleaved-v8.png": "--breakdown-plot"},
     "512-GPU AICB workload (TP 8, PP 8, DP 8), interleaved 1F1B with 8 chunks per stage, "
     "8 microbatches",
     ["--workload", W512, "--topo", T512, "--microbatches", "8"]),
    ({"timeline-512gpu-pp4-interleaved-v2.png": "--plot"},
     "small interleaved case: the 512-GPU workload on 4 stages with 2 chunks each, "
     "8 microbatches",
     ["--workload", W512, "--topo", T512, "--pp", "4", "--vpp", "2", "--microbatches", "8"]),
]

# schedule comparison (ranked bars): the 512-GPU workload, 8 microbatches
SCHEDULES = [
    ("GPipe", ["--schedule", "gpipe", "--vpp", "1"]),
    ("1F1B", ["--schedule", "1f1b", "--vpp", "1"]),
    ("interleaved v=2", ["--schedule", "interleaved", "--vpp", "2"]),
    ("interleaved v=4", ["--schedule", "interleaved", "--vpp", "4"]),
    ("interleaved v=8", ["--schedule", "interleaved", "--vpp", "8"]),
]
SCHEDULE_FIGURE = "schedules-512gpu.png"
WORKED_FIGURE = "timeline-worked-example.png"
SCHEDULE_BASE = ["--workload", W512, "--topo", T512, "--microbatches", "8"]


def run(args: list[str], outputs: list[str]) -> tuple[dict, str]:
    """Run simrun with ``args + outputs``; return the report and its SHA-256."""
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "report.json")
        run_and_write(scenario_of(build_parser().parse_args([*args, *outputs, "--json", rep])))
        data = Path(rep).read_bytes()
    return json.loads(data), hashlib.sha256(data).hexdigest()


def command(args: list[str]) -> str:
    return "simrun " + " ".join(args)


def worked_example(path: str) -> None:
    """docs/engine.md's worked example (p = 2, M = 2, 1F1B, f = 10 ns, b = 20 ns, 5 ns
    transfers), drawn from the engine directly: a figure to check by eye against the table."""
    from sim.comm import GroupKind
    from sim.engine import simulate
    from sim.network.simple import AlphaBetaNetwork
    from sim.program.pipeline import PipelineProgram, StageProgram
    from sim.program.workload import Layer, Phase
    from sim.report import build_report
    from sim.viz.timeline import plot_timeline

    lay = Layer("layer", Phase(10), Phase(10), Phase(10))
    prog = PipelineProgram(tp=1, pp=2, dp=1, ep=1, vpp=1, microbatches=2, pp_bytes=5,
                           stages=[StageProgram(s, [(lay,)]) for s in range(2)],
                           schedule="1f1b", source="docs/engine.md worked example")
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.PP: 1.0}), record_spans=True)
    plot_timeline(res, path, report=build_report(res, topology="α–β, 5 ns per transfer"),
                  flag="gallery")


def main_gallery() -> int:
    os.chdir(ROOT)
    (ROOT / PLOTS).mkdir(exist_ok=True)
    manifest_path = ROOT / PLOTS / "manifest.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"figures": []}
    figures = []
    for files, title, args in RUNS:
        outputs = [x for name, flag in files.items() for x in (flag, f"{PLOTS}/{name}")]
        _, digest = run(args, outputs)
        for name, flag in files.items():
            figures.append({"file": f"{PLOTS}/{name}", "title": title,
                            "command": command([*args, flag, f"{PLOTS}/{name}"]),
                            "runs": [{"args": args, "report_sha256": digest}]})
            print(f"wrote {PLOTS}/{name}")
    from sim.viz.breakdown import plot_sweep

    rows, runs = [], []
    for label, extra in SCHEDULES:
        args = SCHEDULE_BASE + extra
        rep, digest = run(args, [])
        rows.append({"layout": label, "iteration_time_s": rep["iteration_time_s"],
                     "feasible": True})
        runs.append({"args": args, "report_sha256": digest})
    plot_sweep(rows, f"{PLOTS}/{SCHEDULE_FIGURE}", flag="gallery",
               title="512-GPU AICB workload, 8 microbatches: iteration time by pipeline "
                     "schedule (ms, lower is better)")
    figures.append({"file": f"{PLOTS}/{SCHEDULE_FIGURE}",
                    "title": "iteration time of the 512-GPU workload by pipeline schedule",
                    "command": "; ".join(command(r["args"]) for r in runs)
                               + " (then sim.viz.breakdown.plot_sweep)",
                    "runs": runs})
    print(f"wrote {PLOTS}/{SCHEDULE_FIGURE}")
    worked_example(f"{PLOTS}/{WORKED_FIGURE}")
    figures.append({"file": f"{PLOTS}/{WORKED_FIGURE}",
                    "title": "the worked example of docs/engine.md (p = 2, M = 2, 1F1B)",
                    "command": "python scripts/make_gallery.py (worked_example: the engine on "
                               "the synthetic program of docs/engine.md)",
                    "runs": []})
    print(f"wrote {PLOTS}/{WORKED_FIGURE}")
    keep = {f["file"] for f in figures}
    for f in old.get("figures", []):
        if f["file"] not in keep and (ROOT / f["file"]).exists():
            (ROOT / f["file"]).unlink()
            print(f"removed stale {f['file']}")
    write_json(manifest_path, {
        "generator": "python scripts/make_gallery.py",
        "note": "each figure was written by its command; report_sha256 is the SHA-256 of the "
                "--json report the same arguments produce (checked by "
                "tests/test_plots_gallery.py)",
        "figures": figures}, flag="manifest")
    print(f"wrote {PLOTS}/manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main_gallery())

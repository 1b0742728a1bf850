"""The figures in docs/images/ (docs/visualisation.md), produced by simrun commands:

- ``timeline-window.png``: the 1024-GPU AICB example (TP 8 × PP 16 × DP 8, 16 microbatches)
  drawn for its first 3 microbatches only (``--plot --plot-microbatches 3``);
- ``sweep-heatmap.png``: the heatmap (with its colour bar) of the 8-layout sweep of GPT-2
  medium on 8 GPUs (``simrun sweep``'s ``heatmap.png``).

    python scripts/doc_figures.py            # rewrite docs/images/
    python scripts/doc_figures.py --out DIR  # write them elsewhere (tests/test_doc_figures.py)

Figures are byte-identical across runs (sim/viz/mpl.py), so the test compares them with the
committed files.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMELINE = ["--workload", "workloads/aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt", "--topo",
            "topologies/dgx-a100-1024.yaml", "--plot-microbatches", "3", "--quiet"]
SWEEP = ["sweep", "--model", "workloads/models/gpt2-medium.yaml", "--topo",
         "topologies/tiny-fattree-8.yaml", "--gpus", "8", "--tp", "1,2,4", "--pp", "1,2,4",
         "--global-batch", "16", "--no-progress", "--quiet", "--workers", "1"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="draw the figures of docs/images/")
    p.add_argument("--out", default=str(ROOT / "docs" / "images"))
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from sim.cli import main as simrun

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if simrun([*TIMELINE, "--plot", str(out / "timeline-window.png")]) != 0:
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        if simrun([*SWEEP, "--out", str(Path(tmp) / "s")]) != 0:
            return 1
        shutil.copyfile(Path(tmp) / "s" / "heatmap.png", out / "sweep-heatmap.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The README's what-if: one Llama 3 70B job on 256 H100, 256 B200 or 4 GB200 NVL72 racks.

Three ``simrun sweep`` runs (the same job and layout space on each system) answer it; their
ranked rows are kept in ``docs/data/whatif/<system>.json`` (the sweeps' ``results.json`` rows,
without the run-specific header). From those rows this script writes the README's table
(between the ``whatif-table`` markers) and the figure ``docs/images/whatif-systems.png``.

    python scripts/whatif_systems.py --run DIR   # run the three sweeps into DIR, then copy
                                                 # their rows to docs/data/whatif/
    python scripts/whatif_systems.py --rows-from DIR   # rows of sweeps already in DIR
    python scripts/whatif_systems.py             # README table and figure from the rows
    python scripts/whatif_systems.py --check --out DIR   # tests/test_whatif_systems.py

The figure is byte-identical across runs (sim/viz/mpl.py), so the test compares it, and the
README table, with what is committed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "whatif"
README = ROOT / "README.md"
FIGURE = "whatif-systems.png"
JOB = ["--model", "llama3-70b", "--tp", "2,4,8", "--pp", "2,4,8", "--vpp", "1,5",
       "--micro-batch", "1", "--global-batch", "1152", "--dtype", "fp8",
       "--distributed-optimizer", "--sequence-parallel", "--tp-comm-overlap"]
SYSTEMS = [  # (file name, README label, topology arguments, GPUs)
    ("h100", "256 × H100 SXM (`dgx-h100-1024 --gpus 256`)",
     ["--topo", "dgx-h100-1024", "--gpus", "256"], 256),
    ("b200", "256 × B200 (`dgx-b200 --gpus 256`)", ["--topo", "dgx-b200", "--gpus", "256"], 256),
    ("gb200", "4 GB200 NVL72 racks, 288 GPUs (`gb200-nvl72 --nodes 4`)",
     ["--topo", "gb200-nvl72", "--nodes", "4"], 288),
]
GPUS = {"h100": "H100-SXM5-80GB", "b200": "B200", "gb200": "GB200"}  # the topologies' GPUs
BEGIN, END = "<!-- whatif-table: scripts/whatif_systems.py -->", "<!-- /whatif-table -->"


def run_sweeps(out: Path) -> None:
    """The three sweeps (one worker each) into ``out/<system>``."""
    for name, _, topo, _ in SYSTEMS:
        cmd = [sys.executable, "-m", "sim.cli", "sweep", *JOB, *topo, "--out", str(out / name),
               "--workers", "1", "--no-progress", "--quiet"]
        subprocess.run(cmd, cwd=ROOT, check=True)


def copy_rows(out: Path) -> None:
    """The ranked rows of the sweeps in ``out/<system>`` to :data:`DATA`."""
    DATA.mkdir(parents=True, exist_ok=True)
    for name, *_ in SYSTEMS:
        rows = json.loads((out / name / "results.json").read_text())["rows"]
        (DATA / f"{name}.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


def load_rows() -> dict[str, list[dict]]:
    return {name: json.loads((DATA / f"{name}.json").read_text()) for name, *_ in SYSTEMS}


def _layout(r: dict) -> str:
    return f"TP{r['tp']} PP{r['pp']} DP{r['dp']} VPP{r['vpp']}"


def table(rows: dict[str, list[dict]]) -> str:
    """The README table: per system, feasible layouts, the fastest and its numbers."""
    out = ["| system | feasible layouts | best layout | iteration | tokens/s | "
           "tokens/s per GPU | MFU (fp8 peak) | memory per GPU |",
           "|---|---|---|---|---|---|---|---|"]
    for name, label, _, gpus in SYSTEMS:
        rs = rows[name]
        ok = [r for r in rs if r["status"] == "ok"]
        best = _best(rs)
        out.append(f"| {label} | {len(ok)} of {len(rs)} | {_layout(best)} | "
                   f"{best['iteration_time_s']:.2f} s | {best['tokens_per_s']:,.0f} | "
                   f"{best['tokens_per_s'] / gpus:,.0f} | {best['mfu']:.1%} | "
                   f"{best['memory_per_gpu_bytes'] / 1e9:.1f} of "
                   f"{best['memory_capacity_bytes'] / 1e9:.0f} GB |")
    from sim.kernels.gpus import find

    per_gpu = {name: _best(rows[name])["tokens_per_s"] / gpus for name, _, _, gpus in SYSTEMS}
    fp8 = {name: find(gpu).peak_tflops["fp8"] for name, gpu in GPUS.items()}
    ratios = ", ".join(f"{name.upper()} {per_gpu[name] / per_gpu['h100']:.2f}×"
                       for name in ("b200", "gb200"))
    peaks = ", ".join(f"{fp8[name] / fp8['h100']:.2f}×" for name in ("b200", "gb200"))
    out += ["", f"Tokens/s per GPU against H100: {ratios} (their dense fp8 peaks in the GPU "
                f"catalogue: {peaks})."]
    return "\n".join(out) + "\n"


def _best(rs: list[dict]) -> dict:
    return min((r for r in rs if r["status"] == "ok"),
               key=lambda r: (r["iteration_time_s"], r["layout"]))


def draw(rows: dict[str, list[dict]], path: Path) -> None:
    """Tokens/s per GPU of every feasible layout on each system, the fastest labelled."""
    from sim.viz.mpl import render

    def paint(fig):
        ax = fig.add_subplot(1, 1, 1)
        for x, (name, _, _, gpus) in enumerate(SYSTEMS):
            ok = sorted((r for r in rows[name] if r["status"] == "ok"),
                        key=lambda r: (r["iteration_time_s"], r["layout"]))
            ys = [r["tokens_per_s"] / gpus for r in ok]
            ax.scatter([x] * len(ys), ys, s=18, color="#9db4cf", zorder=2)
            ax.scatter([x], ys[:1], s=40, color="#1f4e79", zorder=3)
            ax.annotate(_layout(ok[0]), (x, ys[0]), textcoords="offset points",
                        xytext=(8, -3), fontsize=8)
        ax.set_xticks(range(len(SYSTEMS)))
        ax.set_xticklabels([label.split(" (")[0] for _, label, _, _ in SYSTEMS])
        ax.set_xlim(-0.5, len(SYSTEMS) - 0.3)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("tokens/s per GPU")
        ax.grid(axis="y", color="#dddddd", zorder=0)
        ax.set_title("Llama 3 70B, FP8, global batch 1152 × 8192 tokens: every feasible "
                     "layout (dark: fastest)")

    render(paint, path, width_px=900, height_px=420, flag="--out")


def readme_with(text: str, tab: str) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{tab}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", metavar="DIR", help="run the three sweeps into DIR first")
    p.add_argument("--rows-from", metavar="DIR",
                   help="take the rows of sweeps already run into DIR/<system> (as --run)")
    p.add_argument("--out", default=str(ROOT / "docs" / "images"), help="figure folder")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if the README table differs from the rows' (README untouched)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.run:
        run_sweeps(Path(args.run))
    if args.run or args.rows_from:
        copy_rows(Path(args.run or args.rows_from))
    rows = load_rows()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    draw(rows, Path(args.out) / FIGURE)
    text = README.read_text(encoding="utf-8")
    new = readme_with(text, table(rows))
    if args.check:
        return 0 if new == text else 1
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``simrun validate``: flags and printed table of the check against measured iterations
(:mod:`sim.validation.cases`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sim.cli.calibration_args import (
    add_validate_calibration_arguments,
    validation_calibration,
)
from sim.cli.types import Parser, positive_int
from sim.engine.periodic import VALIDATE_TOLERANCE
from sim.errors import InputError
from sim.files.catalog import resolve
from sim.files.outputs import check_output_paths, is_stdout, write_json
from sim.validation.cases import Case, default_files, load_cases, run_cases
from sim.validation.summary import ROLES, summary

#: MFU_meas_%: simrun's model FLOPs over the measured time (one FLOP count for every case; the
#: published MFU, where a source gives one, is ``measured_mfu`` in the JSON)
HEAD = ["case", "GPU", "GPUs", "layout", "measured_s", "predicted_s", "error_%", "MFU_meas_%",
        "MFU_pred_%"]
GROUP_TITLE = {
    "calibration": "calibration cases (their measurements set a physical parameter; see "
                   "'calibrates' in the data file)",
    "evaluation": "evaluation cases (never used to set a parameter)",
}


def build_parser() -> Parser:
    ap = Parser(prog="simrun validate",
                description="Predict published measured training iterations and print the "
                            "error (times in s per iteration), calibration and evaluation "
                            "cases apart.")
    ap.add_argument("files", nargs="*", metavar="FILE",
                    help="validation files or names of shipped ones (default: every shipped "
                         "file, see 'simrun list validation')")
    ap.add_argument("--json", metavar="PATH", help="write cases and summary as JSON")
    ap.add_argument("--workers", type=positive_int,
                    help="local worker processes (default: all cores)")
    ap.add_argument("--only", metavar="TEXT", help="run only cases whose name contains TEXT")
    ap.add_argument("--full-simulation", action="store_true",
                    help="simulate every microbatch of every case (default: a case whose "
                         "pipeline is periodic is extrapolated from short runs, exactly or "
                         f"within {VALIDATE_TOLERANCE:g} of a period; each row's 'simulated' "
                         "in --json says which)")
    add_validate_calibration_arguments(ap)
    return ap


def _row(r: dict[str, Any]) -> list[str]:
    return [r["name"], r["gpu"].split("-")[0], str(r["gpus"]), r["layout"],
            f"{r['measured_s']:.3g}" if r["measured_s"] < 1 else f"{r['measured_s']:.2f}",
            f"{r['predicted_s']:.3g}" if r["predicted_s"] < 1 else f"{r['predicted_s']:.2f}",
            f"{r['error_pct']:+.1f}",
            f"{r['mfu_at_measured_s'] * 100:.1f}",
            f"{r['predicted_mfu'] * 100:.1f}"]


def _simulated_line(rows: list[dict[str, Any]]) -> str:
    """How many cases were simulated in full, extrapolated exactly, or within the tolerance."""
    modes = Counter(r["periodic_mode"] for r in rows)
    return (f"simulated: {modes['full']} of {len(rows)} cases in full, {modes['exact']} "
            f"extrapolated exactly from short periodic runs, {modes['within']} within "
            f"{VALIDATE_TOLERANCE:g} of a period (--full-simulation: every microbatch; "
            "sim/engine/periodic.py)")


def _stats_line(s: dict[str, Any]) -> str:
    return (f"mean absolute error {s['mean_abs_error_pct']:.1f}% over {s['cases']} "
            f"case{'s' if s['cases'] != 1 else ''} "
            f"(mean signed error {s['mean_error_pct']:+.1f}%, max {s['max_abs_error_pct']:.1f}%)")


def table(rows: list[dict[str, Any]], stats: dict[str, Any]) -> list[str]:
    """The printed report: one block per role (its rows and error statistics), then all."""
    body = [_row(r) for r in rows]
    w = [max([len(HEAD[i])] + [len(b[i]) for b in body]) for i in range(len(HEAD))]

    def fmt(cells):
        return "  ".join(c.ljust(w[i]) if i in (0, 1, 3) else c.rjust(w[i])
                         for i, c in enumerate(cells))

    out = [fmt(HEAD)]
    for role in ROLES:
        group = [b for b, r in zip(body, rows, strict=True) if r["role"] == role]
        if not group:
            continue
        out.append(f"{GROUP_TITLE[role]}:")
        out += [fmt(b) for b in group]
        out.append(f"{role}: {_stats_line(stats[role])}")
    out.append(f"all: {_stats_line(stats['all'])}")
    # weak-scaling rows of one source weigh as much as their count: each source (and GPU
    # family) of each role gets its own statistics
    # by GPU where a family holds several GPUs (B200, GB200 and GB300 are one family)
    for what, title in (("source", "source"), ("gpu_family", "GPU family"), ("gpu", "GPU")):
        for role in ROLES:
            groups = stats.get(f"{role}_by_{what}", {})
            shown = {"source": len(groups) > 1, "gpu_family": bool(groups),
                     "gpu": len(groups) > len(stats.get(f"{role}_by_gpu_family", {}))}[what]
            if shown:
                out.append(f"{role} cases by {title}:")
                out += [f"  {k}: {_stats_line(s)}" for k, s in groups.items()]
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun validate``; returns the exit code."""
    args = build_parser().parse_args(argv)
    files = [Path(resolve("validation", f, "FILE")) for f in args.files] or default_files()
    if not files:
        raise InputError("no validation files are installed (see 'simrun list validation')")
    check_output_paths({"--json": args.json}, {"FILE": files}, stdout_ok=("--json",))
    cases: list[Case] = []
    sources = []
    groups = []  # (file, its cases): the sources of --calibrate-within-source
    for f in files:
        src, cs = load_cases(f)
        sources.append(src)
        cs = [c for c in cs if not args.only or args.only in c.name]
        groups.append((str(f), cs))
        cases += cs
    # the files the validation files name are inputs too: none may be the --json output
    check_output_paths({"--json": args.json}, {"model": [c.model_path for c in cases],
                                               "topology": [c.topology_path for c in cases]},
                       stdout_ok=("--json",))
    if args.only and not cases:
        raise InputError(f"no case name contains {args.only!r}", field="--only")
    rows = run_cases(cases, args.workers, None if args.full_simulation else VALIDATE_TOLERANCE)
    cal_text, cal_json = validation_calibration(args, groups, rows)
    stats = summary(rows)
    text = ["predicted vs measured time per training iteration"]
    text += [f"source: {s}" for s in dict.fromkeys(sources)]
    text += ["  " + line for line in table(rows, stats)]
    missing = sorted({o for r in rows for o in r["not_modelled"]})
    if missing:
        text.append("options and stack costs of the measured runs not modelled yet (the "
                    f"prediction runs without them; per case in --json): {'; '.join(missing)}")
    over = [f"{r['name']} ({r['memory_per_gpu_bytes'] / 1e9:.1f} GB)" for r in rows
            if not r["memory_feasible"]]
    if over:  # a measured run that does not fit is a finding about the memory model
        text.append("measured runs that do not fit simrun's memory model (predicted anyway): "
                    + ", ".join(over))
    text.append("no per-case tuning: one compute model per GPU family, the network model of "
                "the topology file; see docs/validation.md")
    text.append(_simulated_line(rows))
    text += cal_text
    if not is_stdout(args.json):  # `--json -`: stdout holds the JSON only
        print("\n".join(text))
    if args.json:
        write_json(args.json, {"schema": "simrun.validate/4", "files": [str(f) for f in files],
                               "summary": stats, "cases": rows, **cal_json})
    return 0

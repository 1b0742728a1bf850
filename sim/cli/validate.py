"""``simrun validate``: flags of the check against measured iterations (:mod:`sim.validate`)."""

from __future__ import annotations

from pathlib import Path

from sim.cli.types import Parser, positive_int
from sim.errors import InputError
from sim.outputs import check_output_paths, is_stdout, write_json
from sim.validate import Case, default_files, load_cases, run_cases, summary, table


def build_parser() -> Parser:
    ap = Parser(prog="simrun validate",
                description="Predict published measured training iterations and print the "
                            "error (times in s per iteration).")
    ap.add_argument("files", nargs="*", metavar="FILE",
                    help="validation files (default: workloads/validation/*.yaml)")
    ap.add_argument("--json", metavar="PATH", help="write cases and summary as JSON")
    ap.add_argument("--workers", type=positive_int,
                    help="local worker processes (default: all cores)")
    ap.add_argument("--only", metavar="TEXT", help="run only cases whose name contains TEXT")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun validate``; returns the exit code."""
    args = build_parser().parse_args(argv)
    files = [Path(f) for f in args.files] or default_files()
    if not files:
        raise InputError("no validation files found (looked for workloads/validation/*.yaml)")
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

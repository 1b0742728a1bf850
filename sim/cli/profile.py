"""``simrun profile``: measure the kernels a model and layout need (or a standard sweep) on the
local GPU and write a kernel table (docs/kernel-tables.md).

    simrun profile --model workloads/models/llama3-8b.yaml --tp 1 --attention-backend flash \\
        --out my-gpu.csv
    simrun profile --standard --out my-gpu.csv

Needs ``pip install 'simrun[profile]'`` (PyTorch with CUDA) and a visible CUDA GPU; without
them it exits 2 with one line saying what is missing. ``--list`` prints the kernels it would
measure without measuring (no GPU needed). The table is written atomically.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from sim.cli.args import add_layout_arguments, add_model_arguments, layout_request, model_input
from sim.cli.fields import cli_error
from sim.cli.types import Parser, positive_float
from sim.errors import SimrunError, UsageError
from sim.files.outputs import check_output_paths
from sim.kernels.table import write_table
from sim.models.vocab.spec import load_model
from sim.profiling.profile import kernels_for, missing_requirement, standard_kernels
from sim.scenario.model_run import parallel_config


def build_parser() -> Parser:
    p = Parser(prog="simrun profile",
               description="Measure on the local GPU the kernels a model and layout need (or a "
                           "standard sweep) and write a kernel table for --kernel-table.")
    p.add_argument("--standard", action="store_true",
                   help="measure the fixed standard sweep instead of a model's kernels")
    p.add_argument("--out", metavar="PATH", help="kernel table (CSV) to write")
    p.add_argument("--list", action="store_true",
                   help="print the kernels that would be measured and exit (no GPU needed)")
    p.add_argument("--warmup-ms", type=positive_float, default=10.0,
                   help="warm-up per kernel in ms (default: %(default)s)")
    p.add_argument("--rep-ms", type=positive_float, default=40.0,
                   help="timed runs per kernel in ms (default: %(default)s)")
    add_layout_arguments(p)
    add_model_arguments(p)
    return p


def _specs(args):
    if args.standard:
        if args.model:
            raise UsageError("give either --standard or --model", field="--standard")
        return standard_kernels()
    if not args.model:
        raise UsageError("give --model (with the layout flags) or --standard", field="--model")
    mi = model_input(args)
    model = load_model(mi.path)
    req = layout_request(args)
    training = mi.training
    if training.global_batch is None and not req.microbatches:
        # the kernels do not depend on the number of microbatches: one per iteration
        training = replace(training, global_batch=training.micro_batch * (req.dp or 1))
    gpus = req.gpus or (req.tp or 1) * (req.pp or 1) * (req.dp or 1)
    return kernels_for(model, parallel_config(req, training, model, gpus))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun profile``; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
        specs = _specs(args)
        if args.list:
            for s in specs:
                print(s.kind, " ".join(f"{k}={v}" for k, v in s.shape))
            return 0
        if not args.out:
            raise UsageError("required to measure (or --list)", field="--out")
        check_output_paths({"--out": args.out}, {"--model": args.model} if args.model else {})
        missing = missing_requirement()
        if missing:
            raise UsageError(missing)
        from sim.profiling.measure import profile  # needs PyTorch (checked above)

        table, skipped = profile(specs, args.warmup_ms, args.rep_ms,
                                 progress=lambda line: print(line, file=sys.stderr))
        write_table(table, args.out)
    except SimrunError as exc:
        print(f"simrun profile: error: {cli_error(exc)}", file=sys.stderr)
        return exc.exit_code
    for s in skipped:
        print(f"skipped {s}", file=sys.stderr)
    print(f"wrote {len(table.rows)} kernels measured on {table.gpu} to {args.out}"
          + (f" ({len(skipped)} skipped)" if skipped else ""))
    return 0

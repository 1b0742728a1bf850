"""``simrun generate``: write the workload generated for a model and layout as AICB text.

    simrun generate --model workloads/models/gpt3-175b.yaml --topo topologies/dgx-a100-1024.yaml \\
        --tp 8 --pp 8 --vpp 3 --global-batch 1536 --sequence-parallel --recompute selective \\
        --out gpt3-tp8-pp8.txt

The flags are those of ``simrun --model`` (layout, batch, training options); the topology gives
the GPU (compute times) and the default GPU count. The file is written atomically
(:func:`sim.models.aicb_writer.write_aicb`); ``simrun --workload FILE --topo T`` reads it back.
What the text format cannot hold (docs/models.md, "AICB writer"): per-stage optimizer epilogues
(only the representative stage's is written, ``--stage``) and the interleaved schedule's
microbatch group size; the iteration time read back equals the model run's when the stages'
epilogues do not decide it (tests/test_model_cli.py).
"""

from __future__ import annotations

import sys

from sim.calibration.profile import apply_to_topology
from sim.cli.args import (
    add_layout_arguments,
    add_model_arguments,
    layout_request,
    model_input,
)
from sim.cli.calibration_args import add_calibration_arguments, calibration_of
from sim.cli.fields import cli_error
from sim.cli.types import Parser, given_flags, nonneg_int, positive_int
from sim.errors import SimrunError, UsageError
from sim.files.outputs import check_output_paths
from sim.models.aicb_writer import write_aicb
from sim.models.compute_setup import ComputeOptions
from sim.options import applicable
from sim.scenario import model_run
from sim.topology import load_topology
from sim.words import plural


def build_parser() -> Parser:
    p = Parser(prog="simrun generate",
               description="Write the workload generated for a model spec and parallel layout in "
                           "SimAI/AICB text format (times in ns, sizes in bytes).")
    p.add_argument("--topo", metavar="PATH|NAME", required=True,
                   help="cluster topology YAML or the name of a shipped one (its GPU sets the "
                        "compute times)")
    p.add_argument("--nodes", type=positive_int, help="number of nodes (default: the file's)")
    p.add_argument("--out", metavar="PATH", required=True, help="AICB text file to write")
    p.add_argument("--stage", type=nonneg_int, default=0,
                   help="representative pipeline stage whose rows and optimizer epilogue are "
                        "written (default: %(default)s)")
    p.add_argument("--process-ns", type=nonneg_int, default=0,
                   help="value of the process-time column (AICB writes 100; default "
                        "%(default)s: generated collectives have no post-delay)")
    add_layout_arguments(p)
    add_model_arguments(p, required=True)
    add_calibration_arguments(p.add_argument_group("calibration (compute times only: the file "
                                                   "holds message sizes, not network times)"))
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun generate``; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
        check_output_paths({"--out": args.out}, {"--model": args.model, "--topo": args.topo})
        profile = calibration_of(args)
        topo = apply_to_topology(load_topology(args.topo, nodes=args.nodes), profile,
                                 args.calibration_any_cluster)
        run = _model_run(args, topo, ComputeOptions(calibration=profile,
                                                    calibration_any_cluster=args
                                                    .calibration_any_cluster))
        # training options without effect on this layout are refused (sim/options/applicable.py)
        given = given_flags(build_parser(), list(argv or []))
        applicable.check_effect(given, [], run)
        prog = run.program
        if args.stage >= prog.pp:
            raise UsageError(f"stage {args.stage} outside 0..{prog.pp - 1}", field="--stage")
        rows = write_aicb(prog, args.out, stage=args.stage, process_ns=args.process_ns)
    except SimrunError as exc:
        print(f"simrun generate: error: {cli_error(exc)}", file=sys.stderr)
        return exc.exit_code
    par = run.par
    print(f"wrote {rows} rows to {args.out}: {run.model.name}, TP {par.tp} x PP {par.pp} x DP "
          f"{par.dp} (EP {par.ep}, VPP {par.vpp}), "
          f"{plural(par.microbatches, 'microbatch', 'microbatches')} of "
          f"{par.micro_batch}; representative stage {args.stage}")
    print(f"memory: {run.memory.reason}")
    if profile is not None:
        print("\n".join(profile.assumptions()))
    return 0


def _model_run(args, topo, compute: ComputeOptions):
    """The model run the flags describe on ``topo``."""
    mi = model_input(args)
    return model_run(mi.path, layout_request(args), mi.training, topo,
                     ignore_memory=mi.ignore_memory, compute=compute)

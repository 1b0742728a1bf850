"""``simrun megatron [simrun flags] -- <Megatron-LM arguments>``: the main run with its model,
layout, batch and training options given as Megatron-LM's ``pretrain_gpt.py`` arguments (as
``--megatron-args FILE`` reads them from a file; :mod:`sim.cli.jobs`)."""

from __future__ import annotations

import time

from sim.errors import UsageError

USAGE = "simrun megatron --topo PATH|NAME [--nodes N] [simrun flags] -- <Megatron-LM arguments>"


def build_parser():
    """The run's parser (the flags before ``--``)."""
    from sim.cli import build_parser as run_parser

    p = run_parser()
    p.prog, p.usage = "simrun megatron", USAGE
    p.description = ("Simulate a Megatron-LM job given by its pretrain_gpt.py arguments after "
                     "'--' (every one applied, stated irrelevant to timing or refused: "
                     "docs/job-formats.md); the flags before '--' are simrun's: " +
                     (p.description or ""))
    return p


def main(argv: list[str]) -> int:
    if "--" not in argv:
        if {"-h", "--help"} & set(argv):
            build_parser().print_help()
            return 0
        raise UsageError(f"simrun megatron: give the Megatron-LM arguments after '--': "
                         f"{USAGE}")
    k = argv.index("--")
    from sim.cli import SUBCOMMANDS
    from sim.cli.run import run

    return run(argv[:k], SUBCOMMANDS, time.perf_counter(), megatron=argv[k + 1:])

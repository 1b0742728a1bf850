"""Command-line interface: ``simrun --workload W --topo T`` and the subcommands.

This package is the only place that parses arguments: each module builds a subcommand's
parser, turns the arguments into typed options (:mod:`sim.scenario.options`) and calls the
domain code. Exit codes: 0 success, 2 bad input or usage, 1 internal error; messages go to
stderr as one line (``simrun: error: <file>:<line>: <field>: <message>``). Set
``SIMRUN_DEBUG=1`` to see tracebacks of internal errors.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable

from sim.cli.fields import cli_error, register_parsers
from sim.cli.run import build_parser as _build_parser
from sim.cli.run import run as _run
from sim.errors import SimrunError, UsageError
from sim.files.inputs import track_inputs
from sim.runtime.process import exit_status, quiet_shutdown, terminate_as_interrupt

_T0 = time.perf_counter()

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, help)
    "collective": ("sim.cli.collective", "nccl-tests-style collective time/bandwidth predictor"),
    "inspect": ("sim.cli.inspect", "show what simrun infers from a model-description file"),
    "generate": ("sim.cli.generate", "write a generated workload in AICB text format"),
    "megatron": ("sim.cli.megatron", "run a Megatron-LM job given by its arguments after '--'"),
    "sweep": ("sim.cli.sweep", "simulate many parallel layouts and rank them"),
    "validate": ("sim.cli.validate", "compare predictions with published measured iterations"),
    "profile": ("sim.cli.profile", "measure kernels on the local GPU and write a kernel table"),
    "calibrate": ("sim.cli.calibrate", "fit calibration knobs to measured runs, logs, "
                                       "nccl-tests; kernel tables from profiler traces"),
    "list": ("sim.cli.listing", "list the shipped topologies, models, workloads and kernel tables "
                             "usable by name"),
}


def build_parser():
    """The parser of the main run (``simrun --help``)."""
    return _build_parser(SUBCOMMANDS)


def _parsers() -> list:
    """The main run's parser, then each subcommand's (one that cannot be imported is left
    out): where :mod:`sim.cli.fields` finds the flags of option names."""
    parsers = [build_parser()]
    for module, _ in SUBCOMMANDS.values():
        try:
            parsers.append(importlib.import_module(module).build_parser())
        except ImportError:
            continue
    return parsers


register_parsers(_parsers)


def run(argv: list[str]) -> int:
    """The main job: workload + topology → simulated iteration → report."""
    return _run(argv, SUBCOMMANDS, _T0)


def _subcommand(name: str) -> Callable[[list[str]], int]:
    module, _ = SUBCOMMANDS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise UsageError(f"subcommand {name!r} is not available in this build") from None
        raise
    return mod.main


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``simrun`` console script; returns the exit code. Run as the program
    (``argv`` None), signals after the command end it quietly (:mod:`sim.runtime.process`)."""
    as_program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # nothing to run: say how to run something (a usage error, exit 2)
        sys.stderr.write(
            "usage: simrun (--workload PATH|NAME | --model PATH|NAME) --topo PATH|NAME "
            "[options]\n       simrun <subcommand> [options]\n\n" + build_parser().epilog
            + "\n\nexample: simrun --workload aicb-gpt-h16384-tp8-pp16-dp8-1024gpu --topo "
            "dgx-a100-1024\nrun 'simrun --help' for every flag, with its unit and default\n")
        return 2
    restore = terminate_as_interrupt()
    track_inputs(True)  # no output of this command may replace a file it read
    try:
        return _guarded(argv)
    except KeyboardInterrupt as e:  # a signal while an error was being reported
        return _stopped(e)
    finally:
        track_inputs(False)
        restore()
        if as_program:
            quiet_shutdown()


def _stopped(e: KeyboardInterrupt) -> int:
    code, word = exit_status(e)
    print(f"simrun: {word}", file=sys.stderr)
    return code


def _guarded(argv: list[str]) -> int:
    """Run the command of ``argv``; every error becomes one line and an exit code."""
    try:
        if argv and argv[0] in SUBCOMMANDS:
            return int(_subcommand(argv[0])(argv[1:]) or 0)
        return run(argv)
    except SimrunError as e:
        print(f"simrun: error: {cli_error(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:  # Ctrl-C and the stop signals (sim.runtime.process)
        return _stopped(e)
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - last-resort guard: no traceback for users
        if os.environ.get("SIMRUN_DEBUG"):
            import traceback

            traceback.print_exc()
        print(f"simrun: internal error: {type(e).__name__}: {e} (set SIMRUN_DEBUG=1 for a "
              "traceback)", file=sys.stderr)
        return 1

"""No silent what-ifs: a flag that would not change the simulation of this input is refused.

Every flag of the main run either changes the simulation (and an assumption line says how) or
is refused here with exit 2 and a one-line reason, for each input kind:

- ``--model``: the flags that only say how a workload *file* is read (``--format``,
  ``--bytes-per-element``, ``--missing-backward-ratio``; ``--pp-comm-bytes`` and
  ``--row-placement`` are refused by sim/models/cli_args.py);
- a workload file: the flags of the model-driven generator (training options and batch sizes):
  the file fixes compute times and message sizes;
- an AICB file: the operator-table flags (``--bytes-per-element``: AICB sizes are bytes;
  ``--missing-backward-ratio``: AICB gives backward times), and a ``--tp`` or ``--ep`` other than
  the header's (the rows' compute times and collective sizes are those of the header's layout
  and would stay so);
- an operator table: ``--missing-backward-ratio`` when the file gives backward times;
- ``--model``: training options without effect on this layout (:func:`check_model_effect`).

``given``: the destinations of the flags given on the command line (:func:`given_flags`).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from sim.errors import UsageError
from sim.workload.model import Workload

MODEL_ONLY = {  # dest: flag
    "dp": "--dp", "micro_batch": "--micro-batch", "global_batch": "--global-batch",
    "sequence_parallel": "--sequence-parallel", "recompute": "--recompute", "dtype": "--dtype",
    "distributed_optimizer": "--distributed-optimizer", "flash_attention": "--flash-attention",
    "no_overlap_grad_reduce": "--no-overlap-grad-reduce", "ignore_memory": "--ignore-memory",
}
FILE_ONLY = {"format": "--format", "bytes_per_element": "--bytes-per-element",
             "missing_backward_ratio": "--missing-backward-ratio"}
OPTABLE_ONLY = {"bytes_per_element": "--bytes-per-element",
                "missing_backward_ratio": "--missing-backward-ratio"}


class _Absent(list):
    """Default of every option while finding which were given (:func:`given_flags`)."""


def given_flags(probe: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """Destinations of the options present in ``argv`` (even when given their default value).
    ``probe``: a fresh parser, spent by this call (its defaults are suppressed)."""
    # the "not given" marker: not a string (argparse converts string defaults with the flag's
    # type) and a list (append actions copy their default and append to the copy)
    absent = _Absent()
    dests = vars(probe.parse_args(argv))
    probe.set_defaults(**dict.fromkeys(dests, absent))
    return {k for k, v in vars(probe.parse_args(argv)).items() if v is not absent}


def _refuse(given: set[str], flags: dict[str, str], why: str) -> None:
    for dest in sorted(given & set(flags)):
        raise UsageError(why, field=flags[dest])


def check_model_input(given: Iterable[str]) -> None:
    """Refuse the workload-file flags with ``--model``."""
    _refuse(set(given), FILE_ONLY, "applies to workload files (how a file is read); with "
                                   "--model the workload is generated, leave it out")


def check_model_effect(given: Iterable[str], tp: int, dp: int, fits: bool) -> None:
    """Refuse training options that change nothing for this layout: sequence parallelism at
    TP 1 (Megatron ignores it), the distributed optimizer and ``--no-overlap-grad-reduce`` at
    DP 1 (no data-parallel group), ``--ignore-memory`` when the layout fits."""
    given = set(given)
    for dest, cond, why in (
            ("sequence_parallel", tp == 1, "needs TP > 1 (Megatron ignores it at TP 1)"),
            ("distributed_optimizer", dp == 1, "needs DP > 1 (there is nothing to shard the "
                                               "optimizer state over at DP 1)"),
            ("no_overlap_grad_reduce", dp == 1, "needs DP > 1 (no gradient reduction at DP 1)"),
            ("ignore_memory", fits, "the layout fits in GPU memory, so it changes nothing")):
        if dest in given and cond:
            raise UsageError(f"{why}; leave it out", field=MODEL_ONLY[dest])


def check_workload_input(given: Iterable[str], wl: Workload) -> None:
    """Refuse what a workload file ``wl`` cannot simulate (see the module docstring)."""
    given = set(given)
    _refuse(given, MODEL_ONLY, "applies to --model runs only: a workload file fixes the "
                               "compute times and message sizes; leave it out, or use --model")
    if wl.format == "aicb":
        _refuse(given, OPTABLE_ONLY, "applies to operator tables only (AICB files give sizes "
                                     "in bytes and their own backward times); leave it out")
    elif "missing_backward_ratio" in given and not any(
            "--missing-backward-ratio" in a for a in wl.assumptions):
        raise UsageError("the file gives backward times, so the ratio would change nothing; "
                         "leave it out", field="--missing-backward-ratio")


def check_file_layout(wl: Workload, tp: int | None, ep: int | None) -> None:
    """A ``--tp`` / ``--ep`` other than the AICB header's would keep the header's compute."""
    h = wl.header
    for flag, asked, declared, key in (("--tp", tp, h.tp, "model_parallel_NPU_group"),
                                       ("--ep", ep, h.ep, "ep")):
        if asked is not None and declared is not None and asked != declared:
            raise UsageError(
                f"{asked} differs from {wl.path}'s {flag[2:].upper()} {declared} (header "
                f"{key}, line 1): the file's compute times and collective sizes are those of "
                f"{flag[2:].upper()} {declared} and would stay so; generate the workload for "
                f"{flag[2:].upper()} {asked} with --model instead", field=flag)

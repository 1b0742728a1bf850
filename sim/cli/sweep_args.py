"""Which of the main run's flags ``simrun sweep`` takes, and how it applies them per layout.

Every flag of ``simrun`` (:func:`sim.cli.run.build_parser`) is either a flag of the sweep, with
the same name, meaning and checks (defined once, in the modules both parsers call), or listed
in :data:`EXCLUDED` with the reason a sweep refuses it (one line, exit 2);
tests/test_sweep_flags.py enforces it, so a new run flag cannot be forgotten. The layout
flags (``--tp``, ``--pp``, ``--vpp``, ``--micro-batch``, ``--ep``, ``--context-parallel-size``,
``--zero``, ``--schedule``, ``--expert-tensor-parallel-size``) take comma-separated lists in a
sweep (:data:`LISTS`).

A given flag that does not apply to one layout of the sweep is treated as the single run
treats it there, per layout (docs/sweeps.md):

- where Megatron refuses the combination (:func:`sim.models.parallel_checks.validate`) or the
  single run refuses the flag as changing nothing (:func:`sim.options.applicable.check_layout`), the
  layout is skipped with that reason, like an invalid layout (``skipped_invalid``);
- ``--nccl-channels`` / ``--comm-overlap-slowdown`` in a layout with no asynchronous collective
  (known only after simulating it): the row has status ``inapplicable`` and that reason;
- :data:`WHERE_IT_APPLIES`: the sweep's original shared options, applied in the layouts where
  they apply and documented so (Megatron runs the others without them), as before.
"""

from __future__ import annotations

import argparse

from sim.cli.host_args import host_dispatch_ns
from sim.errors import UsageError
from sim.options.applicable import TABLE
from sim.scenario.options import SimulationOptions

_FILES = ("applies to workload files; a sweep generates every layout's workload from --model")
_OUTPUT = ("a per-run output; a sweep writes results.csv, results.json and its plots to --out "
           "(run the chosen layout with simrun for it)")
_FAULT = ("a what-if of one layout on a non-uniform cluster; a sweep ranks layouts on the "
          "healthy cluster (run the chosen layout with simrun and this flag)")
_NOISE = ("run-to-run variability of one layout; a sweep ranks the deterministic iteration "
          "time (run the chosen layout with simrun --jitter)")
_MODE = ("a simulation mode, not a what-if: the same iteration time, only slower; a sweep "
         "simulates one representative rank per stage")

EXCLUDED: dict[str, str] = {
    **dict.fromkeys(("--workload", "--format", "--bytes-per-element",
                     "--missing-backward-ratio", "--pp-comm-bytes", "--row-placement",
                     "--source-gpu", "--compute-scale"), _FILES),
    "--dp": "each layout's DP is GPUS / (TP·PP·CP): give --gpus",
    "--microbatches": "each layout's microbatches follow from --global-batch, its micro batch "
                      "and its DP",
    "--ignore-memory": "a sweep records a layout that does not fit as infeasible, with its "
                       "memory, and ranks only layouts that can run",
    **dict.fromkeys(("--per-rank", "--no-fuse"), _MODE),
    **dict.fromkeys(("--jitter", "--samples", "--seed"), _NOISE),
    **dict.fromkeys(("--slow-gpu", "--slow-node", "--degrade-link", "--fail-nic"), _FAULT),
    **dict.fromkeys(("--json", "--trace", "--trace-ranks", "--trace-format", "--chakra",
                     "--force", "--plot", "--plot-window", "--plot-microbatches",
                     "--breakdown-plot", "--verbose", "--timing"), _OUTPUT),
    "--version": "the program's version: run simrun --version",
    "--nproc-per-node": "a sweep runs one process on every GPU of its nodes; run the chosen "
                        "layout with simrun --nproc-per-node",
    **dict.fromkeys(("--megatron-args", "--job-config"),
                    "a job file fixes one layout; sweep its model with --model and the layout "
                    "lists (the job's Megatron flag names are aliases here too)"),
}

LISTS = ("--tp", "--pp", "--vpp", "--micro-batch", "--ep", "--context-parallel-size", "--cp",
         "--zero", "--schedule", "--expert-tensor-parallel-size",
         # Megatron-LM's names of the same flags
         "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
         "--virtual-pipeline-model-parallel-size", "--micro-batch-size",
         "--expert-model-parallel-size")
"""Run flags that a sweep takes as comma-separated lists of the run's values."""

WHERE_IT_APPLIES = ("--sequence-parallel", "--distributed-optimizer", "--overlap-grad-reduce",
                    "--no-overlap-grad-reduce")
"""Applied only in the layouts where they apply, as the sweep always did: sequence parallelism
at TP > 1 (Megatron-LM turns it off at TP 1), the distributed optimizer at ZeRO stage 0 (at DP 1
it shards over one rank), the gradient-reduction overlap where DP > 1."""


class _Refused(argparse.Action):
    """A run flag a sweep refuses: one-line error with the reason, whatever follows it."""

    def __init__(self, option_strings, dest, reason: str, **kw):
        super().__init__(option_strings, dest, nargs="*", metavar="ARG",
                         help=f"refused in a sweep: {reason}", **kw)
        self.reason = reason

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ARG002
        raise UsageError(f"not a sweep flag: {self.reason}", field=option_string)


def add_refused_arguments(p: argparse.ArgumentParser) -> None:
    """Register every :data:`EXCLUDED` flag (listed in ``--help`` with its reason) so that
    giving one is refused with its reason, not argparse's 'unrecognized'."""
    g = p.add_argument_group("flags of a single run that a sweep refuses (exit 2)")
    for flag, why in EXCLUDED.items():
        g.add_argument(flag, action=_Refused, reason=why, dest=f"refused_{flag[2:]}")


def refused(action: argparse.Action) -> bool:
    """Whether ``action`` is one of the refused run flags (:func:`add_refused_arguments`)."""
    return isinstance(action, _Refused)


def simulation_options(args: argparse.Namespace) -> SimulationOptions:
    """The engine options a sweep shares with the run (placement, interference, host dispatch,
    watchdog); one representative rank per stage, fused events, no noise."""
    return SimulationOptions(max_sim_time_s=args.max_sim_time_s, placement=args.placement,
                             nccl_channels=args.nccl_channels,
                             comm_overlap_slowdown=args.comm_overlap_slowdown,
                             host_dispatch_ns=host_dispatch_ns(args))


def layout_checked(given: set[str]) -> frozenset[str]:
    """The given run flags whose single-run refusals apply per layout
    (:func:`sim.options.applicable.check_layout`,
    :func:`sim.options.applicable.check_interference`): the run's
    flags (:data:`sim.options.applicable.TABLE`) but :data:`WHERE_IT_APPLIES` and the list flags
    (each value of a list is checked by the layout's own validation). ``given``: the sweep's flags
    on the command line (:func:`sim.cli.types.given_flags`)."""
    return frozenset((given & set(TABLE)) - set(WHERE_IT_APPLIES) - set(LISTS))

"""``--fp8-param-gather``: Megatron-LM's switch for FP8 parameters gathered by the distributed
optimizer (:mod:`sim.models.features.fp8_params`); its own module to keep :mod:`sim.cli.args`
small."""

from __future__ import annotations

import argparse

from sim.models.features.fp8_params import FLAG


def add_param_gather_arguments(g: argparse._ActionsContainer) -> None:
    """Add ``--fp8-param-gather`` to the model-driven workload group."""
    g.add_argument(FLAG, action="store_true", dest="fp8_param_gather",
                   help="Megatron-LM, with --dtype fp8 and --distributed-optimizer: the TE "
                        "linears' weights are FP8 parameters, quantised from the master "
                        "weights after the optimizer step (amax all-reduce in DP) and "
                        "all-gathered at 1 byte per parameter; no weight cast in the first "
                        "forward, an FP8 transpose after the all-gather")


def param_gather_options(args: argparse.Namespace) -> dict:
    """``fp8_param_gather`` of :class:`~sim.parallel.config.Training`."""
    return {"fp8_param_gather": getattr(args, "fp8_param_gather", False)}

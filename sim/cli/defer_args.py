"""``--defer-embedding-wgrad-compute`` and ``--wgrad-deferral-limit``: Megatron-LM's flags
(``ModelParallelConfig.defer_embedding_wgrad_compute`` / ``wgrad_deferral_limit``) that move the
last pipeline stage's output-layer weight-gradient GEMMs to the pipeline flush
(:mod:`sim.models.features.defer_wgrad`); their own module to keep :mod:`sim.cli.args` small."""

from __future__ import annotations

import argparse

from sim.cli.types import nonneg_int
from sim.models.features.defer_wgrad import FLAG, LIMIT_FLAG


def add_defer_arguments(g: argparse._ActionsContainer) -> None:
    """Add the two flags to the model-driven workload group."""
    g.add_argument(FLAG, action="store_true", dest="defer_embedding_wgrad_compute",
                   help="Megatron-Core: the last pipeline stage runs its output layer's "
                        "weight-gradient GEMMs (and, with sequence parallelism, the all-gathers "
                        "of their input) after its last backward, in the pipeline flush, "
                        "instead of in each microbatch's backward; needs PP > 1 and the 1f1b or "
                        "interleaved schedule")
    g.add_argument(LIMIT_FLAG, type=nonneg_int, metavar="N", dest="wgrad_deferral_limit",
                   help="with --defer-embedding-wgrad-compute: defer only the first N "
                        "microbatches (Megatron-Core's wgrad_deferral_limit; default 0 = all)")


def defer_options(args: argparse.Namespace) -> dict:
    """``defer_embedding_wgrad_compute`` and ``wgrad_deferral_limit`` of
    :class:`~sim.parallel.config.Training`."""
    return {"defer_embedding_wgrad_compute": getattr(args, "defer_embedding_wgrad_compute",
                                                     False),
            "wgrad_deferral_limit": getattr(args, "wgrad_deferral_limit", None) or 0}

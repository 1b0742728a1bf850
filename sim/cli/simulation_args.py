"""The SM-interference flags of the main run, shared with ``simrun sweep``
(:mod:`sim.engine.interference`): ``--nccl-channels`` and ``--comm-overlap-slowdown``."""

from __future__ import annotations

import argparse

from sim.cli.types import at_least_one, nonneg_int
from sim.engine.interference import DEFAULT_NCCL_CHANNELS


def add_interference_arguments(g: argparse._ActionsContainer) -> None:
    """Register ``--nccl-channels`` and ``--comm-overlap-slowdown`` in the group ``g``."""
    g.add_argument("--nccl-channels", type=nonneg_int, default=DEFAULT_NCCL_CHANNELS,
                   metavar="N",
                   help="SM interference: NCCL channels of a communicator (like "
                        "NCCL_MAX_NCHANNELS); an asynchronous collective's kernel holds one SM "
                        "per channel NCCL's tuning gives its size (at most N) while it runs "
                        "beside compute, which runs on the other SMs meanwhile; 0: overlap is "
                        "free (default: %(default)s, an observed H100 all-gather's)")
    g.add_argument("--comm-overlap-slowdown", type=at_least_one, default=1.0, metavar="F",
                   help="SM interference: factor on an asynchronous collective's time while "
                        "compute runs beside it (default: %(default)s; no published figure "
                        "found)")

"""The host-dispatch flag of the main run (:mod:`sim.engine.host`).

``--host-dispatch-us``: the CPU time to issue one GPU kernel (PyTorch eager dispatch plus the
CUDA launch). No framework has such a flag (the name is simrun's own): it is a property of the
host software stack, and no published measurement of it for Megatron-Core / Transformer Engine
training on H100 was found, so the default is 0 (the host is never the bottleneck).
"""

from __future__ import annotations

import argparse

from sim.cli.types import _number
from sim.limits import parse_float

FLAG = "--host-dispatch-us"
# µs per kernel: 0 (off) up to 1 ms (a launch is microseconds; more is a typo)
dispatch_us = _number(parse_float, lambda v: 0 <= v <= 1000, "a number of µs in [0, 1000]")


def add_host_dispatch_argument(g: argparse._ActionsContainer) -> None:
    """Register ``--host-dispatch-us`` in the group ``g``."""
    g.add_argument(FLAG, type=dispatch_us, default=0.0, metavar="US",
                   help="host (CPU) time to issue one GPU kernel, µs (simrun's name: no "
                        "framework has this flag): kernel i starts at max(GPU free, its issue "
                        "time); the host runs ahead except after the alltoall MoE dispatcher's "
                        "per-layer sync, so the kernels after it can be host-bound; --model runs "
                        "only (default: 0 = off; no published per-kernel figure for this stack "
                        "was found)")


def host_dispatch_ns(args: argparse.Namespace) -> int:
    """``--host-dispatch-us`` in whole nanoseconds."""
    return round(getattr(args, "host_dispatch_us", 0.0) * 1000)

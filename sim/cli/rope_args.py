"""``--no-rope-fusion``: Megatron-LM's flag (``store_false`` into ``apply_rope_fusion``,
megatron/training/arguments.py) that replaces Transformer Engine's fused rotary-embedding kernel
by Megatron-Core's unfused torch kernels (:mod:`sim.models.features.rope`); its own module to keep
:mod:`sim.cli.args` small."""

from __future__ import annotations

import argparse


def add_rope_arguments(g: argparse._ActionsContainer) -> None:
    """Add ``--no-rope-fusion`` to the model-driven workload group."""
    g.add_argument("--no-rope-fusion", action="store_true",
                   help="Megatron-Core's unfused rotary embedding of q and k (cos, sin, casts, "
                        "rotate_half, muls and adds: 12 forward and 5 backward kernels per "
                        "tensor) instead of Transformer Engine's fused kernel (one per tensor "
                        "and direction, the default); models with rope positions only")


def rope_options(args: argparse.Namespace) -> dict:
    """``apply_rope_fusion`` of :class:`~sim.parallel.config.Training`."""
    return {"apply_rope_fusion": not getattr(args, "no_rope_fusion", False)}

"""Training flags that ``simrun`` (with ``--model``) and ``simrun sweep`` share, defined once.

The option dataclass they fill is :class:`sim.parallel.config.Training` (through
:func:`sim.cli.args.training_of`).
"""

from __future__ import annotations

import argparse

from sim.parallel.config import ATTENTION_BACKENDS, DTYPES, RECOMPUTE


def add_shared_training_arguments(g: argparse._ActionsContainer, *, every_layout: bool) -> None:
    """Sequence parallelism, recomputation, dtype, the distributed optimizer and the attention
    backend. ``every_layout``: the sweep's wording (the flag holds in each layout it tries)."""
    where = (" in every layout with TP > 1 (default: off)" if every_layout else
             " (refused at TP 1, where it changes nothing; default: off)")
    g.add_argument("--sequence-parallel", action="store_true",
                   help=f"Megatron sequence parallelism{where}")
    g.add_argument("--recompute", choices=RECOMPUTE, default="none",
                   help="activation recomputation (default: %(default)s)")
    g.add_argument("--dtype", choices=DTYPES, default="bf16",
                   help="training dtype; its dense peak is the MFU reference (default: "
                        "%(default)s)")
    g.add_argument("--distributed-optimizer", action="store_true",
                   help="shard the optimizer state over DP (reduce-scatter gradients, all-gather "
                        "parameters)")
    g.add_argument("--flash-attention", action="store_true",
                   help="the FlashAttention-2 kernel; the same as --attention-backend flash")
    g.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default="",
                   help="Megatron-Core's attention backend: flash (FlashAttention-2), fused "
                        "(cuDNN through Transformer Engine), unfused (batched matmuls + "
                        "softmax, as Megatron-LM ran in 2022), auto (Megatron-Core's default: "
                        "Transformer Engine picks fused on Hopper and newer, flash before) "
                        "(default: auto, or flash with --flash-attention)")

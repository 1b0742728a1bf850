"""The expert-parallel layout flag of model-driven runs (Megatron-Core's name).

``--expert-tensor-parallel-size N``: each expert's weights split ``N`` ways (Megatron-Core's
expert tensor parallelism, ETP; default: the tensor-parallel size, as Megatron-LM's
``megatron/training/arguments.py`` sets it). The expert grid of a pipeline stage is then ETP ×
EP × EDP (:mod:`sim.parallel.placement`).
"""

from __future__ import annotations

import argparse

from sim.cli.types import positive_int


def add_expert_tp_argument(g: argparse._ActionsContainer) -> None:
    """Register ``--expert-tensor-parallel-size`` (dest ``etp``) in the group ``g``."""
    g.add_argument("--expert-tensor-parallel-size", type=positive_int, metavar="N", dest="etp",
                   help="MoE: expert tensor-parallel size, each expert's weights split N ways; "
                        "the stage's TP·DP·CP ranks form ETP x EP x EDP expert groups "
                        "(Megatron-Core; default: the TP size)")

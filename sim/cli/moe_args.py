"""The MoE scheduling flag of model-driven runs (Megatron-Core's name).

``--overlap-moe-expert-parallel-comm``: Megatron-Core's combined 1F1B (megatron/core/
pipeline_parallel/combined_1f1b.py; ``TransformerConfig.overlap_moe_expert_parallel_comm``):
in the steady state of the 1F1B schedules the forward of one microbatch and the backward of
another run as one op, each one's expert-parallel all-to-alls hidden behind the other's
compute (:func:`sim.pipeline.schedules.combined_1f1b`, :mod:`sim.engine.paired`).
"""

from __future__ import annotations

import argparse

from sim.errors import UsageError

FLAG = "--overlap-moe-expert-parallel-comm"


def add_moe_overlap_argument(g: argparse._ActionsContainer) -> None:
    """Register ``--overlap-moe-expert-parallel-comm`` in the group ``g``."""
    g.add_argument(FLAG, action="store_true", dest="overlap_moe_expert_parallel_comm",
                   help="MoE: Megatron-Core's EP all-to-all overlap (combined 1F1B): each "
                        "steady-state forward runs with a backward of another microbatch, "
                        "their expert-parallel all-to-alls beside each other's compute; needs "
                        "EP > 1 and, with PP > 1, the interleaved schedule")


def moe_overlap_options(args: argparse.Namespace) -> dict:
    """``overlap_moe_expert_parallel_comm`` of :class:`~sim.parallel.config.Training`."""
    return {"overlap_moe_expert_parallel_comm":
            getattr(args, "overlap_moe_expert_parallel_comm", False)}


def check_moe_overlap_flag(args: argparse.Namespace) -> None:
    """With a workload file the schedule's ops are the file's rows: refused."""
    if getattr(args, "overlap_moe_expert_parallel_comm", False):
        raise UsageError("applies to --model runs (a workload file fixes its rows and their "
                         "blocking collectives)", field=FLAG)

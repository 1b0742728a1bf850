"""Model-driven training flags that ``simrun --model`` and ``simrun sweep`` share, defined once
(same names, help and parsing in both): gradient-reduction and parameter-gather overlaps, TP
communication overlap, FP8 options, the uneven pipeline split, FSDP, the MoE routing and
scheduling options and the execution-mode flags. :func:`sim.cli.args.training_of` turns them
into :class:`sim.parallel.config.Training`; their verdicts are in
:mod:`sim.options.applicable_model`.
"""

from __future__ import annotations

import argparse

from sim.cli.execution import add_execution_arguments
from sim.cli.fp8_args import add_fp8_arguments
from sim.cli.grad_sync_args import add_grad_sync_arguments
from sim.cli.moe_args import add_moe_overlap_argument
from sim.cli.param_gather_args import add_param_gather_arguments
from sim.cli.types import positive_int


def add_overlap_arguments(g: argparse._ActionsContainer) -> None:
    """``--overlap-grad-reduce`` / ``--no-overlap-grad-reduce``, the gradient-sync flags,
    ``--overlap-param-gather``, ``--tp-comm-overlap``,
    ``--async-tensor-model-parallel-allreduce``, ``--fp8-recipe``,
    ``--fp8-param-gather``."""
    ov = g.add_mutually_exclusive_group()
    ov.add_argument("--overlap-grad-reduce", action="store_true",
                    help="Megatron-Core: DP gradient collective per bucket as its gradients are "
                         "ready in the last microbatch's backward (the default)")
    ov.add_argument("--no-overlap-grad-reduce", action="store_true",
                    help="one blocking DP gradient collective after the backward instead of "
                         "per-bucket overlap")
    add_grad_sync_arguments(g)
    g.add_argument("--overlap-param-gather", action="store_true",
                   help="Megatron-Core, with --distributed-optimizer: each bucket's parameter "
                        "all-gather runs beside the next iteration's forward; its first use "
                        "waits for it (default: all-gathers after the optimizer step)")
    g.add_argument("--tp-comm-overlap", action="store_true",
                   help="Megatron-Core with Transformer Engine userbuffers: each layer's "
                        "sequence-parallel all-gathers/reduce-scatters pipelined in chunks "
                        "with the GEMMs they feed (with CP too; MoE layers: attention and "
                        "shared experts, not routed experts) (needs --sequence-parallel)")
    g.add_argument("--async-tensor-model-parallel-allreduce", action="store_true",
                   help="Megatron-LM's flag (September 2021; on by default in later "
                        "Megatron-LM and in Transformer Engine): the column-parallel linears' "
                        "(qkv, fc1) backward TP collectives beside their dgrad/wgrad GEMMs, "
                        "the NCCL kernel taking its channels' SMs (default: serial, as the "
                        "calibration measurements behave; see docs/models.md)")
    add_fp8_arguments(g)
    add_param_gather_arguments(g)


def add_split_arguments(g: argparse._ActionsContainer) -> None:
    """Megatron-Core's uneven pipeline split."""
    g.add_argument("--decoder-first-pipeline-num-layers", "--first-stage-layers",
                   type=positive_int, metavar="N", dest="first_stage_layers",
                   help="transformer layers on the first pipeline stage; the others are split "
                        "evenly over the remaining stages (Megatron-Core)")
    g.add_argument("--decoder-last-pipeline-num-layers", "--last-stage-layers",
                   type=positive_int, metavar="N", dest="last_stage_layers",
                   help="transformer layers on the last pipeline stage (Megatron-Core)")
    g.add_argument("--account-for-embedding-in-pipeline-split", action="store_true",
                   help="count the embedding as one layer when splitting layers over stages "
                        "(first virtual stage runs one layer fewer; Megatron-Core)")
    g.add_argument("--account-for-loss-in-pipeline-split", action="store_true",
                   help="count the output layer and loss as one layer when splitting (last "
                        "virtual stage runs one layer fewer; Megatron-Core)")
    g.add_argument("--pipeline-model-parallel-layout", metavar="LAYOUT",
                   help="the layers of every virtual stage (Megatron-Core), e.g. "
                        "'Et*3|(tt|)*29,m|L': E embedding, t transformer layer, L loss, '|' "
                        "between virtual stages (stage i on rank i mod PP), '(...)*N' and 'x*N' "
                        "repeat; sets the virtual pipeline size; docs/schedules.md")


def add_fsdp_argument(g: argparse._ActionsContainer) -> None:
    g.add_argument("--fsdp", action="store_true",
                   help="PyTorch FSDP FULL_SHARD (ZeRO stage 3 semantics)")


def add_moe_arguments(g: argparse._ActionsContainer) -> None:
    """MoE routing options and Megatron-Core's EP all-to-all overlap."""
    g.add_argument("--moe-load-imbalance", type=float, default=1.0, metavar="F",
                   help="MoE: tokens the busiest expert GPU receives ÷ the balanced share "
                        "(default: %(default)s = perfectly balanced)")
    g.add_argument("--moe-expert-capacity-factor", type=float, metavar="C",
                   help="MoE: Megatron's expert capacity factor, tokens beyond it dropped "
                        "(default: dropless)")
    g.add_argument("--moe-token-dispatcher-type", choices=("alltoall", "flex"),
                   default="alltoall",
                   help="MoE: Megatron-Core's token dispatcher: alltoall (NCCL all-to-all of "
                        "every token copy) or flex (DeepEP: one copy per destination node, "
                        "hierarchical NVLink/RDMA all-to-all when EP spans nodes) (default: "
                        "%(default)s)")
    g.add_argument("--moe-shared-expert-intermediate-size", type=positive_int, metavar="N",
                   help="MoE: width of the shared-expert MLP (Megatron-Core; replaces the "
                        "model spec's shared experts)")
    add_moe_overlap_argument(g)


def add_run_training_arguments(g: argparse._ActionsContainer) -> None:
    """Every flag of this module, in the sweep's order (the run interleaves its layout
    flags)."""
    add_overlap_arguments(g)
    add_split_arguments(g)
    add_fsdp_argument(g)
    add_moe_arguments(g)
    add_execution_arguments(g)

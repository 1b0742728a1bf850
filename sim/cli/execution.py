"""The execution-mode flags of a ``--model`` run: ``--compile`` / ``--no-compile`` (torchtitan's
``training.compile``: fused element-wise kernels, or PyTorch eager) and ``--norm-type``
(torchtitan's ``model.norm_type`` in eager mode), modelled by :mod:`sim.models.features.eager`;
``--use-torch-fsdp2`` (Megatron-LM's name: PyTorch FSDP2's kernels),
:mod:`sim.models.features.fsdp2`;
``--no-rope-fusion`` (Megatron-LM's name), :mod:`sim.cli.rope_args`; Megatron-LM's
``--defer-embedding-wgrad-compute`` / ``--wgrad-deferral-limit``, :mod:`sim.cli.defer_args`."""

from __future__ import annotations

import argparse

from sim.cli.defer_args import add_defer_arguments, defer_options
from sim.cli.rope_args import add_rope_arguments, rope_options
from sim.errors import UsageError
from sim.models.features.eager import NORM_TYPES


def add_execution_arguments(g: argparse._ActionsContainer) -> None:
    """``--compile`` / ``--no-compile`` and ``--norm-type``."""
    ex = g.add_mutually_exclusive_group()
    ex.add_argument("--compile", action="store_true",
                    help="element-wise kernels fused, as Megatron-Core / Transformer Engine "
                         "and torch.compile (torchtitan's training.compile) run them (the "
                         "default)")
    ex.add_argument("--no-compile", action="store_true",
                    help="PyTorch eager, as torchtitan runs with training.compile = false: one "
                         "kernel per operator (RMSNorm, rotary embedding, SwiGLU, residual "
                         "adds); torchtitan's Llama block only")
    g.add_argument("--use-torch-fsdp2", action="store_true",
                   help="with --fsdp, PyTorch FSDP2 (fully_shard, as Megatron-LM's "
                        "--use-torch-fsdp2 and torchtitan run it): the copies around each "
                        "all-gather and reduce-scatter, gradients reduced in fp32")
    g.add_argument("--norm-type", choices=NORM_TYPES,
                   help="with --no-compile, torchtitan's model.norm_type: rmsnorm (eager "
                        "PyTorch operators) or fused_rmsnorm (its Triton kernel) (default: "
                        "rmsnorm)")
    add_rope_arguments(g)
    add_defer_arguments(g)


def execution_options(args: argparse.Namespace) -> dict:
    """``compile`` and ``norm_type`` of :class:`~sim.parallel.config.Training`."""
    return {"compile": not getattr(args, "no_compile", False),
            "norm_type": getattr(args, "norm_type", None) or "rmsnorm",
            "use_torch_fsdp2": getattr(args, "use_torch_fsdp2", False), **rope_options(args),
            **defer_options(args)}


def check_execution_flags(args: argparse.Namespace) -> None:
    """With a workload file: the file fixes its compute times, the flags would change nothing;
    ``--norm-type`` only with ``--no-compile``."""
    for dest, flag in (("compile", "--compile"), ("no_compile", "--no-compile"),
                       ("norm_type", "--norm-type"),
                       ("use_torch_fsdp2", "--use-torch-fsdp2"),
                       ("no_rope_fusion", "--no-rope-fusion"),
                       ("defer_embedding_wgrad_compute", "--defer-embedding-wgrad-compute"),
                       ("wgrad_deferral_limit", "--wgrad-deferral-limit")):
        if getattr(args, dest, None):
            raise UsageError("applies to --model runs (a workload file fixes its compute "
                             "times)", field=flag)

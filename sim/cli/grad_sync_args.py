"""``--no-delay-grad-reduce``: Megatron-LM's switch for where pipeline stages launch their
data-parallel gradient reductions (:mod:`sim.models.features.grad_sync`), and
``--grad-reduce-in-bf16``
(the gradient buffer's dtype: :mod:`sim.models.memory`, DP message sizes) and ``--ddp-bucket-size``
(parameters per DP gradient bucket, :func:`sim.models.optimizer.bucket_params`); its own module
to keep :mod:`sim.cli.args` small."""

from __future__ import annotations

import argparse

from sim.cli.types import positive_int


def add_grad_sync_arguments(g: argparse._ActionsContainer) -> None:
    """Add ``--no-delay-grad-reduce`` (alias ``--no-align-grad-reduce``, Megatron-LM's name
    since August 2024) to the model-driven workload group."""
    g.add_argument("--no-delay-grad-reduce", "--no-align-grad-reduce", action="store_true",
                   dest="no_delay_grad_reduce",
                   help="Megatron-LM: with --overlap-grad-reduce and PP > 1 (1f1b or "
                        "interleaved), every stage reduces its gradients per bucket during its "
                        "last backward. Default (Megatron's delay_grad_reduce): only stage 0 "
                        "does; the others launch theirs after their last backward (interleaved: "
                        "per model chunk, offset by the pipeline rank)")
    g.add_argument("--grad-reduce-in-bf16", action="store_true",
                   help="Megatron-LM (Megatron-Core DDP grad_reduce_in_fp32=False), dtype bf16 "
                        "or fp8: gradients accumulated and reduced in bf16, 2 bytes per "
                        "parameter in the gradient buffer and the DP collectives instead of 4; "
                        "the optimizer step casts its shard to fp32 (default: fp32 gradients)")
    g.add_argument("--ddp-bucket-size", type=positive_int, metavar="N",
                   help="Megatron-LM (Megatron-Core DDP bucket_size): parameters per DP "
                        "gradient bucket with --overlap-grad-reduce (default: Megatron-Core's "
                        "max(40,000,000, 1,000,000 x DP), DP without CP)")


def delay_of(args: argparse.Namespace) -> bool:
    """Whether the run delays the gradient reductions of stages > 0 (Megatron's default)."""
    return not getattr(args, "no_delay_grad_reduce", False)


def grad_sync_options(args: argparse.Namespace) -> dict[str, bool | int | None]:
    """The :class:`~sim.parallel.config.Training` options of this module's flags."""
    return {"delay_grad_reduce": delay_of(args),
            "grad_reduce_in_bf16": getattr(args, "grad_reduce_in_bf16", False),
            "ddp_bucket_size": getattr(args, "ddp_bucket_size", None)}

"""Megatron-Core's ``--overlap-param-gather-with-optimizer-step`` (``OptimizerConfig.
overlap_param_gather_with_optimizer_step``): the first model chunk's parameter all-gather
launched at the optimizer step, beside the step of the other chunks.

Megatron-LM (``megatron/core/optimizer/__init__.py``, ``optimizer.py``): model chunk 0's dense
parameters get a distributed optimizer of their own, first in the ``ChainedOptimizer``; its
``step_with_ready_grads`` calls ``model_chunks[0].start_param_sync(force_dispatch=True)`` right
after that optimizer's step, so chunk 0's all-gather (every bucket of the chunk, dense and
expert) runs asynchronously beside the optimizer steps of chunks 1…v−1 and of the experts.
Chunk 0's forward pre-hook in the next iteration only waits for it
(``distributed_data_parallel.py``: with the option ``start_param_sync`` returns early and no
next-bucket dispatch happens); chunks ≥ 1 keep ``--overlap-param-gather``'s all-gathers beside
the forward. ``megatron/training/training.py`` (``get_model``) then disables bucketing on every
chunk (``disable_bucketing=(model_chunk_idx > 0) or overlap_param_gather_with_optimizer_step``):
each chunk's parameters are one bucket.

In simrun's one-iteration steady state the step is split in two optimizer tasks (chunk 0's
dense parameters, then the rest), chunk 0's all-gathers are issued non-blocking between them
instead of at the iteration start, and the iteration ends when both the step and the
all-gathers are done (what the next forward of chunk 0 would wait for).

Megatron-LM's refusals (``megatron/training/arguments.py``): the distributed optimizer,
``--overlap-param-gather`` and interleaved pipeline parallelism (a virtual pipeline size) are
required. simrun's: not with ``--fp8-param-gather`` (its quantisation after the step is not
split by chunk here).
"""

from __future__ import annotations

from sim.assumption import Assumption
from sim.comm import CollKind, Comm, GroupKind
from sim.errors import UsageError
from sim.program.pipeline import Task, TaskKind

FLAG = "--overlap-param-gather-with-optimizer-step"
OPTION = "overlap_param_gather_with_optimizer_step"  # errors name the option (the CLI, its flag)


def applies(par) -> bool:
    """Whether chunk 0's all-gathers move to the optimizer step (the option is on)."""
    return par.overlap_param_gather_with_optimizer_step


def check(par) -> None:
    """Megatron-LM's refusals (``arguments.py``) and simrun's."""
    if not applies(par):
        return
    if not par.distributed_optimizer:
        raise UsageError("only supported with the distributed optimizer (Megatron-LM's check); "
                         "add --distributed-optimizer", field=OPTION)
    if not par.overlap_param_gather:
        raise UsageError("must be used with --overlap-param-gather (Megatron-LM's check)",
                         field=OPTION)
    if par.vpp == 1:
        raise UsageError("only supported with interleaved pipeline parallelism (Megatron-LM's "
                         "check: a virtual pipeline size); add --vpp", field=OPTION)
    if par.fp8_param_gather:
        raise UsageError("not modelled with --fp8-param-gather (the FP8 quantisation after the "
                         "step is not split by model chunk)", field=OPTION)


def gathers(spans, par) -> list[Task]:
    """Chunk 0's parameter all-gathers, non-blocking, one per bucket span ``(first row,
    parameters, expert, fp8 parameters)`` (one dense and one expert bucket: no bucketing)."""
    out = []
    for _first, params, expert, _fp8 in spans:
        size = par.edp if expert else par.dp_cp
        if size > 1 and params:
            out.append(Task("param_allgather.chunk0" + ("_experts" if expert else ""),
                            TaskKind.GRAD_SYNC, comm=Comm(
                                CollKind.ALLGATHER, GroupKind.DP_EP if expert else GroupKind.DP,
                                params * 2, blocking=False)))
    return out


def optimizer_tasks(chunk0_ns: int, rest_ns: int, chunk0_gathers) -> tuple[Task, ...]:
    """The optimizer step split in two: chunk 0's dense step (after every pending gradient
    collective), chunk 0's all-gathers issued after it, then the rest of the step beside
    them. The iteration ends when both are done."""
    return (Task("optimizer.chunk0", TaskKind.OPTIMIZER, compute_ns=chunk0_ns, wait_async=True),
            *chunk0_gathers,
            Task("optimizer", TaskKind.OPTIMIZER, compute_ns=rest_ns))


def notes(par) -> list[str]:
    """The assumption line (none when the option is off)."""
    if not applies(par):
        return []
    return [Assumption(
            f"{FLAG} (Megatron-Core, ChainedOptimizer): model chunk 0's dense parameters "
            "stepped first, then chunk 0's parameter all-gather (one bucket, 2 bytes/parameter) "
            "issued non-blocking beside the step of chunks 1…"
            f"{par.vpp - 1} and the experts; the next forward of chunk 0 waits for it (the "
            "iteration ends when both are done); every chunk one gradient bucket "
            "(Megatron-LM disable_bucketing)", "param-gather-step")]

"""Megatron's delayed gradient reduction across pipeline stages (``delay_grad_reduce``).

With ``--overlap-grad-reduce`` Megatron-LM sets ``config.grad_sync_func`` to each model chunk's
``start_grad_sync`` unless ``--no-delay-grad-reduce`` is given (megatron/training.py, commit
299d8a5 of NVIDIA/Megatron-LM, Sep 2023; renamed ``--no-align-grad-reduce`` / ``align_grad_reduce``
in commit 4e38405, Aug 2024, same behaviour). Its schedules
(megatron/core/pipeline_parallel/schedules.py, read at d98e8a6) then launch the data-parallel
bucket collectives as follows:

- non-interleaved 1F1B: only pipeline stage 0 enables the per-bucket asynchronous reductions
  during its last backward ("Other pipeline stages do grad reduction during pipeline bubble");
  every other stage runs its last backward with gradient sync disabled and launches all its
  buckets through ``grad_sync_func`` after it;
- interleaved 1F1B: no backward runs with gradient sync enabled; after its backward op with
  virtual microbatch id ``k``, pipeline rank ``r`` launches the whole gradient sync of the model
  chunk whose last-microbatch backward has id ``k − r`` (``grad_sync_virtual_microbatch_id``),
  so every rank launches a chunk's reductions at the same schedule step; chunks not launched by
  the last backward are launched after it, in chunk order.

The optimizer (``finalize_model_grads`` → ``finish_grad_sync``) waits for them as before.

Megatron-Core buckets gradients only on pipeline rank 0's first model chunk (every other stage
and chunk has one bucket: ``sim.models.generator._single_bucket``). In non-interleaved 1F1B that
one bucket closes at the end of the stage's last backward, where the delayed launch happens
too: there the delay changes nothing, so simrun applies it (and accepts
``--no-delay-grad-reduce``) with the interleaved schedule only. The
effect: the reductions of stages > 0 run in the pipeline drain, after their own compute,
instead of beside their last backward, so they no longer take SMs from backwards that the
drain carries stage after stage (:mod:`sim.engine.interference`).
"""

from __future__ import annotations

from sim.assumption import Assumption
from sim.parallel.config import ParallelConfig
from sim.pipeline.orders import interleaved_table
from sim.pipeline.registry import names_where

#: the schedules where Megatron's ``grad_sync_func`` changes when buckets launch (it runs with
#: 1F1B too, where each later stage's single bucket launches at the same point either way)
DELAY_SCHEDULES = names_where(lambda s: s.delays_grad_sync)


def delay_applies(par: ParallelConfig) -> bool:
    """Whether Megatron's delayed gradient reduction changes this run when on: overlapped
    gradient reduction in Megatron DDP (no ZeRO / FSDP) with a DP gradient collective, more than
    one pipeline stage and one of Megatron's schedules where it matters
    (:attr:`~sim.pipeline.types.Schedule.delays_grad_sync`)."""
    return (par.overlap_grad_reduce and par.pp > 1 and par.zero == 0 and not par.fsdp
            and par.dp_cp > 1 and par.layout.schedule_type.delays_grad_sync)


def delays(par: ParallelConfig, stage: int) -> bool:
    """Whether ``stage`` launches its bucket collectives after backward ops instead of per
    bucket during its last backward: every stage but 0 in 1F1B, every stage interleaved."""
    if not (par.delay_grad_reduce and delay_applies(par)):
        return False
    return stage > 0 or par.layout.schedule_type.interleaves


def launch_points(par: ParallelConfig, stage: int) -> list[tuple[int, int]]:
    """``(chunk, after_backward)`` of each model chunk of a delaying ``stage``, in launch order:
    the stage's backward op (0-based count of its ``B`` ops) after which Megatron launches the
    chunk's gradient sync (see the module docstring)."""
    m, v, r = par.microbatches, par.vpp, stage
    total = m * v
    if not par.layout.schedule_type.interleaves:
        return [(0, m - 1)]
    table = interleaved_table(m, v, par.microbatch_group_size or par.pp)
    # backward virtual microbatch k runs chunk v-1-c of table[k] = (microbatch, c)
    last = {v - 1 - c: k for k, (mb, c) in enumerate(table) if mb == m - 1}
    during = sorted((last[c] + r, c) for c in range(v) if last[c] + r < total)
    after = [(total - 1, c) for c in range(v) if last[c] + r >= total]
    return [(c, k) for k, c in during] + [(c, k) for k, c in after]


def grad_sync_note(par: ParallelConfig) -> Assumption:
    """The assumption line of a run where :func:`delay_applies` (the interleaved schedule)."""
    if not par.delay_grad_reduce:
        return Assumption("--no-delay-grad-reduce: every pipeline stage reduces its DP "
                          "gradients per bucket during each chunk's last backward (Megatron "
                          "without grad_sync_func)", "no-delay-grad-reduce")
    return Assumption("DP gradient reduction (Megatron delay_grad_reduce, interleaved): no "
                      "backward reduces per bucket; pipeline stage r launches a model chunk's "
                      "buckets together r backward ops after the chunk's last-microbatch "
                      "backward (at the end when that is past its last backward), so every "
                      "stage launches a chunk's reductions at the same schedule step; "
                      "--no-delay-grad-reduce: per bucket during each chunk's last backward",
                      "dp-gradient")

"""Megatron-Core's ``defer_embedding_wgrad_compute`` and ``wgrad_deferral_limit``: the output
layer's weight-gradient GEMMs of the last pipeline stage run at the pipeline flush.

Sources (NVIDIA/Megatron-LM at ee6737da824b18f945946b4c798adf2328374cb7, the commit NeMo 25.02's
benchmark scripts install — NVIDIA/dgxc-benchmarking 0efdb235, llama3.1/setup.sh
MEGATRON_COMMIT — and unchanged in substance at d98e8a64ddf34856e74b24714e3bedb2f5a39553):

- ``megatron/core/model_parallel_config.py``: "defers the embedding WGRAD GEMMs while pipeline
  flush is taking place enabling us to hide pipeline flush latency"; ``wgrad_deferral_limit``
  "the number of micro-batches for which the embedding weight gradient compute needs to be
  deferred to pipeline flush ... 0, which means all micro-batches are deferred". Refused:
  pipeline parallel size 1, no gradient-accumulation fusion, a negative limit.
- ``megatron/core/tensor_parallel/layers.py``: ``ColumnParallelLinear.forward`` (the GPT output
  layer) appends its (sequence-sharded) input to ``embedding_activation_buffer`` while the
  buffer holds fewer than ``wgrad_deferral_limit`` entries (always with 0);
  ``LinearWithGradAccumulationAndAsyncCommunication.backward`` likewise appends the output
  gradient to ``grad_output_buffer`` and then skips both the sequence-parallel all-gather of
  the input and the weight-gradient GEMM (``wgrad_compute = False``); the input-gradient GEMM
  and its reduce-scatter / all-reduce stay. So the first ``limit`` microbatches (all with 0) of
  the output layer's model chunk are deferred, the rest run as usual.
- ``megatron/core/pipeline_parallel/schedules.py``: in both
  ``forward_backward_pipelining_without_interleaving`` and ``..._with_interleaving``,
  ``finish_embedding_wgrad_compute`` runs on the last pipeline rank (``is_pipeline_last_stage(
  ignore_virtual=True)``; interleaved: the model chunk ``model[-1]``) after the last backward
  and after the remaining ``grad_sync_func`` launches, right before
  ``finalize_model_grads_func``.
- ``megatron/core/utils.py`` ``drain_embedding_wgrad_compute``: with sequence parallelism the
  first input all-gather is synchronous, then each step issues the next all-gather
  asynchronously beside the current GEMM (double buffer) and waits for it; the GEMM is the
  same ``wgrad_gemm_accum_fp32/fp16`` kernel as in backward.

simrun: the backward of a deferred microbatch on that chunk runs without the output layer's
weight-gradient compute and without the sequence-parallel all-gather before it (its gradient
bucket collective, if any, stays where it was: Megatron's hook still fires); after the stage's
last backward (and its delayed gradient syncs) the drain runs ``k`` all-gathers and ``k`` GEMMs
of the same sizes and times, before the epilogue. The drain's all-gathers are blocking, in
series with the GEMMs, as the backward's all-gather is (:func:`sim.models.vocab.dims.sp_regather`:
Korthikanti et al.'s Table 4 shows the asynchronous all-gather beside a GEMM gaining little).
The held buffers (``k`` inputs and output gradients) are not added to the memory check.
"""

from __future__ import annotations

from dataclasses import replace

from sim.errors import UsageError
from sim.pipeline.registry import names_where
from sim.program.pipeline import DeferredWgrad, PipelineProgram, Task, TaskKind
from sim.program.workload import Layer

FLAG = "--defer-embedding-wgrad-compute"
OPTION = "defer_embedding_wgrad_compute"  # errors name the option (the CLI, its flag)
LIMIT_FLAG = "--wgrad-deferral-limit"
LIMIT_OPTION = "wgrad_deferral_limit"  # errors name the option (the CLI, its flag)
#: row tags (:func:`sim.models.layers.output_rows`): the output layer's row, and the row whose
#: input-gradient comm is the output layer's sequence-parallel re-gather
DEFER_WGRAD_TAG = "defer_wgrad"
DEFER_REGATHER_TAG = "defer_regather"
#: Megatron-Core's schedules that call ``finish_embedding_wgrad_compute`` (for messages)
SCHEDULES = names_where(lambda s: s.defers_embedding_wgrad)


def deferred_microbatches(par) -> int:
    """Microbatches whose output-layer wgrad is deferred: all with limit 0, else the first
    ``limit`` (0 when the option is off)."""
    if not par.defer_embedding_wgrad_compute:
        return 0
    m, limit = par.microbatches, par.wgrad_deferral_limit
    return m if limit == 0 else min(limit, m)


def check(par) -> None:
    """Megatron-Core's refusals (``ModelParallelConfig.__post_init__``) and simrun's."""
    limit = par.wgrad_deferral_limit
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise UsageError(f"must be an integer, got {limit!r}", field=LIMIT_OPTION)
    if not par.defer_embedding_wgrad_compute:
        if limit:
            raise UsageError("applies with --defer-embedding-wgrad-compute (Megatron-Core: "
                             "invalid without it)", field=LIMIT_OPTION)
        return
    if par.pp == 1:
        raise UsageError("Cannot defer embedding wgrad compute when pipeline model parallel is "
                         "not used (Megatron-Core's check)", field=OPTION)
    if limit < 0:
        raise UsageError("must be >= 0 (Megatron-Core's check; 0 defers every microbatch)",
                         field=LIMIT_OPTION)
    if not par.layout.schedule_type.defers_embedding_wgrad:
        raise UsageError(f"Megatron-Core defers the output-layer wgrad in its "
                         f"{' and '.join(SCHEDULES)} schedules only, not "
                         f"{par.schedule_name}", field=OPTION)
    if par.zero or par.fsdp:
        raise UsageError("modelled with Megatron-Core's DDP / distributed optimizer only, not "
                         "with ZeRO or FSDP", field=OPTION)


def build(rows, layers: list[Layer], index: list[int], par,
          chunk: int) -> DeferredWgrad | None:
    """The deferral of the model chunk of ``rows`` (its timed ``layers``; ``index``: each row's
    layer), or ``None`` when the option is off or the chunk has no output layer."""
    k = deferred_microbatches(par)
    wg = next((i for i, r in enumerate(rows) if DEFER_WGRAD_TAG in r.tags), None)
    if k == 0 or wg is None:
        return None
    out = list(layers)
    lay = out[index[wg]]
    gemm_ns = lay.weight_grad.compute_ns
    # its GEMM launches move to the drain too (sim.engine.host: a phase's kernel list)
    out[index[wg]] = replace(lay, weight_grad=replace(lay.weight_grad, compute_ns=0,
                                                      kernels_ns=(), sync_kernels=0))
    gather = None
    rg = next((i for i, r in enumerate(rows) if DEFER_REGATHER_TAG in r.tags), None)
    if rg is not None:
        lay = out[index[rg]]
        gather = lay.input_grad.comm
        out[index[rg]] = replace(lay, input_grad=replace(lay.input_grad, comm=None))
    name = rows[wg].name
    drain = [Task(f"{name}.deferred_allgather", comm=gather)] if gather is not None else []
    for i in range(k):
        more = gather if gather is not None and i + 1 < k else None
        drain.append(Task(f"{name}.deferred_wgrad", TaskKind.WEIGHT_GRAD, gemm_ns, more))
    return DeferredWgrad(chunk, k, tuple(out), tuple(drain))


def notes(program: PipelineProgram, par) -> list[str]:
    """The assumption line of the option (none when it is off)."""
    d = next((st.deferred for st in program.stages if st.deferred is not None), None)
    if d is None:
        return []
    gemm_ns = d.drain[-1].compute_ns
    gathers = [t.comm for t in d.drain if t.comm is not None]
    sp = (f" and the sequence-parallel all-gather of its input ({gathers[0].size_bytes / 1e6:.1f}"
          " MB, blocking)" if gathers else "")
    limit = par.wgrad_deferral_limit
    return [f"{FLAG} (Megatron-Core defer_embedding_wgrad_compute, wgrad_deferral_limit "
            f"{limit}{' = all' if limit == 0 else ''}): the last pipeline stage's output-layer "
            f"weight-gradient GEMM ({gemm_ns / 1e6:.3f} ms){sp} leave the backward of "
            f"microbatches 0-{d.microbatches - 1} of {par.microbatches} (model chunk {d.chunk}) "
            f"and run after its last backward, before the gradient finalization and the "
            f"optimizer (Megatron-Core drain_embedding_wgrad_compute), {d.microbatches} in "
            "series; the held activation and gradient buffers are not in the memory check"]

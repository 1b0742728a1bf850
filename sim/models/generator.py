"""Model-driven workload generation: model spec + parallel layout + GPU → PipelineProgram.

:func:`generate` times every operator of the :class:`~sim.models.plan.ModelPlan` with the roofline
model (:mod:`sim.models.compute`), attaches Megatron's data-parallel gradient collectives, and
adds the optimizer epilogue. Every modelling choice is listed in ``program.assumptions``.
A sweep calls ``generate()`` then the engine's ``simulate()`` once per layout.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import replace

from sim.assumption import Assumption
from sim.comm import CollKind, Comm, GroupKind
from sim.errors import UsageError
from sim.kernels.gpus import describe
from sim.models.assumptions import assumptions, gpu_family, gpu_sms
from sim.models.compute import ComputeModel, Timer
from sim.models.compute_setup import ComputeSetup, resolve_compute, timer_for
from sim.models.features import cuda_graphs, defer_wgrad, param_gather_step, tp_overlap
from sim.models.features.grad_sync import delays, launch_points
from sim.models.features.nvfp4_params import check_precision, quantized_weights
from sim.models.features.zero import BYTES_16, zero3_layers
from sim.models.launches import phase_launches
from sim.models.optimizer import ShampooPlan, adam_ops, bucket_params, grad_bytes
from sim.models.plan import ModelPlan, StagePlan, build_model_plan
from sim.models.vocab.ops import ACT_BYTES
from sim.models.vocab.rows import Row
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig, attention_kernel
from sim.program.pipeline import GradSync, PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.topology.gpu import GpuSpec

# ZeRO-3's collectives among one chunk's timed layers (one per row): (layers, rows, config)
Zero3Units = Callable[[list[Layer], list[Row], ParallelConfig], list[Layer]]
Memo = tuple[dict, dict]  # _layers' timings for one timer and layout, by object identity


def generate(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec, *,
             compute_model: ComputeModel | None = None,
             compute: ComputeSetup | None = None,
             optimizer: str | ShampooPlan = "adam",
             plan: ModelPlan | None = None, source: str = "",
             zero3: Zero3Units | None = None) -> PipelineProgram:
    """Generate the pipeline program of one training iteration (times in ns, sizes in bytes).

    ``optimizer``: ``"adam"`` or a :class:`ShampooPlan` (Adam state plus Shampoo work on the
    owning DP ranks). ``compute``: the compute setup (default: :func:`resolve_compute` for
    ``gpu`` — its family's roofline plus its shipped kernel table; a GPU the catalogue does not
    know needs its topology's ``compute_efficiency``, else it is refused);
    ``compute_model`` replaces its roofline efficiencies. ``plan``: a prebuilt
    :func:`build_model_plan` result for ``(model, par)``. ``zero3``: with ZeRO-3, places the
    parameter and gradient collectives among a chunk's timed layers instead of
    :func:`zero3_layers` (an AICB collective log: :mod:`sim.workload.aicb_zero3`).
    Raises :class:`~sim.errors.UsageError` for layouts Megatron cannot run.
    """
    plan = plan or build_model_plan(model, par)
    if par.dtype not in gpu.peak_tflops:
        raise UsageError(f"GPU {gpu.name} has no {par.dtype} peak (peak_tflops keys: "
                         f"{', '.join(sorted(gpu.peak_tflops))})", field="dtype")
    check_precision(par, gpu.name, gpu_family(gpu), gpu.peak_tflops)  # MXFP8, NVFP4
    setup = compute or resolve_compute(gpu)
    timer = timer_for(gpu, setup, attention_kernel(par.training, gpu_family(gpu)),
                      par.fp8_recipe)
    # Megatron's gradient-accumulation fusion adds weight gradients into fp32 main grads;
    # ZeRO/FSDP and --grad-reduce-in-bf16 keep 16-bit ones (sim.models.optimizer.grad_bytes)
    timer.main_grad_fp32 = not par.zero and grad_bytes(par.dtype, par.grad_reduce_in_bf16) == 4
    timer.sustained, sustained_note = setup.sustained(par.dtype)
    cm = timer.cm = compute_model if compute_model is not None else timer.cm
    if (par.dtype == "fp8" or par.fp4) and cm.fp8_gemm_efficiency <= 0:  # nor fp4 ones
        raise UsageError(f"compute model {cm.family} has no fp8 GEMMs", field="dtype")
    memo: Memo = ({}, {})  # every stage and chunk's rows: copies of one layer's (_layers)
    stages = [_stage_program(st, plan, timer, optimizer, zero3, memo) for st in plan.stages]
    dm = plan.dims
    pp_bytes = dm.n * dm.h * ACT_BYTES // (dm.t if dm.sp else 1)
    program = PipelineProgram(
        tp=par.tp, pp=par.pp, dp=par.dp_cp, ep=par.ep, vpp=par.vpp, cp=par.cp,
        etp=par.layout.etp, microbatches=par.microbatches, pp_bytes=pp_bytes, stages=stages,
        schedule=par.schedule_name, source=source or f"model {model.name}",
        microbatch_group_size=par.microbatch_group_size,
        ep_a2a_overlap=par.overlap_moe_expert_parallel_comm, cuda_graphs=cuda_graphs.capture(par))
    program.assumptions = assumptions(plan, gpu, cm, optimizer)
    table_key = "kernel_table" if timer.transfer is None else "transferred_table"
    program.compute_sources = {table_key: timer.table_ns, "roofline": timer.roofline_ns}
    program.assumptions += compute_notes(setup, timer, sustained_note)
    program.assumptions += [Assumption(a, "defer-wgrad") for a in defer_wgrad.notes(program, par)]
    return program


def compute_notes(setup: ComputeSetup, timer: Timer, sustained: str = "") -> list[str]:
    """Report lines on where compute times came from: the GPU's catalogue entry (measured or
    datasheet-only), the compute-model choices, the share of compute time the kernel table
    timed (with the GEMM kinds it lacked, and the ``sustained`` load line) — or that the
    roofline timed all of it."""
    out = ([describe(setup.entry)] if setup.entry else []) + list(setup.notes)
    if timer.lookup is not None:
        out.append(timer.summary())
        out += [f"the kernel table has no {k} rows: those GEMMs are timed by its "
                f"{k.rsplit('_', 1)[0]} rows ({_KIND_MEANS[k.rsplit('_', 1)[1]]})"
                for k in sorted(timer.missing)]
        out += [sustained] if sustained else []
    else:
        out.append(Assumption("compute time: all from the roofline (the compute model above, "
                              "on the GPU's dense peaks); no measured kernel table is used",
                              "compute-time"))
    return out


_KIND_MEANS = {"fastacc": "FP8 forward GEMMs at the split-accumulator rate, where Transformer "
                          "Engine runs them with fast accumulation",
               "acc32": "weight gradients as if written in 16 bits, where they accumulate into "
                        "fp32 main grads"}


def _stage_program(st: StagePlan, plan: ModelPlan, timer: Timer, optimizer: str | ShampooPlan,
                   zero3: Zero3Units | None, memo: Memo | None = None) -> StageProgram:
    par = plan.par
    chunks, prologue, step_gathers = [], [], []
    delayed, deferred = delays(par, st.stage), None
    for c, rows in enumerate(st.chunks):
        single = _single_bucket(st.stage, c, par)
        layers, index = _layers(rows, par, timer, delayed, single, memo)
        if par.zero >= 3:  # no DP buckets with ZeRO-3: one layer per row
            if zero3 is not None:
                layers = list(zero3(layers, rows, par))
            else:
                layers = list(zero3_layers(layers, rows, par, lambda ops: timer.ops_ns(
                    ops, par.dtype, par.microbatches)))
        elif par.overlap_param_gather and c == 0 and param_gather_step.applies(par):
            step_gathers = param_gather_step.gathers(_bucket_spans(rows, par, single), par)
        elif par.overlap_param_gather:
            _param_gathers(rows, par, layers, index, prologue, single)
        deferred = deferred or defer_wgrad.build(rows, layers, index, par, len(chunks))
        chunks.append(tuple(layers))
    syncs = _grad_syncs(st, par) if delayed else ()
    return StageProgram(stage=st.stage, chunks=chunks, prologue=tuple(prologue),
                        epilogue=_epilogue(st, plan, timer, optimizer, step_gathers),
                        grad_syncs=syncs,
                        deferred=deferred)


def _grad_syncs(st: StagePlan, par: ParallelConfig) -> tuple[GradSync, ...]:
    """Megatron's delayed gradient reduction (:mod:`sim.models.features.grad_sync`): each model
    chunk's bucket collectives — dense buckets in backward order, then expert buckets — launched
    together after the backward op of :func:`launch_points`."""
    out = []
    for chunk, after in launch_points(par, st.stage):
        buckets = sorted(_buckets(st.chunks[chunk], par, _single_bucket(st.stage, chunk, par)),
                         key=lambda b: (b[2], -b[0]))
        tasks = []
        for _first, n, expert in buckets:
            comm = _dp_comm(par, n, expert, blocking=False)
            if comm is not None:
                tasks.append(Task(f"grad_sync.chunk{chunk}.bucket{len(tasks)}",
                                  TaskKind.GRAD_SYNC, comm=comm))
        if tasks:
            out.append(GradSync(chunk, after, tuple(tasks)))
    return tuple(out)


def _param_gathers(rows: list[Row], par: ParallelConfig, layers: list[Layer], index: list[int],
                   prologue: list[Task], single: bool = False) -> None:
    """Megatron-Core --overlap-param-gather: the distributed optimizer's parameter all-gather
    per gradient bucket, issued (non-blocking, in forward order) when the iteration starts —
    the steady state of all-gathers launched after the previous optimizer step — and waited
    for by the bucket's first layer in the first forward. Appends to ``prologue`` and marks
    ``layers`` in place."""
    for first, params, expert, fp8 in sorted(_bucket_spans(rows, par, single)):
        size = par.edp if expert else par.dp_cp
        if size == 1:
            continue
        bucket = len(prologue)
        comm = Comm(CollKind.ALLGATHER, GroupKind.DP_EP if expert else GroupKind.DP,
                    quantized_weights(par).gather_bytes(params, fp8), blocking=False)
        prologue.append(Task(f"param_allgather.bucket{bucket}", TaskKind.GRAD_SYNC, comm=comm,
                             param_bucket=bucket))
        lay = layers[index[first]]
        layers[index[first]] = replace(lay, param_buckets=lay.param_buckets + (bucket,))


def _dp_comm(par: ParallelConfig, params: int, expert: bool, blocking: bool) -> Comm | None:
    group_size = par.edp if expert else par.dp_cp
    if params == 0 or group_size == 1:
        return None
    kind = CollKind.REDUCESCATTER if par.shards_optimizer else CollKind.ALLREDUCE
    group = GroupKind.DP_EP if expert else GroupKind.DP
    per_param = BYTES_16 if par.zero else grad_bytes(par.dtype, par.grad_reduce_in_bf16)
    return Comm(kind, group, params * per_param, blocking=blocking, per_microbatch=par.zero >= 2)


def _bucket_comms(rows: list[Row], par: ParallelConfig, delayed: bool = False,
                  single: bool = False) -> dict[int, list[Comm]]:
    """Megatron DDP with overlapped gradient reduction: gradients fill buckets in backward order;
    a bucket's collective starts after the weight-grad of the row that completes it. A row
    can complete a dense (DP) and an expert (DP_EP) bucket at once: both are kept, dense first.

    Buckets do not span the embedding / output rows and the transformer layers (Megatron's
    buckets do; the difference is a few bucket boundaries); ``single``: the chunk is one bucket
    (:func:`_single_bucket`: every chunk but pipeline stage 0's first).
    ``delayed``: the stage launches its buckets after a backward op instead (:func:`_grad_syncs`).
    """
    out: dict[int, list[Comm]] = {}
    if not par.overlap_grad_reduce or par.zero >= 3 or delayed:  # ZeRO-3: per-unit RS
        return out
    for i, n, expert in _buckets(rows, par, single):
        comm = _dp_comm(par, n, expert, blocking=False)
        if comm is not None:
            out.setdefault(i, []).append(comm)
    return out


def _single_bucket(stage: int, chunk: int, par: ParallelConfig) -> bool:
    """Megatron-Core buckets gradients only on pipeline rank 0's first model chunk: a later
    pipeline stage (``DistributedDataParallel``: ``pp_rank > 0``, "not on the critical path")
    and a later chunk (Megatron-LM ``get_model`` / NeMo ``disable_bucketing=(model_chunk_idx >
    0)``) put each chunk's gradients in one bucket (megatron/core/distributed/
    distributed_data_parallel.py, ee6737da and d98e8a64); every chunk with
    --overlap-param-gather-with-optimizer-step (:mod:`~sim.models.features.param_gather_step`)."""
    return stage > 0 or chunk > 0 or param_gather_step.applies(par)


def _buckets(rows: list[Row], par: ParallelConfig,
             single: bool = False) -> list[tuple[int, int, bool]]:
    """(first row, parameters, expert?) of each gradient bucket, in the order they close in
    backward (see :func:`_bucket_comms`); ``single``: one dense and one expert bucket for all
    of ``rows`` (:func:`_single_bucket`)."""
    return [(first, n, expert) for first, n, expert, _ in _bucket_spans(rows, par, single)]


def _bucket_spans(rows: list[Row], par: ParallelConfig,
                  single: bool = False) -> list[tuple[int, int, bool, int]]:
    """:func:`_buckets` with the FP8 parameters (``--fp8-param-gather``) of each bucket."""
    out: list[tuple[int, int, bool, int]] = []
    limit = math.inf if single else bucket_params(par.dp, par.ddp_bucket_size)
    segments: list[list[int]] = []
    for i, r in enumerate(rows):
        kind = "layer" in r.tags
        if segments and (single or ("layer" in rows[segments[-1][0]].tags) == kind):
            segments[-1].append(i)
        else:
            segments.append([i])
    for seg in segments:
        for expert in (False, True):
            acc, acc8, last = 0, 0, -1
            for i in reversed(seg):
                r = rows[i]
                n, n8 = ((r.expert_params, r.fp8_expert_params) if expert
                         else (r.params, r.fp8_params))
                if n == 0:
                    continue
                acc, acc8, last = acc + n, acc8 + n8, i
                if acc >= limit:
                    out.append((i, acc, expert, acc8))
                    acc, acc8 = 0, 0
            if acc:
                out.append((last, acc, expert, acc8))
    return out


def _layers(rows: list[Row], par: ParallelConfig, timer: Timer, delayed: bool = False,
            single: bool = False, memo: Memo | None = None) -> tuple[list[Layer], list[int]]:
    """The timed layers of ``rows`` and, per row, the index of its layer. A row that completes
    two gradient buckets carries the first; the second goes on a comm-only layer placed just
    before it (``<row>_grad_bucket``: walked right after the row in backward). ``memo``: what
    this program's other chunks timed (:data:`Memo`: their rows are copies of one layer's)."""
    dp_comms = _bucket_comms(rows, par, delayed, single)
    dtype, m = par.dtype, par.microbatches
    layers: list[Layer] = []
    index: list[int] = []

    def ovl(pairs, ops):  # --tp-comm-overlap: the phase's collectives pipelined with its GEMMs
        if not pairs:
            return ()
        return tp_overlap.gemm_overlaps(pairs, ops, par.tp, timer, dtype, gpu_sms(timer.gpu)[0])

    made, timed = memo if memo is not None else ({}, {})  # Phases by (ops, comm); row timings

    def phase(ops, comm, pairs) -> Phase:
        compute = timer.ops_ns(ops, dtype, m)  # tallied on every call, in the rows' order
        if pairs or not isinstance(ops, tuple):
            return Phase(compute, comm, overlaps=ovl(pairs, ops), **_launches(timer, ops, dtype))
        got = made.get((id(ops), id(comm)))
        if got is None or got[0] is not ops or got[1] is not comm:
            # a frozen Phase, shared by the layers whose rows share these objects (a model's
            # layers are copies of one layer's rows); held with them, so no id is reused
            got = made[id(ops), id(comm)] = (ops, comm, Phase(
                compute, comm, overlaps=(), **_launches(timer, ops, dtype)))
        return got[2]

    memo_rows = hasattr(timer, "tallies")  # a Timer; a stand-in times every row

    for i, r in enumerate(rows):
        comms = dp_comms.get(i, [r.wg_comm] if r.wg_comm is not None else [])
        for extra in comms[1:]:
            layers.append(Layer(name=f"{r.name}_grad_bucket", weight_grad=Phase(0, extra)))
        index.append(len(layers))
        objs = (r.fwd, r.ig, r.wg, r.first_fwd, r.fwd_comm, r.ig_comm, comms[0] if comms else None)
        key = tuple(map(id, objs))
        got = timed.get(key)
        if got is not None and all(map(operator.is_, got[0], objs)):
            # a row with the same objects as an earlier one (a model's layers are copies of
            # one layer's rows): its phases, and the same tallies in the same order
            timer.tally(got[1])
            layers.append(Layer(r.name, *got[2]))
            continue
        made_row = (phase(r.fwd, r.fwd_comm, r.fwd_ovl), phase(r.ig, r.ig_comm, r.ig_ovl),
                    phase(r.wg, objs[6], r.wg_ovl))
        first = timer.ops_ns(r.first_fwd, dtype)
        layers.append(Layer(r.name, *made_row, first_forward_ns=first))
        if memo_rows and not (r.fwd_ovl or r.ig_ovl or r.wg_ovl) and all(
                isinstance(o, tuple) for o in objs[:4]):
            # held with the objects, so no id is reused while they are keys
            timed[key] = (objs, sum((timer.tallies(o, dtype, m) for o in objs[:3]), ())
                          + timer.tallies(r.first_fwd, dtype), (*made_row, 0, (), first))
    return layers, index


def _launches(timer: Timer, ops, dtype: str) -> dict:
    """The ``kernels_ns`` / ``sync_kernels`` fields of a phase running ``ops``."""
    cached = getattr(timer, "cached_for", None)  # Timer memoises them; a stand-in may not
    kernels, sync = (cached(ops, "launches", dtype, lambda: phase_launches(timer, ops, dtype))
                     if cached and isinstance(ops, tuple) else phase_launches(timer, ops, dtype))
    return {"kernels_ns": kernels, "sync_kernels": sync}


def embedding_grad_comm(plan: ModelPlan, stage: int) -> Comm | None:
    """Megatron's all-reduce of the tied word embedding's gradient between the first and the
    last pipeline stage (Megatron-Core ``finalize_model_grads`` → ``_allreduce_embedding_grads``
    in ``parallel_state.get_embedding_group()``), after the data-parallel gradient sync and
    before the optimizer step: the stage's ``V/t × h`` gradient (padded vocabulary), in the
    gradient dtype; blocking. ``None`` when the embeddings are untied, ``pp == 1``, the stage
    is a middle one, or the schedule places the output layer on stage 0 too (V placement;
    DualPipe, whose ranks 0 and p−1 each hold the first and the last stage)."""
    m, par, dm = plan.model, plan.par, plan.dims
    typ = par.layout.schedule_type
    if typ.bidirectional:
        return None  # ranks 0 and p-1 each hold both ends (the copies: docs/schedules.md)
    last = typ.last_stage(par.pp, par.vpp)
    if not m.tied_embeddings or last == 0 or stage not in (0, last):
        return None
    size = dm.v // dm.t * dm.h * grad_bytes(par.dtype, par.grad_reduce_in_bf16)
    return Comm(CollKind.ALLREDUCE, GroupKind.EMB, size, blocking=True)


def _epilogue(st: StagePlan, plan: ModelPlan, timer: Timer, optimizer: str | ShampooPlan,
              step_gathers: list[Task]) -> tuple[Task, ...]:
    par = plan.par
    dense, expert = st.params, st.expert_params
    tasks: list[Task] = []
    if not par.overlap_grad_reduce:
        for n, is_expert in ((dense, False), (expert, True)):
            comm = _dp_comm(par, n, is_expert, blocking=True)
            if comm is not None:
                tasks.append(Task("grad_reduce" + ("_experts" if is_expert else ""),
                                  TaskKind.GRAD_SYNC, comm=comm))
    emb = embedding_grad_comm(plan, st.stage)
    if emb is not None:
        tasks.append(Task("embedding_grads", TaskKind.GRAD_SYNC, comm=emb, wait_async=True))
    g = grad_bytes(par.dtype, par.grad_reduce_in_bf16)
    # --overlap-param-gather-with-optimizer-step: chunk 0's dense parameters stepped first
    dense0 = min(dense, sum(n for _f, n, is_expert, _ in _bucket_spans(st.chunks[0], par, True)
                            if not is_expert)) if step_gathers else 0
    ops = adam_ops(dense - dense0, par.dp_cp, par.shards_optimizer, g, par.dtype == "fp16")
    if expert:
        ops += adam_ops(expert, par.edp, par.shards_optimizer, g, par.dtype == "fp16")
    layers = sum(len(ids) for ids in st.layers)
    first = st.stage == 0
    if isinstance(optimizer, ShampooPlan):
        ops += (optimizer.stage_op(layers, first, par.dp_cp),)
    if step_gathers:
        first_ns = timer.ops_ns(adam_ops(dense0, par.dp_cp, par.shards_optimizer, g,
                                         par.dtype == "fp16"), par.dtype)
        tasks += param_gather_step.optimizer_tasks(first_ns, timer.ops_ns(ops, par.dtype),
                                                   step_gathers)
    else:
        tasks.append(Task("optimizer", TaskKind.OPTIMIZER,
                          compute_ns=timer.ops_ns(ops, par.dtype), wait_async=True))
    rows = list(st.rows())
    tasks += (quantized := quantized_weights(par)).optimizer_tasks(  # fp8 or nvfp4 params
        rows, par, lambda o: timer.ops_ns(o, par.dtype))
    if isinstance(optimizer, ShampooPlan) and par.dp_cp > 1:
        size = optimizer.root_bytes(layers, first)
        tasks.append(Task("shampoo_root_allgather", TaskKind.GRAD_SYNC,
                          comm=Comm(CollKind.ALLGATHER, GroupKind.DP, size, blocking=True)))
    if par.shards_optimizer and par.zero < 3 and not par.overlap_param_gather:
        fp8 = (sum(r.fp8_params for r in rows), sum(r.fp8_expert_params for r in rows))
        for n, n8, is_expert, size in ((dense, fp8[0], False, par.dp_cp),
                                       (expert, fp8[1], True, par.edp)):
            if n and size > 1:
                group = GroupKind.DP_EP if is_expert else GroupKind.DP
                tasks.append(Task("param_allgather" + ("_experts" if is_expert else ""),
                                  TaskKind.GRAD_SYNC, comm=Comm(
                                      CollKind.ALLGATHER, group, quantized.gather_bytes(n, n8))))
        tasks += quantized.transpose_task(rows, lambda o: timer.ops_ns(o, par.dtype))
    return tuple(tasks)

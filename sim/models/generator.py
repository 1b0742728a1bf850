"""Model-driven workload generation: model spec + parallel layout + GPU → PipelineProgram.

:func:`generate` times every operator of the :class:`~sim.models.plan.ModelPlan` with the roofline
model (:mod:`sim.models.compute`), attaches Megatron's data-parallel gradient collectives, and
adds the optimizer epilogue. Every modelling choice is listed in ``program.assumptions``.
A sweep calls ``generate()`` then the engine's ``simulate()`` once per layout.
"""

from __future__ import annotations

from dataclasses import replace

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import UsageError
from sim.kernels.gpus import describe, find
from sim.models import tp_overlap
from sim.models.compute import ComputeModel, Timer
from sim.models.compute_setup import ComputeSetup, resolve_compute, timer_for
from sim.models.flops import model_flops_per_iteration
from sim.models.moe import dispatch_nodes, distinct_nodes, moe_load_factor
from sim.models.ops import ACT_BYTES
from sim.models.optimizer import ShampooPlan, adam_ops
from sim.models.parallel import ParallelConfig, attention_kernel
from sim.models.plan import ModelPlan, StagePlan, build_model_plan
from sim.models.rows import Row
from sim.models.spec import ModelSpec
from sim.models.split import stage_layer_counts, virtual_stage_layers
from sim.models.zero import BYTES_16, zero3_layers
from sim.schedules import stage_chunk
from sim.topology.gpu import GpuSpec
from sim.words import plural
from sim.workload.model import Layer, Phase
from sim.workload.program import PipelineProgram, StageProgram, Task, TaskKind

PARAM_BYTES = 2  # bf16/fp16 model weights (fp8 runs keep bf16 weights)


def grad_bytes(dtype: str) -> int:
    """Bytes per gradient element in the DP reduction: fp32 main grads for bf16/fp8 (Megatron's
    ``accumulate_allreduce_grads_in_fp32``), fp16 for fp16."""
    return 2 if dtype == "fp16" else 4


def bucket_params(dp: int) -> int:
    """Megatron DDP bucket size in parameters: ``max(40M, 1M · dp)``."""
    return max(40_000_000, 1_000_000 * dp)


def generate(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec, *,
             compute_model: ComputeModel | None = None,
             compute: ComputeSetup | None = None,
             optimizer: str | ShampooPlan = "adam",
             plan: ModelPlan | None = None, source: str = "") -> PipelineProgram:
    """Generate the pipeline program of one training iteration (times in ns, sizes in bytes).

    ``optimizer``: ``"adam"`` or a :class:`ShampooPlan` (Adam state plus Shampoo work on the
    owning DP ranks). ``compute``: the compute setup (default: :func:`resolve_compute` for
    ``gpu`` — its family's roofline plus its shipped kernel table; a GPU the catalogue does not
    know needs its topology's ``compute_efficiency``, else it is refused);
    ``compute_model`` replaces its roofline efficiencies. ``plan``: a prebuilt
    :func:`build_model_plan` result for ``(model, par)``.
    Raises :class:`~sim.errors.UsageError` for layouts Megatron cannot run.
    """
    plan = plan or build_model_plan(model, par)
    if par.dtype not in gpu.peak_tflops:
        raise UsageError(f"GPU {gpu.name} has no {par.dtype} peak (peak_tflops keys: "
                         f"{', '.join(sorted(gpu.peak_tflops))})", field="--dtype")
    setup = compute or resolve_compute(gpu)
    timer = timer_for(gpu, setup, attention_kernel(par.training, _family(gpu)))
    if compute_model is not None:
        timer.cm = compute_model
    cm = timer.cm
    if par.dtype == "fp8" and cm.fp8_gemm_efficiency <= 0:
        raise UsageError(f"compute model {cm.family} has no fp8 GEMMs", field="--dtype")
    stages = [_stage_program(st, plan, timer, optimizer) for st in plan.stages]
    dm = plan.dims
    pp_bytes = dm.n * dm.h * ACT_BYTES // (dm.t if dm.sp else 1)
    program = PipelineProgram(
        tp=par.tp, pp=par.pp, dp=par.dp_cp, ep=par.ep, vpp=par.vpp, cp=par.cp,
        microbatches=par.microbatches, pp_bytes=pp_bytes, stages=stages,
        schedule=par.schedule_name, source=source or f"model {model.name}",
        microbatch_group_size=par.microbatch_group_size,
    )
    program.assumptions = assumptions(plan, gpu, cm, optimizer)
    program.assumptions += compute_notes(setup, timer)
    return program


def compute_notes(setup: ComputeSetup, timer: Timer) -> list[str]:
    """Report lines on where compute times came from: the GPU's catalogue entry (measured or
    datasheet-only), the compute-model choices, and the share of compute time the kernel
    table timed — or that the roofline timed all of it."""
    out = ([describe(setup.entry)] if setup.entry else []) + list(setup.notes)
    if timer.lookup is not None:
        out.append(timer.summary())
    else:
        out.append("compute time: all from the roofline (the compute model above, on the "
                   "GPU's dense peaks); no measured kernel table is used")
    return out


def _stage_program(st: StagePlan, plan: ModelPlan, timer: Timer,
                   optimizer: str | ShampooPlan) -> StageProgram:
    par = plan.par
    chunks, prologue = [], []
    for rows in st.chunks:
        layers, index = _layers(rows, par, timer)
        if par.zero >= 3:  # no DP buckets with ZeRO-3: one layer per row
            layers = list(zero3_layers(layers, rows, par))
        elif par.overlap_param_gather:
            _param_gathers(rows, par, layers, index, prologue)
        chunks.append(tuple(layers))
    return StageProgram(stage=st.stage, chunks=chunks, prologue=tuple(prologue),
                        epilogue=_epilogue(st, plan, timer, optimizer))


def _param_gathers(rows: list[Row], par: ParallelConfig, layers: list[Layer], index: list[int],
                   prologue: list[Task]) -> None:
    """Megatron-Core --overlap-param-gather: the distributed optimizer's parameter all-gather
    per gradient bucket, issued (non-blocking, in forward order) when the iteration starts —
    the steady state of all-gathers launched after the previous optimizer step — and waited
    for by the bucket's first layer in the first forward. Appends to ``prologue`` and marks
    ``layers`` in place."""
    for first, params, expert in sorted(_buckets(rows, par)):
        size = par.dp_cp // par.ep if expert else par.dp_cp
        if size == 1:
            continue
        bucket = len(prologue)
        comm = Comm(CollKind.ALLGATHER, GroupKind.DP_EP if expert else GroupKind.DP,
                    params * PARAM_BYTES, blocking=False)
        prologue.append(Task(f"param_allgather.bucket{bucket}", TaskKind.GRAD_SYNC, comm=comm,
                             param_bucket=bucket))
        lay = layers[index[first]]
        layers[index[first]] = replace(lay, param_buckets=lay.param_buckets + (bucket,))


def _dp_comm(par: ParallelConfig, params: int, expert: bool, blocking: bool) -> Comm | None:
    group_size = par.dp_cp // par.ep if expert else par.dp_cp
    if params == 0 or group_size == 1:
        return None
    kind = CollKind.REDUCESCATTER if par.shards_optimizer else CollKind.ALLREDUCE
    group = GroupKind.DP_EP if expert else GroupKind.DP
    per_param = BYTES_16 if par.zero else grad_bytes(par.dtype)
    return Comm(kind, group, params * per_param, blocking=blocking,
                per_microbatch=par.zero >= 2)


def _bucket_comms(rows: list[Row], par: ParallelConfig) -> dict[int, list[Comm]]:
    """Megatron DDP with overlapped gradient reduction: gradients fill buckets in backward order;
    a bucket's collective starts after the weight-grad of the row that completes it. A row
    can complete a dense (DP) and an expert (DP_EP) bucket at once: both are kept, dense first.

    Buckets do not span the embedding / output rows and the transformer layers (Megatron's
    buckets do; the difference is a few bucket boundaries), so every stage with the same
    layers gets the same transformer-layer buckets (needed for a representative-stage file).
    """
    out: dict[int, list[Comm]] = {}
    if not par.overlap_grad_reduce or par.zero >= 3:  # ZeRO-3: per-unit reduce-scatter
        return out
    for i, n, expert in _buckets(rows, par):
        comm = _dp_comm(par, n, expert, blocking=False)
        if comm is not None:
            out.setdefault(i, []).append(comm)
    return out


def _buckets(rows: list[Row], par: ParallelConfig) -> list[tuple[int, int, bool]]:
    """(first row, parameters, expert?) of each gradient bucket, in the order they close in
    backward (see :func:`_bucket_comms`)."""
    out: list[tuple[int, int, bool]] = []
    limit = bucket_params(par.dp_cp)
    segments: list[list[int]] = []
    for i, r in enumerate(rows):
        kind = "layer" in r.tags
        if segments and ("layer" in rows[segments[-1][0]].tags) == kind:
            segments[-1].append(i)
        else:
            segments.append([i])
    for seg in segments:
        for expert in (False, True):
            acc, last = 0, -1
            for i in reversed(seg):
                n = rows[i].expert_params if expert else rows[i].params
                if n == 0:
                    continue
                acc, last = acc + n, i
                if acc >= limit:
                    out.append((i, acc, expert))
                    acc = 0
            if acc:
                out.append((last, acc, expert))
    return out


def _layers(rows: list[Row], par: ParallelConfig, timer: Timer) -> tuple[list[Layer], list[int]]:
    """The timed layers of ``rows`` and, per row, the index of its layer. A row that completes
    two gradient buckets carries the first; the second goes on a comm-only layer placed just
    before it (``<row>_grad_bucket``: walked right after the row in backward)."""
    dp_comms = _bucket_comms(rows, par)
    dtype, m = par.dtype, par.microbatches
    layers: list[Layer] = []
    index: list[int] = []

    def ovl(pairs, ops):  # --tp-comm-overlap: the phase's collectives pipelined with its GEMMs
        if not pairs:
            return ()
        return tp_overlap.gemm_overlaps(pairs, ops, par.tp, timer, dtype, _sms(timer.gpu)[0])

    for i, r in enumerate(rows):
        comms = dp_comms.get(i, [r.wg_comm] if r.wg_comm is not None else [])
        for extra in comms[1:]:
            layers.append(Layer(name=f"{r.name}_grad_bucket", weight_grad=Phase(0, extra)))
        index.append(len(layers))
        layers.append(Layer(
            name=r.name,
            forward=Phase(timer.ops_ns(r.fwd, dtype, m), r.fwd_comm,
                          overlaps=ovl(r.fwd_ovl, r.fwd)),
            input_grad=Phase(timer.ops_ns(r.ig, dtype, m), r.ig_comm,
                             overlaps=ovl(r.ig_ovl, r.ig)),
            weight_grad=Phase(timer.ops_ns(r.wg, dtype, m), comms[0] if comms else None,
                              overlaps=ovl(r.wg_ovl, r.wg)),
        ))
    return layers, index


def embedding_grad_comm(plan: ModelPlan, stage: int) -> Comm | None:
    """Megatron's all-reduce of the tied word embedding's gradient between the first and the
    last pipeline stage (Megatron-Core ``finalize_model_grads`` → ``_allreduce_embedding_grads``
    in ``parallel_state.get_embedding_group()``), after the data-parallel gradient sync and
    before the optimizer step: the stage's ``V/t × h`` gradient (padded vocabulary), in the
    gradient dtype; blocking. ``None`` when the embeddings are untied, ``pp == 1``, the stage
    is a middle one, or the schedule places the output layer on stage 0 too (V placement)."""
    m, par, dm = plan.model, plan.par, plan.dims
    last = stage_chunk(par.schedule_name, par.pp, par.pp * par.vpp - 1)[0]
    if not m.tied_embeddings or last == 0 or stage not in (0, last):
        return None
    size = dm.v // dm.t * dm.h * grad_bytes(par.dtype)
    return Comm(CollKind.ALLREDUCE, GroupKind.EMB, size, blocking=True)


def _sms(gpu: GpuSpec) -> tuple[int, bool]:
    """SMs of ``gpu`` from the catalogue and whether it knew them (else an H100 SXM's 132)."""
    entry = find(gpu.name)
    if entry is not None and entry.sms:
        return entry.sms, True
    return tp_overlap.DEFAULT_SMS, False


def _epilogue(st: StagePlan, plan: ModelPlan, timer: Timer,
              optimizer: str | ShampooPlan) -> tuple[Task, ...]:
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
    ops = adam_ops(dense, par.dp_cp, par.shards_optimizer, grad_bytes(par.dtype))
    if expert:
        ops += adam_ops(expert, par.dp_cp // par.ep, par.shards_optimizer,
                        grad_bytes(par.dtype))
    layers = sum(len(ids) for ids in st.layers)
    first = st.stage == 0
    if isinstance(optimizer, ShampooPlan):
        ops += (optimizer.stage_op(layers, first, par.dp_cp),)
    tasks.append(Task("optimizer", TaskKind.OPTIMIZER,
                      compute_ns=timer.ops_ns(ops, par.dtype), wait_async=True))
    if isinstance(optimizer, ShampooPlan) and par.dp_cp > 1:
        size = optimizer.root_bytes(layers, first)
        tasks.append(Task("shampoo_root_allgather", TaskKind.GRAD_SYNC,
                          comm=Comm(CollKind.ALLGATHER, GroupKind.DP, size, blocking=True)))
    if par.shards_optimizer and par.zero < 3 and not par.overlap_param_gather:
        for n, is_expert, size in ((dense, False, par.dp_cp),
                                   (expert, True, par.dp_cp // par.ep)):
            if n and size > 1:
                group = GroupKind.DP_EP if is_expert else GroupKind.DP
                tasks.append(Task("param_allgather" + ("_experts" if is_expert else ""),
                                  TaskKind.GRAD_SYNC,
                                  comm=Comm(CollKind.ALLGATHER, group, n * PARAM_BYTES)))
    return tuple(tasks)


def _family(gpu: GpuSpec) -> str:
    """The catalogue family of ``gpu`` (``""``: not in the catalogue)."""
    entry = find(gpu.name)
    return entry.family if entry is not None else ""


def _attention_text(par: ParallelConfig, family: str) -> str:
    names = {"flash": "FlashAttention-2 kernel", "fused": "cuDNN fused attention kernel "
             "(Transformer Engine)", "unfused": "batched matmuls + softmax (unfused, as "
             "Megatron-LM ran in 2022)"}
    req = par.requested_backend
    how = ("--flash-attention" if not par.attention_backend and par.flash_attention
           else f"--attention-backend {req}")
    if req == "auto":
        how += (" (Megatron-Core's default: Transformer Engine picks cuDNN's fused kernel on "
                f"Hopper and newer, FlashAttention-2 before; GPU family {family or 'unknown'})")
    return f"{how}: {names[attention_kernel(par.training, family)]}"


def assumptions(plan: ModelPlan, gpu: GpuSpec, cm: ComputeModel,
                optimizer: str | ShampooPlan) -> list[str]:
    """Human-readable list of every modelling choice behind a generated program."""
    m, par, dm = plan.model, plan.par, plan.dims
    out = [
        f"workload generated from model spec {m.name}: {m.layers} layers, hidden {m.hidden}, "
        f"{m.heads} heads ({m.kv_heads} kv), ffn {m.ffn_hidden}"
        f"{' gated' if m.gated_mlp else ''}, vocab {m.vocab} padded to {dm.v} "
        f"(multiple of 128·tp), sequence {m.seq_len}"
        + (f", MoE {m.moe.experts} experts top-{m.moe.top_k}" if m.moe else ""),
        f"layout: tp={par.tp} pp={par.pp} dp={par.dp} ep={par.ep} vpp={par.vpp}"
        + (f" cp={par.cp}" if par.cp > 1 else "") + f", micro batch "
        f"{par.micro_batch}, global batch {par.global_batch} → "
        f"{plural(par.microbatches, 'microbatch', 'microbatches')}; "
        f"schedule {par.schedule_name}; " + _split_note(m, par),
        f"training dtype {par.dtype}; activations and TP/PP messages 2 bytes per element; DP "
        f"gradients {grad_bytes(par.dtype)} bytes per parameter, weights {PARAM_BYTES}",
        f"recompute: {par.recompute}; sequence parallel: {'on' if par.sp else 'off'}"
        + (" (requested but ignored: tp = 1)" if par.sequence_parallel and not par.sp else "")
        + "; attention: " + _attention_text(par, _family(gpu)),
        cm.describe() + f"; GPU {gpu.name}: {gpu.tflops(par.dtype):g} TFLOP/s {par.dtype}, "
        f"{gpu.hbm_GBps:g} GB/s HBM",
        "FLOPs: matrix multiplies only (2 per multiply-add), attention over the full s×s scores",
        "TP communication per Megatron: f/g operators (all-reduce of n·h activations) or, with "
        "sequence parallelism, all-gather/reduce-scatter; blocking in the TP group"
        + ("" if par.tp_comm_overlap else " (--tp-comm-overlap would pipeline them with their "
           "GEMMs)"),
        "embedding on the first stage (vocab-parallel, TP all-reduce of its output); final norm, "
        "output layer and vocab-parallel cross entropy (3 all-reduces of n fp32 values) on the "
        "last stage",
        f"pipeline message per microbatch: b·s·h·2 bytes{' / tp' if dm.sp else ''} = "
        "pp_bytes (no scatter/gather optimisation)",
    ]
    if par.tp_comm_overlap:
        out.append(tp_overlap.describe(*_sms(gpu)))
    if par.zero:
        out.append(_zero_note(par))
    if par.cp > 1:
        out.append(f"context parallelism cp={par.cp} (Megatron-Core ring attention through "
                   f"TransformerEngine): {m.seq_len // par.cp} tokens per rank (2·cp chunks, "
                   "causal load balancing); attention in cp steps, each overlapped with the P2P "
                   "exchange of a KV block (backward: KV and dK/dV) around the CP ring, costed "
                   "as one ring all-gather step; DP gradients reduced over DP×CP "
                   f"({par.dp_cp} ranks); activations ÷ cp")
    if par.dp_cp > 1 and not par.zero:
        kind = "reduce-scatter" if par.distributed_optimizer else "all-reduce"
        if par.overlap_grad_reduce:
            out.append(f"--overlap-grad-reduce: DP gradient {kind} per Megatron DDP bucket "
                       f"(≥ {bucket_params(par.dp_cp):,} parameters, in backward order, per model "
                       "chunk; embedding and output layer in buckets of their own), "
                       "non-blocking, issued in the last "
                       "microbatch's backward; the optimizer waits for them")
        else:
            out.append(f"--no-overlap-grad-reduce: DP gradient {kind} after the backward, "
                       "blocking")
        if par.overlap_param_gather:
            out.append("--overlap-param-gather: the distributed optimizer's parameter all-gather "
                       "(2 bytes/parameter) per gradient bucket, non-blocking and in forward "
                       "order from the start of the iteration (the previous step's all-gathers "
                       "overlapping this forward); the first forward use of a bucket waits for "
                       "its all-gather")
        elif par.distributed_optimizer:
            out.append("distributed optimizer: parameter all-gather (2 bytes/parameter) after "
                       "the optimizer step, not overlapped with the next iteration "
                       "(--overlap-param-gather overlaps it)")
    out.append("optimizer: Adam, memory-bound (30 bytes per updated parameter + gradient norm "
               "and buffer zeroing)" + ("; distributed over DP" if par.shards_optimizer
                                        else ""))
    if isinstance(optimizer, ShampooPlan):
        out.append(f"Shampoo: {len(optimizer.layer_blocks)} preconditioned blocks per layer; "
                   f"inverse 4th roots by {optimizer.newton_steps}-step coupled Newton "
                   f"(4·{optimizer.newton_steps}·n³ FLOPs per n×n factor, fp32) every step on "
                   "the owning DP rank (owner mod dp); the step waits for the busiest owner; "
                   "roots all-gathered in DP")
    if m.tied_embeddings and par.pp > 1:
        out.append(f"tied embeddings: the word-embedding gradient ({dm.v // dm.t * dm.h:,} "
                   f"parameters per GPU, {grad_bytes(par.dtype)} bytes each) all-reduced "
                   "between the first and the last stage (Megatron's embedding group) after the "
                   "DP gradient sync, before the optimizer step; blocking")
    if m.moe is not None:
        me = m.moe
        load = moe_load_factor(par)
        routing = ("balanced routing" if load == 1.0 else
                   f"the busiest GPU's experts get {load:g}x the balanced tokens (load imbalance "
                   f"{par.moe_load_imbalance:g}"
                   + (f", capacity factor {par.moe_capacity_factor:g}"
                      if par.moe_capacity_factor is not None else "") + ")")
        out.append(
            f"MoE ({me.experts} experts of {me.expert_ffn_hidden}, top-{me.top_k}"
            + (f", shared-expert MLP of {me.shared_ffn_hidden}" if me.shared_ffn_hidden else "")
            + (f", first {me.dense_layers} layers dense" if me.dense_layers else "")
            + f"): {routing}; "
            + ("dropless" if par.moe_capacity_factor is None else "tokens beyond capacity "
               "dropped")
            + "; experts TP-sharded (expert tensor parallelism = TP); " + _dispatch_note(plan)
            + "; expert gradients synced in DP_EP")
    out.append("not modelled: gradient-norm all-reduce across model-parallel ranks (a few "
               "bytes), CPU launch overheads, memory allocator effects")
    mf = model_flops_per_iteration(m, par.global_batch)
    out.append(f"model FLOPs per iteration (for MFU): {mf:.4e} (vocab {m.vocab}, unpadded)")
    return out


def _dispatch_note(plan: ModelPlan) -> str:
    """How the MoE dispatch/combine all-to-alls are sized and run (--moe-token-dispatcher-type)."""
    m, par = plan.model, plan.par
    assert m.moe is not None
    nodes = dispatch_nodes(par)
    if par.ep == 1:
        return "EP 1: no dispatch all-to-all"
    if nodes == 1:
        where = (f"the EP group spans {par.ep_nodes} node(s)" if par.moe_token_dispatcher == "flex"
                 else "--moe-token-dispatcher-type alltoall")
        return (f"dispatch and combine all-to-alls of n·top_k·h·2 bytes (× the load factor) "
                f"in the EP group, direct ({where})")
    d = distinct_nodes(m.moe.experts, m.moe.top_k, nodes)
    return (f"--moe-token-dispatcher-type flex (Megatron-Core MoEFlexTokenDispatcher, DeepEP): "
            f"the EP group spans {nodes} nodes; each token sent once per destination node, "
            f"{d:.3f} of {nodes} on average (top-{m.moe.top_k} of {m.moe.experts} experts, "
            "uniform routing; node-limited routing not modelled), so the dispatch and combine "
            f"all-to-alls carry n·{d:.3f}·h·2 bytes (× the load factor) instead of "
            f"n·{m.moe.top_k}·h·2; run as the network's hierarchical all-to-all (NVLink inside "
            "a node, then RDMA among GPUs of the same local index; DeepEP overlaps the two, "
            "here they run one after the other; bf16, not DeepEP's FP8 dispatch)")


def _split_note(m: ModelSpec, par: ParallelConfig) -> str:
    """How the layers are split over the stages (printed whenever the split is uneven)."""
    counts = virtual_stage_layers(m.layers, par.pp, par.vpp, par.split)
    if not par.split.uneven:
        return f"{counts[0]} layers per model chunk"
    sp = par.split
    how = ", ".join(x for x in (
        f"first stage {sp.first_stage_layers}" if sp.first_stage_layers is not None else "",
        f"last stage {sp.last_stage_layers}" if sp.last_stage_layers is not None else "",
        "embedding counted as a layer" if sp.account_for_embedding else "",
        "loss counted as a layer" if sp.account_for_loss else "") if x)
    per_stage = stage_layer_counts(counts, par.pp)
    return (f"uneven pipeline split ({how}; Megatron-Core rules): transformer layers per stage "
            f"{'/'.join(map(str, per_stage))}")


def _zero_note(par: ParallelConfig) -> str:
    name = "PyTorch FSDP FULL_SHARD (ZeRO stage 3 semantics)" if par.fsdp else (
        f"DeepSpeed ZeRO stage {par.zero}")
    what = {1: "optimizer state", 2: "optimizer state and gradients",
            3: "optimizer state, gradients and parameters"}[par.zero]
    comm = {1: "gradients reduce-scattered in the last microbatch's backward (bucketed), "
               "parameters all-gathered after the step",
            2: "gradients reduce-scattered in every microbatch's backward (bucketed), "
               "parameters all-gathered after the step",
            3: "each unit (transformer layer, embedding, output rows) all-gathered before its "
               "forward and again before its backward, one unit ahead on a stream of its own, "
               "its gradients reduce-scattered after its backward in every microbatch"}[par.zero]
    return (f"{name}: {what} sharded over the {par.dp_cp} DP ranks; 16-bit parameters and "
            f"gradients on the wire; {comm} (docs/models.md)")

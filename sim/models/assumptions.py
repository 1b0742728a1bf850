"""The assumption lines of a generated program: every modelling choice behind
:func:`sim.models.generator.generate`, in words (layout, dtypes, attention kernel, TP/DP/CP/ZeRO
communication, MoE dispatch, pipeline split), and the GPU facts they rest on."""

from __future__ import annotations

from sim.assumption import Assumption
from sim.kernels.gpus import find
from sim.models.compute import ComputeModel
from sim.models.features import (
    cross_entropy,
    eager,
    fp8,
    fp8_params,
    fsdp2,
    nvfp4,
    nvfp4_params,
    param_gather_step,
    qk_norm,
    rope,
    tp_async,
    tp_overlap,
)
from sim.models.features.grad_sync import delay_applies, grad_sync_note
from sim.models.features.moe import (
    describe_ep_a2a_overlap,
    dispatch_nodes,
    distinct_nodes,
    moe_load_factor,
    sorts_by_local_expert,
)
from sim.models.flops import model_flops_per_iteration
from sim.models.layers import dropout_note
from sim.models.optimizer import (
    PARAM_BYTES,
    ShampooPlan,
    bucket_params,
    bucket_source,
    grad_bytes,
)
from sim.models.plan import ModelPlan
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ROCM_FAMILIES, ParallelConfig, attention_kernel
from sim.parallel.split import stage_layer_counts, virtual_stage_layers
from sim.topology.gpu import GpuSpec
from sim.words import plural


def gpu_sms(gpu: GpuSpec) -> tuple[int, bool]:
    """SMs of ``gpu`` from the catalogue and whether it knew them (else an H100 SXM's 132)."""
    entry = find(gpu.name)
    if entry is not None and entry.sms:
        return entry.sms, True
    return tp_overlap.DEFAULT_SMS, False


def gpu_family(gpu: GpuSpec) -> str:
    """The catalogue family of ``gpu`` (``""``: not in the catalogue)."""
    entry = find(gpu.name)
    return entry.family if entry is not None else ""


#: Transformer Engine's fused attention on ROCm: "Currently ROCm TE supports two backends,
#: AOTriton and CK, for fused attention", CK chosen first when both match the problem
#: (ROCm/TransformerEngine README.rst, "Fused Attention Backends on ROCm", commit 01b4205e)
ROCM_FUSED = ("Transformer Engine fused attention kernel on ROCm (its CK backend, Composable "
              "Kernel, else AOTriton)")
#: ``auto`` on ROCm: TE's preference for FusedAttention over FlashAttention is skipped there
#: ("Select FusedAttention for performance" requires ``not IS_HIP_EXTENSION``:
#: ROCm/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/utils.py,
#: get_attention_backend, commit 030b7921), so with the flash-attn package installed TE keeps
#: FlashAttention; simrun times the fused kernel, as a run without flash-attn would
ROCM_AUTO = ("its fused kernel on ROCm when the flash-attn package is not installed (with it, "
             "ROCm's TE keeps FlashAttention: no fused-attention preference on ROCm; timed here "
             "as the fused kernel)")


def _attention_text(par: ParallelConfig, family: str) -> str:
    rocm = family in ROCM_FAMILIES
    names = {"flash": "FlashAttention-2 kernel",
             "fused": ROCM_FUSED if rocm else "cuDNN fused attention kernel (Transformer Engine)",
             "unfused": "batched matmuls + softmax (unfused, as Megatron-LM ran in 2022)"}
    req = par.requested_backend
    how = ("--flash-attention" if not par.attention_backend and par.flash_attention
           else f"--attention-backend {req}")
    if req == "auto":
        picks = ROCM_AUTO if rocm else ("cuDNN's fused kernel on Hopper and newer, "
                                        "FlashAttention-2 before")
        how += (f" (Megatron-Core's default: Transformer Engine picks {picks}; GPU family "
                f"{family or 'unknown'})")
    return f"{how}: {names[attention_kernel(par.training, family)]}"


def _fp8_notes(par: ParallelConfig) -> list[str]:
    """The FP8 lines: the recipe's casts and, with ``--fp8-param-gather``, the FP8 weights;
    the NVFP4 lines with ``--fp4-format``."""
    if par.fp4:  # NVFP4 (sim.models.features.nvfp4, nvfp4_params)
        return [Assumption(nvfp4.describe(par), "fp4")] + (
            [Assumption(nvfp4_params.describe(par), "fp4-params")] if par.fp4_param_gather
            else [])
    if par.dtype != "fp8":
        return []
    # mxfp8: --fp8-param-gather runs as the bf16-gather path (sim.models.features.mxfp8)
    out = [fp8.describe(par.fp8_recipe, par.sp,
                        par.fp8_param_gather and par.fp8_recipe != "mxfp8")]
    out = [Assumption(out[0], "fp8")]
    return out + ([Assumption(fp8_params.describe(par), "fp8-params")]
                  if par.fp8_param_gather and par.fp8_recipe != "mxfp8" else [])


def _ends_line(par) -> str | Assumption:
    """The first and last stages' extra rows (the loss: sim.models.features.cross_entropy)."""
    head = ("embedding on the first stage (vocab-parallel, TP all-reduce of its output); final "
            "norm, ")
    if not cross_entropy.variant(par):
        return (head + "output layer and vocab-parallel cross entropy (3 all-reduces of n fp32 "
                "values) on the last stage")
    return Assumption(head + "output layer and " + cross_entropy.describe(par)
                      + " on the last stage", "cross-entropy")


def assumptions(plan: ModelPlan, gpu: GpuSpec, cm: ComputeModel,
                optimizer: str | ShampooPlan) -> list[str]:
    """Human-readable list of every modelling choice behind a generated program."""
    m, par, dm = plan.model, plan.par, plan.dims
    out = [
        f"workload generated from model spec {m.name}: {m.layers} layers, hidden {m.hidden}, "
        f"{m.heads} heads ({m.kv_heads} kv)"
        + (f" of {m.head_dim} (kv_channels: Q {m.q_hidden} wide)"
           if m.q_hidden != m.hidden else "") + f", ffn {m.ffn_hidden}"
        f"{' gated' if m.gated_mlp else ''}, vocab {m.vocab} padded to {dm.v} "
        f"(multiple of 128·tp), sequence {m.seq_len}"
        + (f", MoE {m.moe.experts} experts top-{m.moe.top_k}" if m.moe else ""),
        Assumption(
            f"layout: tp={par.tp} pp={par.pp} dp={par.dp} ep={par.ep} vpp={par.vpp}"
            + (f" cp={par.cp}" if par.cp > 1 else "")
            + (f" etp={par.etp} (edp={par.edp})" if par.etp != par.tp else "")
            + f", micro batch {par.micro_batch}, global batch {par.global_batch} → "
            f"{plural(par.microbatches, 'microbatch', 'microbatches')}; "
            f"schedule {par.schedule_name}; " + _split_note(m, par), "layout"),
        Assumption(f"training dtype {par.dtype}; activations and TP/PP messages 2 bytes per "
                   f"element; DP gradients {grad_bytes(par.dtype, par.grad_reduce_in_bf16)} "
                   "bytes per parameter"
                   + (" (--grad-reduce-in-bf16: bf16 gradient buffer and reduction)"
                      if par.grad_reduce_in_bf16 else "") + f", weights {PARAM_BYTES}", "dtype"),
        Assumption(
            f"recompute: {par.recompute}; sequence parallel: {'on' if par.sp else 'off'}"
            + (" (requested but ignored: tp = 1)" if par.sequence_parallel and not par.sp
               else "") + "; attention: " + _attention_text(par, gpu_family(gpu)),
            "training-options", departs=par.sequence_parallel and not par.sp),
        Assumption(cm.describe() + f"; GPU {gpu.name}: {gpu.tflops(par.dtype):g} TFLOP/s "
                   f"{par.dtype}, {gpu.hbm_GBps:g} GB/s HBM", "compute-model"),
        Assumption(eager.describe(par), "eager"),
        Assumption(rope.describe(m, par, dm), "rope"),
        *([qk_norm.describe(m)] if m.qk_layernorm else []),
        dropout_note(m, par),
        "FLOPs: matrix multiplies only (2 per multiply-add), attention over the full s×s scores",
        Assumption(
            "TP communication per Megatron: f/g operators (all-reduce of n·h activations) or, "
            "with sequence parallelism, all-gather/reduce-scatter; blocking in the TP group "
            "unless overlapped as stated below"
            + ("" if par.tp_comm_overlap else " (--tp-comm-overlap would pipeline them with "
               "their GEMMs)"), "tp-comm"),
        _ends_line(par),
        Assumption(f"pipeline message per microbatch: b·s·h·2 bytes{' / tp' if dm.sp else ''} "
                   "= pp_bytes (no scatter/gather optimisation)", "pp-message"),
    ]
    out += _fp8_notes(par)
    if par.tp_comm_overlap:
        out.append(Assumption(tp_overlap.describe(*gpu_sms(gpu)), "tp-overlap"))
    elif tp_async.applies(par):
        out.append(Assumption(tp_async.describe(), "tp-async"))
    schedule_note = par.layout.schedule_type.assumption(par.pp, par.microbatches)
    if schedule_note:
        out.append(schedule_note)
    if par.zero:
        out.append(_zero_note(par))
    if par.cp > 1:
        out.append(Assumption(f"context parallelism cp={par.cp} (Megatron-Core ring attention "
                   f"through TransformerEngine): {m.seq_len // par.cp} tokens per rank "
                   "(2·cp chunks, "
                   "causal load balancing); attention in cp steps, each overlapped with the P2P "
                   "exchange of a KV block (backward: KV and dK/dV) around the CP ring, costed "
                   "as one ring all-gather step; step 0 the causal call, later steps the slower "
                   "of the two half-size non-causal calls, plus TE's output/LSE merges and "
                   "dQ/dK/dV accumulation at the add kernel's bandwidth, the forward's two "
                   "streams run back to back; DP gradients reduced over DP×CP "
                   f"({par.dp_cp} ranks); activations ÷ cp", "context-parallel"))
    if par.dp_cp > 1 and not par.zero:
        kind = "reduce-scatter" if par.distributed_optimizer else "all-reduce"
        if par.overlap_grad_reduce:
            out.append(Assumption(f"--overlap-grad-reduce: DP gradient {kind} per Megatron DDP "
                       f"bucket (≥ {bucket_params(par.dp, par.ddp_bucket_size):,} parameters"
                       f"{bucket_source(par.dp, par.ddp_bucket_size)}, in backward order, "
                       "per model chunk; embedding and output layer in buckets of their own; "
                       "as Megatron-Core, only pipeline stage 0's first chunk is bucketed, "
                       "every other chunk is one bucket), "
                       "non-blocking, issued in the last "
                       "microbatch's backward; the optimizer waits for them", "grad-reduce"))
        else:
            out.append(Assumption(f"--no-overlap-grad-reduce: DP gradient {kind} after the "
                                  "backward, blocking", "no-overlap-grad-reduce"))
        if delay_applies(par):
            out.append(grad_sync_note(par))
        pb = "1 byte per FP8 weight, 2 per other" if par.fp8_param_gather else "2 bytes"
        out += param_gather_step.notes(par)
        if par.overlap_param_gather:
            out.append(Assumption(
                "--overlap-param-gather: the distributed optimizer's parameter all-gather "
                f"({pb}/parameter) per gradient bucket (one per chunk but stage 0's "
                "first), non-blocking and in forward "
                "order from the start of the iteration (the previous step's all-gathers "
                "overlapping this forward); the first forward use of a bucket waits for "
                "its all-gather", "param-gather"))
        elif par.distributed_optimizer:
            out.append(f"distributed optimizer: parameter all-gather ({pb}/parameter) after "
                       "the optimizer step, not overlapped with the next iteration "
                       "(--overlap-param-gather overlaps it)")
    adam = ("Adam with Megatron's fp16 optimizer, memory-bound (bytes per updated parameter: "
            "fp16 -> fp32 gradient copy 6, unscale + inf check 8, gradient norm 4, Adam 28, "
            "fp32 -> fp16 parameter copy 6; + buffer zeroing)" if par.dtype == "fp16" else
            "Adam, memory-bound (30 bytes per updated parameter + gradient norm and buffer "
            "zeroing)")
    out.append(Assumption(f"optimizer: {adam}"
                          + ("; distributed over DP" if par.shards_optimizer else ""),
                          "optimizer"))
    if isinstance(optimizer, ShampooPlan):
        out.append(f"Shampoo: {len(optimizer.layer_blocks)} preconditioned blocks per layer; "
                   f"inverse 4th roots by {optimizer.newton_steps}-step coupled Newton "
                   f"(4·{optimizer.newton_steps}·n³ FLOPs per n×n factor, fp32) every step on "
                   "the owning DP rank (owner mod dp); the step waits for the busiest owner; "
                   "roots all-gathered in DP")
    if m.tied_embeddings and par.pp > 1:
        out.append(Assumption(f"tied embeddings: the word-embedding gradient "
                   f"({dm.v // dm.t * dm.h:,} parameters per GPU, "
                   f"{grad_bytes(par.dtype, par.grad_reduce_in_bf16)} "
                   "bytes each) all-reduced between the first and the last stage (Megatron's "
                   "embedding group) after the DP gradient sync, before the optimizer step; "
                   "blocking", "tied-embeddings"))
    if m.moe is not None:
        me = m.moe
        load = moe_load_factor(par)
        routing = ("balanced routing" if load == 1.0 else
                   f"the busiest GPU's experts get {load:g}x the balanced tokens (load imbalance "
                   f"{par.moe_load_imbalance:g}"
                   + (f", capacity factor {par.moe_capacity_factor:g}"
                      if par.moe_capacity_factor is not None else "") + ")")
        out.append(Assumption(
            f"MoE ({me.experts} experts of {me.expert_ffn_hidden}, top-{me.top_k}"
            + (f", shared-expert MLP of {me.shared_ffn_hidden}" if me.shared_ffn_hidden else "")
            + (f", first {me.dense_layers} layers dense" if me.dense_layers else "")
            + f"): {routing}; "
            + ("dropless" if par.moe_capacity_factor is None else "tokens beyond capacity "
               "dropped")
            + "; " + _expert_tp_note(par) + "; " + _dispatch_note(plan)
            + ("; the received copies sorted by local expert before fc1 and back after fc2 "
               "(Megatron-Core's alltoall dispatcher, sort_chunks_by_idxs: read and written "
               "once each way)"
               if sorts_by_local_expert(m, par) else "")
            + "; expert gradients synced in DP_EP"
            + (f" ({par.edp} ranks: TP·DP·CP / (ETP·EP))" if par.etp != par.tp else ""),
            "moe"))
        if par.overlap_moe_expert_parallel_comm:
            out.append(Assumption(describe_ep_a2a_overlap(par), "ep-a2a-overlap"))
    out.append("not modelled: gradient-norm all-reduce across model-parallel ranks (a few "
               "bytes), CPU launch overheads (unless --host-dispatch-us is given), memory "
               "allocator effects")
    mf = model_flops_per_iteration(m, par.global_batch)
    out.append(f"model FLOPs per iteration (for MFU): {mf:.4e} (vocab {m.vocab}, unpadded)")
    return out


def _expert_tp_note(par) -> str:
    """How the experts are split (--expert-tensor-parallel-size)."""
    if par.etp == par.tp:
        return "experts TP-sharded (expert tensor parallelism = TP)"
    gather = ("no expert-TP gather" if par.etp == 1 else
              "the dispatched tokens all-gathered in the ETP group before the experts and "
              "reduce-scattered after them (reduce-scatter / all-gather in backward)")
    split = (f"each expert split over {par.etp} GPUs" if par.etp > 1
             else "each expert whole on one GPU")
    return (f"{split} (--expert-tensor-parallel-size {par.etp}, TP {par.tp}): Megatron-Core's "
            f"expert grid of a stage is ETP {par.etp} × EP {par.ep} × EDP {par.edp} (ranks "
            "tp + TP·dp renumbered etp + ETP·(ep + EP·edp)); " + gather)


def _dispatch_note(plan: ModelPlan) -> str:
    """How the MoE dispatch/combine all-to-alls are sized and run (--moe-token-dispatcher-type)."""
    m, par = plan.model, plan.par
    assert m.moe is not None
    nodes = dispatch_nodes(par)
    if par.ep == 1:
        return "EP 1: no dispatch all-to-all"
    if nodes == 1 and par.moe_token_dispatcher == "flex":
        d = distinct_nodes(m.moe.experts, m.moe.top_k, par.ep)
        return (f"--moe-token-dispatcher-type flex (Megatron-Core MoEFlexTokenDispatcher, "
                f"DeepEP) inside one node: each token sent once per destination rank, {d:.3f} "
                f"of {par.ep} EP ranks on average (top-{m.moe.top_k} of {m.moe.experts} experts, "
                f"uniform routing), so the dispatch and combine all-to-alls carry n·{d:.3f}·h·2 "
                f"bytes (× the load factor) instead of n·{m.moe.top_k}·h·2, direct; one "
                "permutation into expert order each way")
    if nodes == 1:
        return ("dispatch and combine all-to-alls of n·top_k·h·2 bytes (× the load factor) "
                "in the EP group, direct (--moe-token-dispatcher-type alltoall)")
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
    n_vs = par.layout.schedule_type.virtual_stage_count(par.pp, par.vpp)
    counts = virtual_stage_layers(m.layers, par.pp, n_vs // par.pp, par.split)
    if not par.split.uneven:
        return f"{counts[0]} layers per model chunk"
    sp = par.split
    if sp.layout is not None:
        return (f"pipeline layout {sp.layout.text!r} (Megatron-Core "
                f"--pipeline-model-parallel-layout; E embedding, t transformer layer, L output "
                f"layer and loss; chunks of each rank in order): {sp.layout.describe(par.pp)}")
    how = ", ".join(x for x in (
        f"first stage {sp.first_stage_layers}" if sp.first_stage_layers is not None else "",
        f"last stage {sp.last_stage_layers}" if sp.last_stage_layers is not None else "",
        "embedding counted as a layer" if sp.account_for_embedding else "",
        "loss counted as a layer" if sp.account_for_loss else "") if x)
    per_stage = stage_layer_counts(counts, par.pp)
    return (f"uneven pipeline split ({how}; Megatron-Core rules): transformer layers per stage "
            f"{'/'.join(map(str, per_stage))}")


def _zero_note(par: ParallelConfig) -> Assumption:
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
    wire = ("16-bit parameters and fp32 gradients" if par.use_torch_fsdp2 else
            "16-bit parameters and gradients")
    return Assumption(f"{name}: {what} sharded over the {par.dp_cp} DP ranks; {wire} on the "
                      f"wire; {comm} (docs/models.md)"
                      + ("; " + fsdp2.describe() if par.use_torch_fsdp2 else ""), "zero")

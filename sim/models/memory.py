"""Per-GPU memory model: weights, gradients, optimizer state, activations, reserved.

States (Megatron mixed precision): 16-bit weights (2 bytes/parameter), fp32 main gradients (4;
2 for fp16 training and with ``--grad-reduce-in-bf16``), Adam's fp32 master weight, momentum and
variance (12; divided by the DP size with the distributed optimizer; expert parameters by
``dp/ep``). With 16-bit main gradients the optimizer step casts its shard to fp32
(Megatron-Core ``distrib_optimizer.py`` / ``optimizer.py`` ``_copy_model_grads_to_main_grads``:
``.float()``; 4 bytes per updated parameter, the ``16/d`` of Megatron-LM's distributed-optimizer
table); the next train step's ``optimizer.zero_grad()`` frees it before any forward, so a stage
needs ``max(activations, that copy)`` besides its states.

Activations per transformer layer and microbatch (Korthikanti et al., MLSys'23, §4, bytes;
``s`` sequence, ``b`` micro batch, ``h`` hidden, ``a`` heads, ``t`` TP size)::

    no recompute:           s·b·h·(10 + 24/t + 5·a·s/(h·t))        (34 + 5as/h with t = 1)
    + sequence parallel:    s·b·h·(34/t + 5·a·s/(h·t))
    selective recompute:    drops the 5·a·s/(h·t) term (so does fused/flash attention)
    full recompute:         2·s·b·h (÷ t with sequence parallelism): the layer input only

The 10 replicated units are the two LayerNorm inputs (2+2), the QKV and fc1 inputs (2+2) and
two dropout masks (1+1); the 24/t are Q, K, V, the projection input, the GeLU input and the fc2
input (2+2+2+2+8+8 for GPT; generalised to GQA, gated and MoE MLPs from the same tensors).
What the software keeps differs from that count in five places (docs/models.md, "Memory
model", with sources):

- dropout with probability 0 keeps no mask (PyTorch's ``dropout`` returns its input): the two
  hidden masks and the embedding's go with ``hidden_dropout = 0``; unfused attention keeps only
  its 16-bit softmax output (``2·a·s²·b/t``) with ``attention_dropout = 0``;
- FP8: a Transformer Engine linear layer keeps the FP8 copy of its input for the weight
  gradient (1 byte/element): the QKV, fc1 (LayerNormLinear's normed output) and fc2 inputs;
- the fused attention kernel keeps its bf16 output (the projection's input, shared in bf16; with
  FP8 the projection's 1-byte copy comes on top) and fp32 softmax statistics, ``4·a·s·b/t``;
  with selective recompute it keeps neither (it is re-run) and the projection keeps its input;
- ``qk_layernorm`` (Qwen3): the q and k norms keep their inputs and fp32 inverse RMS,
  ``s·b·(a + a_kv)·(2d + 4)/t`` (:mod:`sim.models.features.qk_norm`).

Full recompute also holds one layer's complete activations while it is recomputed. The first
stage adds the embedding dropout mask (s·b·h bytes, ÷ t with SP; none at p = 0) per microbatch;
the last stage the final-norm and output-layer inputs (4·s·b·h, ÷ t with SP) and the fp32
logits (4·s·b·V/t).

Microbatches in flight come from the exact schedule (:mod:`sim.pipeline.schedules`): the maximum
over time of Σ_chunks (forwards done − backwards done) × that chunk's activations. This gives
``min(p − r, M)`` for 1F1B stage ``r`` and Megatron's ``(1 + (p − 1)/(p·v))`` factor for the
interleaved first stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sim.models.features import qk_norm
from sim.models.features.moe import moe_load_factor
from sim.models.features.zero import units as zero_units
from sim.models.features.zero import zero_state_bytes
from sim.models.optimizer import PARAM_BYTES, grad_bytes
from sim.models.plan import ModelPlan, StagePlan, build_model_plan
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig
from sim.pipeline.schedules import schedule_tuples
from sim.topology.gpu import GpuSpec

RESERVED_BYTES = 2_000_000_000  # CUDA context, cuBLAS/NCCL workspaces, allocator slack


@dataclass
class StageMemory:
    """Bytes on one GPU of pipeline stage ``stage``."""

    stage: int
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    reserved_bytes: int
    inflight_microbatches: int  # peak number of (microbatch, chunk) activation sets held
    #: fp32 copy of 16-bit main gradients the optimizer makes for its step; freed by the next
    #: iteration's ``zero_grad`` before any forward, so it never coexists with activations
    grad_copy_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.grads_bytes + self.optimizer_bytes
                + max(self.activations_bytes, self.grad_copy_bytes) + self.reserved_bytes)

    def components(self) -> dict[str, int]:
        return {"weights_bytes": self.weights_bytes, "grads_bytes": self.grads_bytes,
                "optimizer_bytes": self.optimizer_bytes,
                "activations_bytes": self.activations_bytes,
                "grad_copy_bytes": self.grad_copy_bytes,
                "reserved_bytes": self.reserved_bytes, "total_bytes": self.total_bytes}


@dataclass
class MemoryReport:
    """Per-stage memory and whether the busiest GPU fits ``capacity_bytes``."""

    stages: list[StageMemory]
    capacity_bytes: int
    feasible: bool
    reason: str
    assumptions: list[str] = field(default_factory=list)

    @property
    def peak(self) -> StageMemory:
        """The stage needing the most memory (first such stage on ties)."""
        return max(self.stages, key=lambda st: (st.total_bytes, -st.stage))


def saved_input_bytes(par: ParallelConfig) -> int:
    """Bytes per element of the input a Transformer Engine linear layer keeps for its
    weight-gradient GEMM: 1 with FP8 (the quantized copy it made for the forward GEMM, only its
    row- or column-wise data kept), else 2 (the bf16/fp16 tensor itself). NVFP4 keeps its
    column-wise FP4 copy, 0.5 B plus 1/16 B of scales: counted at 1 B (whole bytes per
    element here; an overestimate of 7/16 B per element)."""
    return 1 if par.dtype == "fp8" or par.fp4 else 2


def layer_activation_bytes(model: ModelSpec, par: ParallelConfig, recompute: str | None = None
                           ) -> int:
    """Activation bytes one transformer layer keeps for backward, per GPU and microbatch
    (module doc: Korthikanti's terms with the dropout, FP8 and fused-attention corrections)."""
    rc = par.recompute if recompute is None else recompute
    s, b, h, t = model.seq_len // par.cp, par.micro_batch, model.hidden, par.tp
    sp = par.sp
    sbh = s * b * h
    if rc == "full":
        return 2 * sbh // (t if sp else 1)
    x = saved_input_bytes(par)
    masks = 2 if model.hidden_dropout > 0 else 0  # the two hidden-dropout masks, 1 byte each
    keeps_out = par.fused_attention and rc != "selective"
    kvh, f, qh = model.kv_hidden, model.ffn_hidden, model.q_hidden
    f1 = 2 * f if model.gated_mlp else f
    sb = s * b
    # split across TP: Q, K, V (2 bytes each element); the attention output, which is the
    # projection's input: kept by the fused attention for its backward (2) plus, with FP8, the
    # projection's quantized copy (1); otherwise the projection keeps its input (x)
    proj = (3 if x == 1 else 2) if keeps_out else x
    split = sb * (2 * qh + 4 * kvh + proj * qh)
    if model.moe is None:
        # LayerNorm inputs (2 + 2), QKV and fc1 inputs (x each: the normed input TE's
        # LayerNormLinear keeps), dropout masks
        replicated = (4 + 2 * x + masks) * sbh
        split += sb * (2 * f1 + x * f)  # fc1 output (activation input, 2) and fc2 input (x)
    else:
        me = model.moe
        k = me.top_k
        fe = me.expert_ffn_hidden
        fe1 = 2 * fe if model.gated_mlp else fe
        load = moe_load_factor(par)
        # dense part of the residual stream as for GPT; the expert input is gathered across
        # TP (stored at full size); expert activations for the busiest GPU's token copies
        # (n·top_k·load); shared experts as a dense MLP of shared·fe
        replicated = (4 + x + masks) * sbh + math.ceil(x * k * load * sbh)
        split += math.ceil(k * load * sb * (2 * fe1 + x * fe))
        fs = me.shared_ffn_hidden
        split += sb * (2 * (2 * fs if model.gated_mlp else fs) + x * fs)
    total = replicated // (t if sp else 1) + split // t + qk_norm.saved_bytes(model, par)
    a = model.heads
    if rc != "selective" and not par.fused_attention:
        # softmax output (2, kept by the softmax backward and the product with V); with
        # attention dropout also its mask (1) and output (2)
        total += (5 if model.attention_dropout > 0 else 2) * a * s * s * b // t
    if keeps_out:
        total += 4 * a * s * b // t  # fp32 softmax statistics (log-sum-exp) per head and token
    return total


def _stage_activation_units(plan: ModelPlan, st: StagePlan) -> tuple[list[int], int]:
    """Activation bytes per microbatch of each chunk of ``st``, and the extra one-off bytes."""
    model, par = plan.model, plan.par
    s, b, h, t = model.seq_len // par.cp, par.micro_batch, model.hidden, par.tp
    div = t if par.sp else 1
    per_layer = layer_activation_bytes(model, par)
    p, v = par.pp, par.vpp
    typ = par.layout.schedule_type
    last_vs = typ.virtual_stage_count(p, v) - 1
    units = []
    for c, ids in enumerate(st.layers):
        vs = typ.virtual_stage(p, st.stage, c)
        u = len(ids) * per_layer
        if vs == 0 and model.hidden_dropout > 0:
            u += s * b * h // div  # embedding dropout mask
        if vs == last_vs:
            u += 4 * s * b * h // div + 4 * s * b * plan.dims.v // t
        units.append(u)
    extra = layer_activation_bytes(model, par, "none") if par.recompute == "full" else 0
    return units, extra


def inflight_activation_bytes(units: list[int], ops) -> tuple[int, int]:
    """Peak of Σ_chunks live microbatches × bytes per microbatch over the op order ``ops``
    (:class:`~sim.pipeline.ops.ScheduleOp`), and the peak number of live (microbatch, chunk)
    activation sets (``min(p − r, M)`` for 1F1B). With separate weight-gradient passes (``W``
    ops, ZB-H1) a microbatch's activations are counted live until its ``W``: conservative, as
    W needs only the inputs of the linear layers and the output gradients (``min(p, M)`` on
    every stage of ZB-H1, the same peak as 1F1B's first stage). A whole backward releases
    them (DualPipe mixes both); in an overlapped F&B op (DualPipe) the forward's activations
    are counted before the backward's are released (conservative)."""
    vectors = _live_vectors(ops)
    peak = max(sum(u * k for u, k in zip(units, vec, strict=False)) for vec in vectors)
    return peak, max(sum(vec) for vec in vectors)


_LIVE: dict[int, tuple[Any, frozenset[tuple[int, ...]]]] = {}


def _live_vectors(ops) -> frozenset[tuple[int, ...]]:
    """Every distinct vector of live microbatches per chunk over the op order ``ops`` (after
    each forward, backward or weight-gradient pass; the empty start included): the peaks of
    :func:`inflight_activation_bytes` are maxima over them. Memoised per op-order object (a
    sweep's layouts share :func:`~sim.pipeline.schedules.schedule_tuples`' tables)."""
    got = _LIVE.get(id(ops))
    if got is not None and got[0] is ops:
        return got[1]
    chunks = 1 + max((o.chunk for op in ops for o in (op, op.paired) if o is not None),
                     default=0)
    live = [0] * chunks
    seen = {tuple(live)}
    split = any(op.kind == "W" for op in ops)
    for op in ops:
        for o in (op, op.paired) if op.paired is not None else (op,):
            if o.kind == "F":
                live[o.chunk] += 1
            elif o.kind == "W" or not o.input_grad_only(split):
                live[o.chunk] -= 1
            seen.add(tuple(live))
    vectors = frozenset(seen)
    if isinstance(ops, tuple):  # a shared table: keep it alive with its vectors
        if len(_LIVE) > 64:
            _LIVE.clear()
        _LIVE[id(ops)] = (ops, vectors)
    return vectors


def check_memory(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec, *,
                 plan: ModelPlan | None = None, reserved_bytes: int = RESERVED_BYTES
                 ) -> MemoryReport:
    """Per-GPU memory of every stage and feasibility on ``gpu`` (capacity ``hbm_GB·1e9``)."""
    plan = plan or build_model_plan(model, par)
    table = schedule_tuples(par.schedule_name, par.pp, par.microbatches, par.vpp,
                            par.microbatch_group_size, par.overlap_moe_expert_parallel_comm)
    g = grad_bytes(par.dtype, par.grad_reduce_in_bf16)
    stages = []
    for st in plan.stages:
        dense, expert = st.params, st.expert_params
        params = dense + expert
        if par.distributed_optimizer:
            shard = -(-dense // par.dp_cp) + -(-expert // (par.edp))
        else:
            shard = params
        opt = 12 * shard
        # 16-bit main gradients: the optimizer step casts its shard to fp32 (4 bytes)
        copy = 4 * shard if g == 2 else 0
        weights, grads = PARAM_BYTES * params, g * params
        if par.zero:
            largest = max((u[2] for rows in st.chunks for u in zero_units(rows)), default=0)
            weights, grads, opt = zero_state_bytes(par, params, largest)
            copy = 0
        units, extra = _stage_activation_units(plan, st)
        act, mb = inflight_activation_bytes(units, table[st.stage])
        stages.append(StageMemory(st.stage, weights, grads, opt, act + extra,
                                  reserved_bytes, mb, copy))
    capacity = int(gpu.hbm_GB * 1e9)
    peak = max(stages, key=lambda x: (x.total_bytes, -x.stage))
    gb = 1e9
    detail = (f"weights {peak.weights_bytes / gb:.1f}, gradients {peak.grads_bytes / gb:.1f}, "
              f"optimizer {peak.optimizer_bytes / gb:.1f}, activations "
              f"{peak.activations_bytes / gb:.1f}, reserved {peak.reserved_bytes / gb:.1f} GB")
    feasible = peak.total_bytes <= capacity
    verb = "fits in" if feasible else "exceeds"
    reason = (f"stage {peak.stage} needs {peak.total_bytes / gb:.1f} GB, {verb} the "
              f"{capacity / gb:.1f} GB of {gpu.name} ({detail})")
    notes = [
        f"memory: 16-bit weights, {g}-byte gradients, Adam 12 bytes/parameter"
        + (" ÷ dp (distributed optimizer)" if par.distributed_optimizer else "")
        + ("; the step's fp32 copy of the 16-bit gradients (4 bytes/parameter"
           + (" ÷ dp" if par.distributed_optimizer else "") + ") not beside the activations"
           if g == 2 else "")
        if not par.zero else
        f"memory (ZeRO stage {par.zero}, Rajbhandari et al. 2020): 16-bit weights"
        + (" ÷ dp plus the full parameters of two units (running and prefetched)"
           if par.zero >= 3 else "") + ", 16-bit gradients" + (" ÷ dp" if par.zero >= 2 else "")
        + ", Adam 12 bytes/parameter ÷ dp",
        "activations per Korthikanti et al. (34sbh + 5as²b per layer, ÷ t with TP/SP, "
        "recompute-dependent; no dropout masks at p = 0"
        + ("; FP8 linear inputs kept at 1 byte" if par.dtype == "fp8" else "")
        + ("; NVFP4 linear inputs counted at 1 byte (9/16 B kept)" if par.fp4 else "")
        + ("; fused attention: output and fp32 softmax statistics, no s×s"
           if par.fused_attention and par.recompute == "none" else "")
        + "), microbatches in flight from the exact schedule",
        f"reserved {reserved_bytes / gb:g} GB per GPU (CUDA context, workspaces); no allocator "
        "fragmentation model; capacity = hbm_GB × 1e9 bytes",
    ]
    return MemoryReport(stages, capacity, feasible, reason, notes)

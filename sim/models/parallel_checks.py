"""Checks of a parallel layout against a model (Megatron-LM's own refusals): the layout's
values, TP divisibility, experts, attention backend, context parallelism, ZeRO/FSDP, the
schedule, MoE options and --tp-comm-overlap. Each failure is a :class:`UsageError` naming the
flag."""

from __future__ import annotations

from sim.errors import UsageError
from sim.models.features import cuda_graphs, eager, nvfp4, qk_norm, rope
from sim.models.features.fp8 import check_recipe
from sim.models.features.moe import check_ep_a2a_overlap
from sim.models.vocab.spec import ModelSpec
from sim.options.registry import registry
from sim.parallel.config import (
    ATTENTION_BACKENDS,
    DTYPES,
    RECOMPUTE,
    ParallelConfig,
)
from sim.parallel.layer_layout import OPTION as LAYOUT_OPTION
from sim.parallel.split import virtual_stage_layers


def validate(model: ModelSpec, par: ParallelConfig) -> None:
    """Raise :class:`UsageError` (naming the flag) if ``par`` cannot run ``model`` in Megatron."""
    _check_values(par)
    _check_tensor_parallel(model, par)
    _check_layer_layout(par)
    n_vs = par.layout.schedule_type.virtual_stage_count(par.pp, par.vpp)
    virtual_stage_layers(model.layers, par.pp, n_vs // par.pp, par.split)
    if par.global_batch % (par.micro_batch * par.dp):
        raise UsageError(
            f"global batch {par.global_batch} is not a multiple of micro_batch·dp = "
            f"{par.micro_batch}·{par.dp}", field="global_batch")
    _check_experts(model, par)
    check_context_parallel(model, par)
    check_zero(model, par)
    _check_moe_options(model, par)
    check_ep_a2a_overlap(model, par)
    _check_schedule(par)
    eager.check(model, par)
    rope.check(model, par)
    qk_norm.check(model, par)
    _check_tp_comm_overlap(par)
    cuda_graphs.check(model, par)
    check_recipe(par.fp8_recipe)
    if par.fp4:  # NVFP4 in TE's GroupedLinear (routed experts) is not modelled
        nvfp4.check_model(model.moe is not None)
    for check in dict.fromkeys(o.check for o in registry() if o.check is not None):
        check(par)  # the declared options' framework refusals (sim.options.registry)


def _check_tp_comm_overlap(par: ParallelConfig) -> None:
    """``--tp-comm-overlap`` needs sequence parallelism with TP > 1 (Megatron-LM asserts
    ``--sequence-parallel``, megatron/training/arguments.py; at TP 1 there is no TP
    collective). Context parallelism and MoE layers are modelled
    (sim/models/features/tp_overlap.py)."""
    if not par.tp_comm_overlap:
        return
    if not par.sp:
        raise UsageError("needs --sequence-parallel and TP > 1 (Megatron-LM asserts sequence "
                         "parallelism with it; at TP 1 there is no TP communication)",
                         field="tp_comm_overlap")


def _check_layer_layout(par: ParallelConfig) -> None:
    """``--pipeline-model-parallel-layout`` lists virtual stages in Megatron-Core's order:
    virtual stage ``i`` is chunk ``i // PP`` of stage ``i % PP``; the schedule must place its
    chunks so (not the V placement, not DualPipe's two directions)."""
    typ, p, v = par.layout.schedule_type, par.pp, par.vpp
    if par.split.layout is None:
        return
    megatron = typ.virtual_stage_count(p, v) == p * v and all(
        typ.virtual_stage(p, r, c) == c * p + r for r in range(p) for c in range(v))
    if not megatron:
        raise UsageError(f"lists virtual stages in Megatron-Core's order (virtual stage i on "
                         f"pipeline rank i mod PP); the {typ.name} schedule places its chunks "
                         "otherwise", field=LAYOUT_OPTION)


def _check_schedule(par: ParallelConfig) -> None:
    typ = par.layout.schedule_type
    if typ.v_shape and par.split.uneven:
        raise UsageError(f"uneven pipeline splits are not modelled with the {par.schedule_name} "
                         "schedule (its V placement puts the first and the last layers on "
                         "stage 0)", field="schedule")
    typ.check(par.pp, par.microbatches, par.vpp, par.microbatch_group_size, vpp_field="vpp")


def _check_values(par: ParallelConfig) -> None:
    """Sizes are positive integers; recompute and dtype are known names."""
    for name in ("tp", "pp", "dp", "vpp", "ep", "cp", "micro_batch", "global_batch"):
        value = getattr(par, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"must be a positive integer, got {value!r}", field=name)
    if par.recompute not in RECOMPUTE:
        raise UsageError(f"must be one of {', '.join(RECOMPUTE)}, got {par.recompute!r}",
                         field="recompute")
    _check_attention(par)
    if par.overlap_param_gather and not (par.distributed_optimizer and par.overlap_grad_reduce):
        # Megatron-LM's argument check refuses the same (megatron/training/arguments.py)
        raise UsageError("needs --distributed-optimizer and --overlap-grad-reduce (as in "
                         "Megatron-LM)", field="overlap_param_gather")
    if par.overlap_param_gather and par.zero >= 3:
        raise UsageError("ZeRO-3 already gathers parameters per layer with prefetch; "
                         "--overlap-param-gather would change nothing",
                         field="overlap_param_gather")
    if par.dtype not in DTYPES:
        raise UsageError(f"must be one of {', '.join(DTYPES)}, got {par.dtype!r}", field="dtype")


def _check_tensor_parallel(model: ModelSpec, par: ParallelConfig) -> None:
    """TP divides the heads, the key/value heads, the FFN and (with SP) the sequence."""
    if model.heads % par.tp:
        raise UsageError(f"tensor-parallel size {par.tp} must divide the {model.heads} heads",
                         field="tp")
    if model.kv_heads % par.tp:
        raise UsageError(
            f"tensor-parallel size {par.tp} must divide the {model.kv_heads} key/value heads",
            field="tp")
    if model.ffn_hidden % par.tp:
        raise UsageError(f"tensor-parallel size {par.tp} must divide ffn_hidden "
                         f"{model.ffn_hidden}", field="tp")
    if par.sp and model.seq_len % par.tp:
        raise UsageError(f"sequence parallelism needs tp={par.tp} to divide seq_len "
                         f"{model.seq_len}", field="sequence_parallel")


def _check_experts(model: ModelSpec, par: ParallelConfig) -> None:
    """EP divides DP×CP and the experts of a mixture-of-experts model (with an expert TP size
    of its own: :func:`check_expert_tp`)."""
    if par.etp != par.tp:
        check_expert_tp(model, par)
    elif par.dp_cp % par.ep:
        folding = (" (or give --expert-tensor-parallel-size below TP: EP may then span the TP "
                   "ranks, ETP·EP dividing TP·DP·CP)" if par.tp > 1 else "")
        raise UsageError(f"expert-parallel size {par.ep} must divide dp {par.dp}"
                         + (f" × cp {par.cp}" if par.cp > 1 else "") + folding, field="ep")
    if par.ep > 1:
        if model.moe is None:
            raise UsageError(f"ep={par.ep} needs a mixture-of-experts model", field="ep")
        if model.moe.experts % par.ep:
            raise UsageError(f"expert-parallel size {par.ep} must divide the "
                             f"{model.moe.experts} experts", field="ep")


def check_expert_tp(model: ModelSpec, par: ParallelConfig) -> None:
    """``--expert-tensor-parallel-size`` ≠ TP: a MoE model, ETP dividing the expert FFN, ETP·EP
    dividing the TP·DP·CP ranks of a stage (Megatron-Core's ``initialize_model_parallel``:
    world size divisible by ETP·EP·PP), Megatron (not DeepSpeed ZeRO / FSDP) data
    parallelism."""
    flag = "expert_tensor_parallel_size"
    etp = par.etp
    if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1:
        raise UsageError(f"must be a positive integer, got {etp!r}", field=flag)
    if model.moe is None:
        raise UsageError("applies to mixture-of-experts models", field=flag)
    if model.moe.expert_ffn_hidden % etp:
        raise UsageError(f"expert tensor-parallel size {etp} must divide the expert FFN "
                         f"{model.moe.expert_ffn_hidden}", field=flag)
    ranks = par.tp * par.dp_cp
    if ranks % (etp * par.ep):
        raise UsageError(f"ETP·EP = {etp}·{par.ep} must divide the {ranks} ranks of a pipeline "
                         f"stage (TP·DP" + ("·CP" if par.cp > 1 else "") + ")", field=flag)
    if par.zero:
        raise UsageError("DeepSpeed ZeRO / FSDP have no expert tensor parallelism (a "
                         "Megatron-Core option)", field=flag)


def _check_attention(par: ParallelConfig) -> None:
    if par.attention_backend and par.attention_backend not in ATTENTION_BACKENDS:
        raise UsageError(f"must be one of {', '.join(ATTENTION_BACKENDS)}, got "
                         f"{par.attention_backend!r}", field="attention_backend")
    if par.flash_attention and par.attention_backend not in ("", "flash"):
        raise UsageError(f"--flash-attention contradicts --attention-backend "
                         f"{par.attention_backend}", field="attention_backend")


def check_context_parallel(model: ModelSpec, par: ParallelConfig) -> None:
    """Megatron-Core's constraints on ``--context-parallel-size``: TransformerEngine's fused
    attention (simrun: ``--flash-attention``), and a sequence divisible into ``2·cp`` chunks
    (the causal load balancing), each rank's half divisible by TP with sequence parallelism."""
    cp = par.cp
    if cp == 1:
        return
    if not par.fused_attention:
        raise UsageError("context parallelism runs through TransformerEngine's fused attention "
                         "in Megatron-Core; drop --attention-backend unfused", field="cp")
    if model.seq_len % (2 * cp):
        raise UsageError(f"sequence length {model.seq_len} must divide into 2·cp = {2 * cp} "
                         "chunks (Megatron-Core's causal load balancing)", field="cp")
    if par.sp and (model.seq_len // cp) % par.tp:
        raise UsageError(f"each CP rank's {model.seq_len // cp} tokens must divide by tp "
                         f"{par.tp} with sequence parallelism", field="cp")


def check_zero(model: ModelSpec, par: ParallelConfig) -> None:
    """ZeRO/FSDP combinations simrun models (each refusal names what it would take)."""
    if par.zero not in (0, 1, 2, 3):
        raise UsageError(f"must be 1, 2 or 3, got {par.zero}", field="zero")
    if par.use_torch_fsdp2 and not par.fsdp:
        raise UsageError("needs --fsdp (FSDP2's fully_shard is FULL_SHARD: ZeRO-3 semantics)",
                         field="use_torch_fsdp2")
    flag = "fsdp" if par.fsdp else "zero"
    if par.fsdp and par.zero != 3:
        raise UsageError("FSDP FULL_SHARD is ZeRO stage 3; do not combine with another --zero",
                         field="fsdp")
    if par.zero == 0:
        return
    if par.distributed_optimizer:
        raise UsageError("Megatron's distributed optimizer and ZeRO both shard the optimizer; "
                         "give one", field=flag)
    if par.zero >= 2 and par.pp > 1:
        raise UsageError(f"ZeRO stage {par.zero} with pipeline parallelism is not supported "
                         "(DeepSpeed's pipeline engine allows stage ≤ 1)", field=flag)
    if par.zero >= 3 and model.moe is not None:
        raise UsageError("ZeRO-3 of expert parameters is not modelled", field=flag)
    if not par.overlap_grad_reduce:
        raise UsageError("--no-overlap-grad-reduce applies to Megatron DDP, not ZeRO",
                         field=flag)


MOE_DISPATCHERS = ("alltoall", "flex")


def _check_moe_options(model: ModelSpec, par: ParallelConfig) -> None:
    if par.moe_token_dispatcher not in MOE_DISPATCHERS:
        raise UsageError(f"unknown dispatcher {par.moe_token_dispatcher!r} (known: "
                         f"{', '.join(MOE_DISPATCHERS)}; Megatron-Core's allgather dispatcher "
                         "is not modelled)", field="moe_token_dispatcher")
    if par.moe_token_dispatcher != "alltoall" and model.moe is None:
        raise UsageError("applies to mixture-of-experts models",
                         field="moe_token_dispatcher")
    if par.training.moe_shared_expert_intermediate_size is not None and model.moe is None:
        raise UsageError("applies to mixture-of-experts models",
                         field="moe_shared_expert_intermediate_size")
    if par.ep_nodes < 1 or par.ep % par.ep_nodes:
        raise UsageError(f"an EP group of {par.ep} ranks cannot span {par.ep_nodes} nodes "
                         "evenly", field="ep")
    given = par.moe_load_imbalance != 1.0 or par.moe_capacity_factor is not None
    if given and model.moe is None:
        raise UsageError("applies to mixture-of-experts models",
                         field="moe_load_imbalance" if par.moe_load_imbalance != 1.0
                         else "moe_capacity_factor")
    if not 1.0 <= par.moe_load_imbalance <= 64.0:
        raise UsageError(f"must lie in [1, 64] (busiest GPU's tokens ÷ balanced share), got "
                         f"{par.moe_load_imbalance}", field="moe_load_imbalance")
    cf = par.moe_capacity_factor
    if cf is not None and not 0.0 < cf <= 64.0:
        raise UsageError(f"must lie in (0, 64], got {cf}", field="moe_capacity_factor")

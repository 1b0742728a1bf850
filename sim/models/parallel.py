"""Parallel layout and training options of a generated workload (Megatron-LM semantics)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from sim.errors import UsageError
from sim.layout import Layout
from sim.models.spec import ModelSpec
from sim.models.split import PipelineSplit, virtual_stage_layers
from sim.schedules import V_SHAPE, check_schedule

RECOMPUTE = ("none", "selective", "full")
#: Megatron-Core's ``--attention-backend`` values; ``auto`` (Megatron-Core's default,
#: ``TransformerConfig.attention_backend = AttnBackend.auto``) lets Transformer Engine pick: its
#: cuDNN fused kernel on Hopper and newer, FlashAttention-2 before (:func:`attention_kernel`);
#: ``local`` is not modelled
ATTENTION_BACKENDS = ("flash", "fused", "unfused", "auto")
#: GPU families (``sim/data/gpus.csv``) before Hopper: there ``auto`` runs FlashAttention-2
PRE_HOPPER_FAMILIES = ("A100",)
DTYPES = ("bf16", "fp16", "fp8")
#: the default pipeline split: layers spread evenly over the stages
EVEN_SPLIT = PipelineSplit()


@dataclass(frozen=True)
class Training:
    """Training hyper-parameters of a model-driven run (Megatron-LM's names).

    ``global_batch`` sequences per iteration, ``micro_batch`` sequences per microbatch;
    ``sequence_parallel`` (Megatron ignores it when TP = 1), ``recompute`` (``none``,
    ``selective``, ``full``), ``dtype`` (its dense peak is the MFU reference),
    ``distributed_optimizer`` (optimizer state sharded over DP), ``flash_attention`` (fused
    attention kernel, no s×s score matrix in memory; the calibration measurements, Korthikanti
    et al. 2022, used the unfused kernels), ``overlap_grad_reduce`` (data-parallel gradient
    collectives issued per layer during the last microbatch's backward, non-blocking; otherwise
    one blocking collective after the backward), ``overlap_param_gather`` (Megatron-Core, with the
    distributed optimizer: each bucket's parameter all-gather runs beside the next iteration's
    forward; a bucket's first use waits for it), ``tp_comm_overlap`` (Megatron-Core
    ``--tp-comm-overlap``: Transformer Engine pipelines the TP collectives of each dense layer
    with their GEMMs; :mod:`sim.models.tp_overlap`). ``attention_backend``: Megatron-Core's
    ``--attention-backend`` (``flash``: FlashAttention-2; ``fused``: cuDNN's fused attention
    through Transformer Engine; ``unfused``: batched matmuls + softmax, as Megatron-LM ran in
    2022; ``auto``: Transformer Engine's choice, see :func:`attention_kernel`); empty: ``flash``
    with ``flash_attention``, else ``auto`` (Megatron-Core's default). ``global_batch``
    ``None``: not chosen yet (``simrun --model`` derives it from the microbatches;
    :func:`validate` refuses it).
    ``split``: Megatron-Core's uneven pipeline split (:mod:`sim.models.split`). ``fsdp``:
    PyTorch FSDP FULL_SHARD (ZeRO stage 3 semantics; :mod:`sim.models.zero`).
    ``moe_load_imbalance``: tokens of the busiest expert GPU ÷ the balanced share (≥ 1);
    ``moe_capacity_factor``: Megatron's ``--moe-expert-capacity-factor`` (``None``:
    dropless); :mod:`sim.models.moe`. ``moe_token_dispatcher``: Megatron-Core's
    ``--moe-token-dispatcher-type`` (``alltoall``: NCCL all-to-alls of every token copy;
    ``flex``: the DeepEP backend, one copy per destination node, hierarchical across nodes);
    ``moe_shared_expert_intermediate_size``: Megatron-Core's
    ``--moe-shared-expert-intermediate-size`` (replaces the spec's shared-expert width);
    ``ep_nodes``: the nodes one EP group spans on the cluster (set by the scenario from the
    topology and the placement; 1 when unknown or uneven).
    """

    global_batch: int | None = None
    micro_batch: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    dtype: str = "bf16"
    distributed_optimizer: bool = False
    flash_attention: bool = False
    overlap_grad_reduce: bool = True
    attention_backend: str = ""
    split: PipelineSplit = EVEN_SPLIT
    fsdp: bool = False
    moe_load_imbalance: float = 1.0
    moe_capacity_factor: float | None = None
    overlap_param_gather: bool = False
    moe_token_dispatcher: str = "alltoall"
    moe_shared_expert_intermediate_size: int | None = None
    ep_nodes: int = 1
    tp_comm_overlap: bool = False

    @property
    def backend(self) -> str:
        """The attention kernel that runs: ``flash``, ``fused`` or ``unfused``."""
        return attention_kernel(self, "")

    @property
    def requested_backend(self) -> str:
        """The backend asked for: ``--attention-backend``, else ``flash`` with
        ``--flash-attention``, else ``auto`` (Megatron-Core's default)."""
        return self.attention_backend or ("flash" if self.flash_attention else "auto")

    @property
    def fused_attention(self) -> bool:
        """One fused kernel per attention call (no s×s score matrix in memory)."""
        return self.backend != "unfused"


def attention_kernel(training: Training, gpu_family: str) -> str:
    """The attention kernel that runs on a GPU of ``gpu_family`` (``""``: unknown, taken as
    Hopper or newer): the requested backend, or for ``auto`` Transformer Engine's choice —
    its ``get_attention_backend`` (transformer_engine/pytorch/attention/dot_product_attention/
    utils.py) disables FlashAttention "to give FusedAttention preference on Hopper+" when both
    can run, so ``fused`` (cuDNN) from compute capability 9.0 on and ``flash`` before."""
    b = training.requested_backend
    if b != "auto":
        return b
    return "flash" if gpu_family in PRE_HOPPER_FAMILIES else "fused"


def _part(part: str, name: str) -> property:
    """A read-only view of ``self.<part>.<name>`` (the data lives in one place)."""
    return property(lambda self: getattr(getattr(self, part), name),
                    doc=f"``{part}.{name}``")


def fields_of(obj) -> dict:
    """A dataclass's fields by name, one level deep (nested dataclasses kept as they are,
    unlike :func:`dataclasses.asdict`)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _microbatches(global_batch, micro_batch, dp) -> int:
    """``global_batch / (micro_batch · dp)``, or 0 when a size is not a positive integer
    (:func:`validate` names the flag)."""
    sizes = (global_batch, micro_batch, dp)
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
        return global_batch // (micro_batch * dp)
    return 0


@dataclass(frozen=True, init=False)
class ParallelConfig:
    """A model-driven run's :class:`~sim.layout.Layout` and :class:`Training`.

    Built from Megatron-style flat arguments (``ParallelConfig(tp=8, pp=8, global_batch=64,
    sequence_parallel=True)``) or from the two parts (:meth:`of`). The layout's microbatches
    per iteration are ``global_batch / (micro_batch · dp)``. The flat names read through to
    the part that holds them (``par.tp`` is ``par.layout.tp``).
    """

    layout: Layout
    training: Training

    def __init__(self, tp: int = 1, pp: int = 1, dp: int = 1, vpp: int = 1, ep: int = 1,
                 micro_batch: int = 1, global_batch: int = 1, sequence_parallel: bool = False,
                 recompute: str = "none", dtype: str = "bf16",
                 distributed_optimizer: bool = False, schedule: str | None = None,
                 microbatch_group_size: int | None = None, flash_attention: bool = False,
                 overlap_grad_reduce: bool = True, attention_backend: str = "",
                 split: PipelineSplit = EVEN_SPLIT, cp: int = 1, zero: int = 0,
                 fsdp: bool = False, moe_load_imbalance: float = 1.0,
                 moe_capacity_factor: float | None = None,
                 overlap_param_gather: bool = False, moe_token_dispatcher: str = "alltoall",
                 moe_shared_expert_intermediate_size: int | None = None,
                 ep_nodes: int = 1, tp_comm_overlap: bool = False) -> None:
        training = Training(global_batch=global_batch, micro_batch=micro_batch,
                            sequence_parallel=sequence_parallel, recompute=recompute,
                            dtype=dtype, distributed_optimizer=distributed_optimizer,
                            flash_attention=flash_attention,
                            overlap_grad_reduce=overlap_grad_reduce,
                            attention_backend=attention_backend, split=split, fsdp=fsdp,
                            moe_load_imbalance=moe_load_imbalance,
                            moe_capacity_factor=moe_capacity_factor,
                            overlap_param_gather=overlap_param_gather,
                            moe_token_dispatcher=moe_token_dispatcher,
                            moe_shared_expert_intermediate_size=(
                                moe_shared_expert_intermediate_size),
                            ep_nodes=ep_nodes, tp_comm_overlap=tp_comm_overlap)
        layout = Layout(tp=tp, pp=pp, dp=dp, ep=ep, vpp=vpp, cp=cp, zero=zero,
                        microbatches=_microbatches(global_batch, micro_batch, dp),
                        schedule=schedule, microbatch_group_size=microbatch_group_size)
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "training", training)

    @classmethod
    def of(cls, layout: Layout, training: Training) -> ParallelConfig:
        """The config of ``layout`` trained with ``training``; ``layout.microbatches`` must
        be ``global_batch / (micro_batch · dp)``."""
        par = cls(tp=layout.tp, pp=layout.pp, dp=layout.dp, vpp=layout.vpp, ep=layout.ep,
                  cp=layout.cp, zero=layout.zero, schedule=layout.schedule,
                  microbatch_group_size=layout.microbatch_group_size,
                  **fields_of(training))
        if par.layout != layout:
            raise UsageError(f"{layout.microbatches} microbatches × micro batch "
                             f"{training.micro_batch} × DP {layout.dp} ≠ global batch "
                             f"{training.global_batch}", field="--microbatches")
        return par

    tp = _part("layout", "tp")
    pp = _part("layout", "pp")
    dp = _part("layout", "dp")
    ep = _part("layout", "ep")
    vpp = _part("layout", "vpp")
    microbatches = _part("layout", "microbatches")
    schedule = _part("layout", "schedule")
    microbatch_group_size = _part("layout", "microbatch_group_size")
    cp = _part("layout", "cp")
    zero = _part("layout", "zero")
    world_size = _part("layout", "world_size")
    schedule_name = _part("layout", "schedule_name")
    global_batch = _part("training", "global_batch")
    micro_batch = _part("training", "micro_batch")
    sequence_parallel = _part("training", "sequence_parallel")
    recompute = _part("training", "recompute")
    dtype = _part("training", "dtype")
    distributed_optimizer = _part("training", "distributed_optimizer")
    flash_attention = _part("training", "flash_attention")
    overlap_grad_reduce = _part("training", "overlap_grad_reduce")
    overlap_param_gather = _part("training", "overlap_param_gather")
    tp_comm_overlap = _part("training", "tp_comm_overlap")
    attention_backend = _part("training", "attention_backend")
    backend = _part("training", "backend")
    requested_backend = _part("training", "requested_backend")
    fused_attention = _part("training", "fused_attention")
    split = _part("training", "split")
    fsdp = _part("training", "fsdp")
    moe_load_imbalance = _part("training", "moe_load_imbalance")
    moe_capacity_factor = _part("training", "moe_capacity_factor")
    moe_token_dispatcher = _part("training", "moe_token_dispatcher")
    ep_nodes = _part("training", "ep_nodes")

    @property
    def shards_optimizer(self) -> bool:
        """Optimizer state sharded over DP×CP (distributed optimizer or ZeRO ≥ 1)."""
        return self.training.distributed_optimizer or self.layout.zero >= 1

    @property
    def dp_cp(self) -> int:
        """Ranks that reduce gradients together (and shard the distributed optimizer): DP×CP,
        as in Megatron-Core."""
        return self.layout.dp * self.layout.cp

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect (Megatron ignores it when ``tp == 1``)."""
        return self.training.sequence_parallel and self.layout.tp > 1


def padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron's padded vocabulary: the next multiple of ``divisible_by · tp``."""
    unit = divisible_by * tp
    return -(-vocab // unit) * unit


def validate(model: ModelSpec, par: ParallelConfig) -> None:
    """Raise :class:`UsageError` (naming the flag) if ``par`` cannot run ``model`` in Megatron."""
    _check_values(par)
    _check_tensor_parallel(model, par)
    virtual_stage_layers(model.layers, par.pp, par.vpp, par.split)
    if par.global_batch % (par.micro_batch * par.dp):
        raise UsageError(
            f"global batch {par.global_batch} is not a multiple of micro_batch·dp = "
            f"{par.micro_batch}·{par.dp}", field="--global-batch")
    _check_experts(model, par)
    check_context_parallel(model, par)
    check_zero(model, par)
    _check_moe_options(model, par)
    _check_schedule(par)
    _check_tp_comm_overlap(model, par)


def _check_tp_comm_overlap(model: ModelSpec, par: ParallelConfig) -> None:
    """``--tp-comm-overlap`` where simrun can pair every collective with its GEMM: sequence
    parallelism with TP > 1 (Megatron-LM asserts ``--sequence-parallel``, megatron/training/
    arguments.py; at TP 1 there is no TP collective), dense layers, no context parallelism."""
    if not par.tp_comm_overlap:
        return
    if not par.sp:
        raise UsageError("needs --sequence-parallel and TP > 1 (Megatron-LM asserts sequence "
                         "parallelism with it; at TP 1 there is no TP communication)",
                         field="--tp-comm-overlap")
    if par.cp > 1:
        raise UsageError("not modelled with context parallelism (the ring-attention rows sit "
                         "between the collectives and their GEMMs)", field="--tp-comm-overlap")
    if model.moe is not None and model.moe.dense_layers == 0:
        raise UsageError("the model has no dense layer; the MoE MLP's collectives are not "
                         "overlapped by Transformer Engine's userbuffers in simrun",
                         field="--tp-comm-overlap")


def _check_schedule(par: ParallelConfig) -> None:
    if par.schedule_name in V_SHAPE and par.split.uneven:
        raise UsageError(f"uneven pipeline splits are not modelled with the {par.schedule_name} "
                         "schedule (its V placement puts the first and the last layers on "
                         "stage 0)", field="--schedule")
    check_schedule(par.schedule_name, par.pp, par.microbatches, par.vpp,
                   par.microbatch_group_size, vpp_field="--vpp")


def _check_values(par: ParallelConfig) -> None:
    """Sizes are positive integers; recompute and dtype are known names."""
    for name in ("tp", "pp", "dp", "vpp", "ep", "cp", "micro_batch", "global_batch"):
        value = getattr(par, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"must be a positive integer, got {value!r}", field=_flag(name))
    if par.recompute not in RECOMPUTE:
        raise UsageError(f"must be one of {', '.join(RECOMPUTE)}, got {par.recompute!r}",
                         field="--recompute")
    _check_attention(par)
    if par.overlap_param_gather and not (par.distributed_optimizer and par.overlap_grad_reduce):
        # Megatron-LM's argument check refuses the same (megatron/training/arguments.py)
        raise UsageError("needs --distributed-optimizer and --overlap-grad-reduce (as in "
                         "Megatron-LM)", field="--overlap-param-gather")
    if par.overlap_param_gather and par.zero >= 3:
        raise UsageError("ZeRO-3 already gathers parameters per layer with prefetch; "
                         "--overlap-param-gather would change nothing",
                         field="--overlap-param-gather")
    if par.dtype not in DTYPES:
        raise UsageError(f"must be one of {', '.join(DTYPES)}, got {par.dtype!r}", field="--dtype")


def _check_tensor_parallel(model: ModelSpec, par: ParallelConfig) -> None:
    """TP divides the heads, the key/value heads, the FFN and (with SP) the sequence."""
    if model.heads % par.tp:
        raise UsageError(f"tensor-parallel size {par.tp} must divide the {model.heads} heads",
                         field="--tp")
    if model.kv_heads % par.tp:
        raise UsageError(
            f"tensor-parallel size {par.tp} must divide the {model.kv_heads} key/value heads",
            field="--tp")
    if model.ffn_hidden % par.tp:
        raise UsageError(f"tensor-parallel size {par.tp} must divide ffn_hidden "
                         f"{model.ffn_hidden}", field="--tp")
    if par.sp and model.seq_len % par.tp:
        raise UsageError(f"sequence parallelism needs tp={par.tp} to divide seq_len "
                         f"{model.seq_len}", field="--sequence-parallel")


def _check_experts(model: ModelSpec, par: ParallelConfig) -> None:
    """EP divides DP×CP and the experts of a mixture-of-experts model."""
    if par.dp_cp % par.ep:
        raise UsageError(f"expert-parallel size {par.ep} must divide dp {par.dp}"
                         + (f" × cp {par.cp}" if par.cp > 1 else ""), field="--ep")
    if par.ep > 1:
        if model.moe is None:
            raise UsageError(f"ep={par.ep} needs a mixture-of-experts model", field="--ep")
        if model.moe.experts % par.ep:
            raise UsageError(f"expert-parallel size {par.ep} must divide the "
                             f"{model.moe.experts} experts", field="--ep")


def _check_attention(par: ParallelConfig) -> None:
    if par.attention_backend and par.attention_backend not in ATTENTION_BACKENDS:
        raise UsageError(f"must be one of {', '.join(ATTENTION_BACKENDS)}, got "
                         f"{par.attention_backend!r}", field="--attention-backend")
    if par.flash_attention and par.attention_backend not in ("", "flash"):
        raise UsageError(f"--flash-attention contradicts --attention-backend "
                         f"{par.attention_backend}", field="--attention-backend")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_context_parallel(model: ModelSpec, par: ParallelConfig) -> None:
    """Megatron-Core's constraints on ``--context-parallel-size``: TransformerEngine's fused
    attention (simrun: ``--flash-attention``), and a sequence divisible into ``2·cp`` chunks
    (the causal load balancing), each rank's half divisible by TP with sequence parallelism."""
    cp = par.cp
    if cp == 1:
        return
    if not par.fused_attention:
        raise UsageError("context parallelism runs through TransformerEngine's fused attention "
                         "in Megatron-Core; drop --attention-backend unfused", field="--cp")
    if model.seq_len % (2 * cp):
        raise UsageError(f"sequence length {model.seq_len} must divide into 2·cp = {2 * cp} "
                         "chunks (Megatron-Core's causal load balancing)", field="--cp")
    if par.sp and (model.seq_len // cp) % par.tp:
        raise UsageError(f"each CP rank's {model.seq_len // cp} tokens must divide by tp "
                         f"{par.tp} with sequence parallelism", field="--cp")


def check_zero(model: ModelSpec, par: ParallelConfig) -> None:
    """ZeRO/FSDP combinations simrun models (each refusal names what it would take)."""
    if par.zero not in (0, 1, 2, 3):
        raise UsageError(f"must be 1, 2 or 3, got {par.zero}", field="--zero")
    flag = "--fsdp" if par.fsdp else "--zero"
    if par.fsdp and par.zero != 3:
        raise UsageError("FSDP FULL_SHARD is ZeRO stage 3; do not combine with another --zero",
                         field="--fsdp")
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
                         "is not modelled)", field="--moe-token-dispatcher-type")
    if par.moe_token_dispatcher != "alltoall" and model.moe is None:
        raise UsageError("applies to mixture-of-experts models",
                         field="--moe-token-dispatcher-type")
    if par.training.moe_shared_expert_intermediate_size is not None and model.moe is None:
        raise UsageError("applies to mixture-of-experts models",
                         field="--moe-shared-expert-intermediate-size")
    if par.ep_nodes < 1 or par.ep % par.ep_nodes:
        raise UsageError(f"an EP group of {par.ep} ranks cannot span {par.ep_nodes} nodes "
                         "evenly", field="--ep")
    given = par.moe_load_imbalance != 1.0 or par.moe_capacity_factor is not None
    if given and model.moe is None:
        raise UsageError("applies to mixture-of-experts models",
                         field="--moe-load-imbalance" if par.moe_load_imbalance != 1.0
                         else "--moe-expert-capacity-factor")
    if not 1.0 <= par.moe_load_imbalance <= 64.0:
        raise UsageError(f"must lie in [1, 64] (busiest GPU's tokens ÷ balanced share), got "
                         f"{par.moe_load_imbalance}", field="--moe-load-imbalance")
    cf = par.moe_capacity_factor
    if cf is not None and not 0.0 < cf <= 64.0:
        raise UsageError(f"must lie in (0, 64], got {cf}", field="--moe-expert-capacity-factor")

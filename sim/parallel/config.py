"""Parallel layout and training options of a generated workload (Megatron-LM semantics)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from sim.errors import UsageError
from sim.parallel.layout import Layout
from sim.parallel.split import PipelineSplit

RECOMPUTE = ("none", "selective", "full")
#: Megatron-Core's ``--attention-backend`` values; ``auto`` (Megatron-Core's default,
#: ``TransformerConfig.attention_backend = AttnBackend.auto``) lets Transformer Engine pick: its
#: cuDNN fused kernel on Hopper and newer, FlashAttention-2 before (:func:`attention_kernel`);
#: ``local`` is not modelled
ATTENTION_BACKENDS = ("flash", "fused", "unfused", "auto")
#: GPU families (``sim/data/gpus.csv``) before Hopper: there ``auto`` runs FlashAttention-2
PRE_HOPPER_FAMILIES = ("A100",)
#: GPU families (``sim/data/gpus.csv``) of AMD Instinct GPUs, which run ROCm: Transformer
#: Engine's fused attention there is its CK (Composable Kernel) or AOTriton backend, not cuDNN
#: (ROCm/TransformerEngine README.rst, "Fused Attention Backends on ROCm", commit 01b4205e)
ROCM_FAMILIES = ("MI300X",)
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
    ``--tp-comm-overlap``: Transformer Engine pipelines the TP collectives of each layer
    with their GEMMs; :mod:`sim.models.features.tp_overlap`), ``compile`` (element-wise kernels
    fused, as Megatron-Core / Transformer Engine and ``torch.compile`` run them; ``False``: PyTorch
    eager, torchtitan's ``training.compile = false``, :mod:`sim.models.features.eager`) and
    ``norm_type`` (torchtitan's ``model.norm_type`` in eager mode: ``rmsnorm`` or
    ``fused_rmsnorm``), ``use_torch_fsdp2`` (Megatron-LM's ``--use-torch-fsdp2``: with
    ``fsdp``, PyTorch FSDP2's copies and fp32 gradient reduction, :mod:`sim.models.features.fsdp2`).
    ``attention_backend``: Megatron-Core's
    ``--attention-backend`` (``flash``: FlashAttention-2; ``fused``: cuDNN's fused attention
    through Transformer Engine; ``unfused``: batched matmuls + softmax, as Megatron-LM ran in
    2022; ``auto``: Transformer Engine's choice, see :func:`attention_kernel`); empty: ``flash``
    with ``flash_attention``, else ``auto`` (Megatron-Core's default). ``global_batch``
    ``None``: not chosen yet (``simrun --model`` derives it from the microbatches;
    :func:`validate` refuses it).
    ``split``: Megatron-Core's uneven pipeline split (:mod:`sim.parallel.split`). ``fsdp``:
    PyTorch FSDP FULL_SHARD (ZeRO stage 3 semantics; :mod:`sim.models.features.zero`).
    ``moe_load_imbalance``: tokens of the busiest expert GPU ÷ the balanced share (≥ 1);
    ``moe_capacity_factor``: Megatron's ``--moe-expert-capacity-factor`` (``None``:
    dropless); :mod:`sim.models.features.moe`. ``moe_token_dispatcher``: Megatron-Core's
    ``--moe-token-dispatcher-type`` (``alltoall``: NCCL all-to-alls of every token copy;
    ``flex``: the DeepEP backend, one copy per destination node, hierarchical across nodes);
    ``moe_shared_expert_intermediate_size``: Megatron-Core's
    ``--moe-shared-expert-intermediate-size`` (replaces the spec's shared-expert width);
    ``ep_nodes``: the nodes one EP group spans on the cluster (set by the scenario from the
    topology and the placement; 1 when unknown or uneven). ``fp8_recipe``: Megatron-Core's
    ``--fp8-recipe`` with ``dtype`` fp8 (``delayed`` — its default —, ``tensorwise`` or, on
    Blackwell, ``mxfp8``; :mod:`sim.models.features.fp8`). ``apply_rope_fusion``:
    Megatron-Core's fused RoPE kernel (on unless Megatron-LM's ``--no-rope-fusion``;
    :mod:`sim.models.features.rope`).
    ``delay_grad_reduce``:
    Megatron-LM's (``--no-delay-grad-reduce`` turns it off): with ``overlap_grad_reduce`` and
    pipeline parallelism only stage 0 reduces per bucket during its last backward; the other
    stages launch their reductions after their last backward (interleaved: per model chunk);
    :mod:`sim.models.features.grad_sync`. ``overlap_moe_expert_parallel_comm``: Megatron-Core's
    ``--overlap-moe-expert-parallel-comm`` (combined 1F1B: the EP all-to-alls of one
    microbatch beside another's compute; :func:`sim.pipeline.schedules.combined_1f1b`).
    ``defer_embedding_wgrad_compute`` / ``wgrad_deferral_limit``: Megatron-Core's (the output
    layer's weight-gradient GEMMs of the first N microbatches, 0 = all, run at the pipeline
    flush; :mod:`sim.models.features.defer_wgrad`).
    ``fp8_param_gather``: Megatron-Core's ``--fp8-param-gather`` with ``dtype`` fp8 and the
    distributed optimizer (the TE linears' weights kept in FP8, quantised after the optimizer
    step, all-gathered at 1 byte per parameter; :mod:`sim.models.features.fp8_params`).
    ``grad_reduce_in_bf16``: Megatron-LM's ``--grad-reduce-in-bf16`` (Megatron-Core DDP
    ``grad_reduce_in_fp32 = False``) with dtype bf16/fp8: the main-gradient buffer and the DP
    gradient collectives in bf16 (2 bytes per parameter) instead of fp32; the optimizer casts its
    shard to an fp32 copy for the step (:mod:`sim.models.memory`).
    ``async_tensor_model_parallel_allreduce``: Megatron-LM's ``--async-tensor-model-parallel-
    allreduce``: the column-parallel linears' backward TP collectives beside their GEMMs
    (:mod:`sim.models.features.tp_async`; off by default, see there).
    ``ddp_bucket_size``: Megatron-LM's ``--ddp-bucket-size`` (Megatron-Core DDP
    ``bucket_size``, parameters per gradient bucket; None: Megatron-Core's default,
    :func:`sim.models.optimizer.bucket_params`).
    ``overlap_param_gather_with_optimizer_step``: Megatron-Core's (model chunk 0's parameter
    all-gather beside the optimizer step of the other chunks;
    :mod:`sim.models.features.param_gather_step`).
    ``fp4``: Megatron-Core's ``--fp4-format`` (``e2m1``; empty: no FP4), with ``fp4_recipe``
    (``--fp4-recipe``, ``nvfp4``: Transformer Engine's NVFP4BlockScaling) and
    ``fp4_param_gather`` (``--fp4-param-gather``): the TE linears' GEMMs in NVFP4 on
    data-center Blackwell beside ``dtype`` bf16 (:mod:`sim.models.features.nvfp4`).
    ``cuda_graph_impl`` / ``cuda_graph_scope``: Megatron-Core's CUDA graphs (``none``, ``local``
    or ``transformer_engine``; the scope comma-separated, empty: the whole layer): one host
    launch per graph replay (:mod:`sim.models.features.cuda_graphs`).
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
    compile: bool = True
    norm_type: str = "rmsnorm"
    fp8_recipe: str = "delayed"
    use_torch_fsdp2: bool = False
    apply_rope_fusion: bool = True
    delay_grad_reduce: bool = True
    overlap_moe_expert_parallel_comm: bool = False
    defer_embedding_wgrad_compute: bool = False
    wgrad_deferral_limit: int = 0
    fp8_param_gather: bool = False
    grad_reduce_in_bf16: bool = False
    ddp_bucket_size: int | None = None
    async_tensor_model_parallel_allreduce: bool = False
    cross_entropy_loss_fusion: bool = False
    cross_entropy_fusion_impl: str = "native"
    overlap_param_gather_with_optimizer_step: bool = False
    fp4: str = ""
    fp4_recipe: str = "nvfp4"
    fp4_param_gather: bool = False
    cuda_graph_impl: str = "none"
    cuda_graph_scope: str = ""

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


def _microbatches(global_batch, micro_batch, dp) -> int:
    """``global_batch / (micro_batch · dp)``, or 0 when a size is not a positive integer
    (:func:`validate` names the flag)."""
    sizes = (global_batch, micro_batch, dp)
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
        return global_batch // (micro_batch * dp)
    return 0


@dataclass(frozen=True)
class ParallelConfig:
    """A model-driven run's :class:`~sim.parallel.layout.Layout` and :class:`Training`.

    Built from the two parts: :meth:`derive` sets the layout's microbatches per iteration,
    ``global_batch / (micro_batch · dp)``; :meth:`of` checks them. Every field of either part
    reads through (``par.tp`` is ``par.layout.tp``, ``par.dtype`` is ``par.training.dtype``):
    the data lives in one place.
    """

    layout: Layout
    training: Training

    @classmethod
    def derive(cls, layout: Layout, training: Training) -> ParallelConfig:
        """``layout`` trained with ``training``, its microbatches derived from the global
        batch (0 when a size is not a positive integer: :func:`validate` names the flag); an
        ``etp`` equal to ``tp`` is the default (``None``)."""
        return cls(replace(layout, etp=None if layout.etp == layout.tp else layout.etp,
                           microbatches=_microbatches(training.global_batch,
                                                      training.micro_batch, layout.dp)),
                   training)

    @classmethod
    def of(cls, layout: Layout, training: Training) -> ParallelConfig:
        """The config of ``layout`` trained with ``training``; ``layout.microbatches`` must
        be ``global_batch / (micro_batch · dp)``."""
        par = cls.derive(layout, training)
        if par.layout != layout:
            raise UsageError(f"{layout.microbatches} microbatches × micro batch "
                             f"{training.micro_batch} × DP {layout.dp} ≠ global batch "
                             f"{training.global_batch}", field="microbatches")
        return par

    def __getattr__(self, name: str):
        """A field or property of :attr:`layout` or :attr:`training` (layout first)."""
        if name in _READ_THROUGH:
            return getattr(self.__dict__[_READ_THROUGH[name]], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def shards_optimizer(self) -> bool:
        """Optimizer state sharded over DP×CP (distributed optimizer or ZeRO ≥ 1)."""
        return self.training.distributed_optimizer or self.layout.zero >= 1

    @property
    def etp(self) -> int:
        """Expert tensor-parallel size (Megatron-Core ``--expert-tensor-parallel-size``;
        default TP): each expert's weights are split ``etp`` ways."""
        return self.layout.expert_tp

    @property
    def edp(self) -> int:
        """Expert data-parallel size: the ranks that reduce expert gradients (and shard their
        optimizer state), ``TP·DP·CP / (ETP·EP)`` as Megatron-Core's ``initialize_model_parallel``
        derives ``expert_data_parallel_size`` (world size ÷ ETP·EP·PP)."""
        return self.layout.tp * self.dp_cp // (self.etp * self.layout.ep)

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


def _public(cls) -> list[str]:
    """The fields and properties of the dataclass ``cls``."""
    props = [n for n, v in vars(cls).items() if isinstance(v, property)]
    return [f.name for f in fields(cls)] + props


#: the names :class:`ParallelConfig` reads through to its parts, derived from their fields and
#: properties (a name of both is the layout's)
_READ_THROUGH: dict[str, str] = {**dict.fromkeys(_public(Training), "training"),
                                 **dict.fromkeys(_public(Layout), "layout")}

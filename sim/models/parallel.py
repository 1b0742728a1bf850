"""Parallel layout and training options of a generated workload (Megatron-LM semantics)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import UsageError
from sim.models.spec import ModelSpec

RECOMPUTE = ("none", "selective", "full")
#: Megatron-Core's ``--attention-backend`` values; ``auto`` is what Megatron-Core picks on
#: current GPUs (Transformer Engine's fused cuDNN kernel), ``local`` is not modelled
ATTENTION_BACKENDS = ("flash", "fused", "unfused", "auto")
DTYPES = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class ParallelConfig:
    """Parallel layout and training options.

    ``tp`` tensor-, ``pp`` pipeline-, ``dp`` data-parallel size, ``vpp`` model chunks per stage
    (virtual pipeline), ``ep`` expert-parallel size (splits DP), ``micro_batch`` sequences per
    microbatch, ``global_batch`` sequences per iteration; microbatches per iteration
    ``M = global_batch / (micro_batch · dp)``. ``schedule``: ``gpipe``, ``1f1b`` or
    ``interleaved`` (``None``: interleaved when ``vpp > 1``, else 1f1b).
    ``flash_attention``: fused attention kernel (no s×s score matrix in memory); the
    calibration measurements (Korthikanti et al. 2022) used the unfused kernels.
    ``attention_backend``: Megatron-Core's ``--attention-backend`` (``flash``: FlashAttention-2;
    ``fused``: cuDNN's fused attention through Transformer Engine; ``unfused``: batched
    matmuls + softmax; ``auto`` = ``fused``); empty: ``flash`` with ``flash_attention``, else
    ``unfused``.
    ``overlap_grad_reduce``: data-parallel gradient collectives are issued per layer during the
    last microbatch's backward (non-blocking); otherwise one blocking collective after backward.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    vpp: int = 1
    ep: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    dtype: str = "bf16"
    distributed_optimizer: bool = False
    schedule: str | None = None
    microbatch_group_size: int | None = None
    flash_attention: bool = False
    overlap_grad_reduce: bool = True
    attention_backend: str = ""

    @property
    def backend(self) -> str:
        """The attention kernel that runs: ``flash``, ``fused`` or ``unfused``."""
        b = self.attention_backend or ("flash" if self.flash_attention else "unfused")
        return "fused" if b == "auto" else b

    @property
    def fused_attention(self) -> bool:
        """One fused kernel per attention call (no s×s score matrix in memory)."""
        return self.backend != "unfused"

    @property
    def microbatches(self) -> int:
        """Microbatches per iteration per pipeline: ``global_batch / (micro_batch · dp)``."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def schedule_name(self) -> str:
        if self.schedule is not None:
            return self.schedule
        return "interleaved" if self.vpp > 1 else "1f1b"

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect (Megatron ignores it when ``tp == 1``)."""
        return self.sequence_parallel and self.tp > 1


def padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron's padded vocabulary: the next multiple of ``divisible_by · tp``."""
    unit = divisible_by * tp
    return -(-vocab // unit) * unit


def validate(model: ModelSpec, par: ParallelConfig) -> None:
    """Raise :class:`UsageError` (naming the flag) if ``par`` cannot run ``model`` in Megatron."""
    for name in ("tp", "pp", "dp", "vpp", "ep", "micro_batch", "global_batch"):
        value = getattr(par, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"must be a positive integer, got {value!r}", field=_flag(name))
    if par.recompute not in RECOMPUTE:
        raise UsageError(f"must be one of {', '.join(RECOMPUTE)}, got {par.recompute!r}",
                         field="--recompute")
    _check_attention(par)
    if par.dtype not in DTYPES:
        raise UsageError(f"must be one of {', '.join(DTYPES)}, got {par.dtype!r}", field="--dtype")
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
    if model.layers % (par.pp * par.vpp):
        raise UsageError(
            f"{model.layers} layers cannot be split evenly into pp·vpp = {par.pp}·{par.vpp} "
            "model chunks", field="--pp")
    if par.global_batch % (par.micro_batch * par.dp):
        raise UsageError(
            f"global batch {par.global_batch} is not a multiple of micro_batch·dp = "
            f"{par.micro_batch}·{par.dp}", field="--global-batch")
    if par.dp % par.ep:
        raise UsageError(f"expert-parallel size {par.ep} must divide dp {par.dp}", field="--ep")
    if par.ep > 1:
        if model.moe is None:
            raise UsageError(f"ep={par.ep} needs a mixture-of-experts model", field="--ep")
        if model.moe.experts % par.ep:
            raise UsageError(f"expert-parallel size {par.ep} must divide the "
                             f"{model.moe.experts} experts", field="--ep")
    _check_schedule(par)


def _check_schedule(par: ParallelConfig) -> None:
    schedule = par.schedule_name
    if schedule not in ("gpipe", "1f1b", "interleaved"):
        raise UsageError(f"unknown schedule {schedule!r}; choose gpipe, 1f1b or interleaved",
                         field="--schedule")
    if schedule == "interleaved":
        from sim.schedules import check_interleaved

        check_interleaved(par.pp, par.microbatches, par.vpp, par.microbatch_group_size)
    elif par.vpp != 1:
        raise UsageError(f"the {schedule} schedule runs one model chunk per stage; got vpp="
                         f"{par.vpp}", field="--vpp")


def _check_attention(par: ParallelConfig) -> None:
    if par.attention_backend and par.attention_backend not in ATTENTION_BACKENDS:
        raise UsageError(f"must be one of {', '.join(ATTENTION_BACKENDS)}, got "
                         f"{par.attention_backend!r}", field="--attention-backend")
    if par.flash_attention and par.attention_backend not in ("", "flash"):
        raise UsageError(f"--flash-attention contradicts --attention-backend "
                         f"{par.attention_backend}", field="--attention-backend")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")

"""Per-GPU, per-microbatch sizes of a Megatron model and the tensor-parallel operators that
every parallel linear sits between (shared by the dense layers and the MoE MLP).

``tp_enter`` / ``tp_exit`` are Megatron's ``f`` / ``g`` operators (all-reduce in backward /
forward) or, with sequence parallelism, all-gather / reduce-scatter, and ``sp_regather`` the
all-gather a sequence-parallel linear re-runs in backward; ``linear_params`` counts
the parameters one GPU holds of a column- or row-parallel linear. Sizes in bytes; the
all-gathers carry ``ag_bytes`` per element (bf16's ``ACT_BYTES`` unless the caller passes the
quantised size of :func:`sim.models.features.quant_gather.gathered_bytes`), the
reduce-scatters and all-reduces bf16.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import ceil

from sim.comm import CollKind, Comm, GroupKind
from sim.models.vocab.ops import ACT_BYTES as A
from sim.models.vocab.rows import Conj
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig, padded_vocab


@dataclass(frozen=True)
class Dims:
    """Per-microbatch sizes: ``n`` tokens (of this context-parallel rank: ``b·s/cp``), ``nt``
    tokens in the residual stream per GPU (``n/t`` with sequence parallelism), ``v`` padded
    vocabulary, ``eg`` GEMM operand bytes, ``etp`` expert tensor-parallel size (0: ``t``),
    ``qh`` the width of Q and of the attention output (``heads · kv_channels``; 0: ``h``)."""

    b: int
    s: int
    h: int
    a: int
    t: int
    d: int
    kvh: int
    f: int
    f1: int
    v: int
    n: int
    nt: int
    sp: bool
    eg: int
    ep: int
    cp: int = 1
    etp: int = 0
    qh: int = 0  # Q / attention-output width heads·head_dim (0: h)

    @property
    def q_width(self) -> int:
        """Width of Q and of the attention output (``qh``; 0 = ``h``)."""
        return self.qh or self.h

    @property
    def expert_t(self) -> int:
        """Expert tensor-parallel size (``etp``; 0 = ``t``)."""
        return self.etp or self.t

    @classmethod
    def of(cls, model: ModelSpec, par: ParallelConfig) -> Dims:
        n = par.micro_batch * model.seq_len // par.cp  # this CP rank's tokens
        f1 = 2 * model.ffn_hidden if model.gated_mlp else model.ffn_hidden
        return cls(
            b=par.micro_batch, s=model.seq_len, h=model.hidden, a=model.heads, t=par.tp,
            d=model.head_dim, kvh=model.kv_hidden, f=model.ffn_hidden, f1=f1,
            v=padded_vocab(model.vocab, par.tp), n=n, nt=n // par.tp if par.sp else n,
            sp=par.sp, eg=1 if par.dtype == "fp8" else 2, ep=par.ep, cp=par.cp, etp=par.etp,
            qh=model.q_hidden,
        )


def tp_collective(kind: CollKind, size: int) -> Comm:
    """A blocking collective of ``size`` bytes in the tensor-parallel group."""
    return Comm(kind, GroupKind.TP, size, blocking=True)


def _gathered(dm: Dims, tokens: int, ag_bytes: Fraction | int) -> int:
    """Bytes of the full all-gather output of ``tokens·h`` elements (default ``n``)."""
    return ceil((tokens or dm.n) * dm.h * Fraction(ag_bytes))


def tp_enter(dm: Dims, tokens: int = 0, ag_bytes: Fraction | int = A) -> Conj:
    """Megatron's ``f`` (identity / all-reduce) or, with SP, ``ḡ`` (all-gather / reduce-scatter)
    before a column-parallel linear. Buffer: ``tokens·h`` activations (default ``n``; the full
    AllGather output, ``ag_bytes`` per element / the bf16 ReduceScatter input)."""
    if dm.t == 1:
        return Conj()
    size = (tokens or dm.n) * dm.h * A
    if dm.sp:
        return Conj(tp_collective(CollKind.ALLGATHER, _gathered(dm, tokens, ag_bytes)),
                    tp_collective(CollKind.REDUCESCATTER, size))
    return Conj(None, tp_collective(CollKind.ALLREDUCE, size))


def tp_exit(dm: Dims, tokens: int = 0, ag_bytes: Fraction | int = A) -> Conj:
    """Megatron's ``g`` (all-reduce / identity) or, with SP, reduce-scatter / all-gather after a
    row-parallel linear (the backward all-gather of the output gradient, ``ag_bytes`` per
    element)."""
    if dm.t == 1:
        return Conj()
    size = (tokens or dm.n) * dm.h * A
    if dm.sp:
        return Conj(tp_collective(CollKind.REDUCESCATTER, size),
                    tp_collective(CollKind.ALLGATHER, _gathered(dm, tokens, ag_bytes)))
    return Conj(tp_collective(CollKind.ALLREDUCE, size), None)


def sp_regather(dm: Dims, tokens: int = 0, ag_bytes: Fraction | int = A) -> Conj:
    """With sequence parallelism, the all-gather a column-parallel linear re-runs in backward.

    Megatron's ``LinearWithGradAccumulationAndAsyncCommunication`` saves only the sequence-
    sharded input (``n/t·h``) and all-gathers it again in backward for the weight gradient
    (``tokens·h`` activations, default ``n``, ``ag_bytes`` per element). Megatron issues it
    asynchronously next to the input-gradient GEMM, but the NCCL kernel competes with the
    GEMM for SMs: Korthikanti et al.'s Table 4 shows the sequence-parallel backward only 0.1 ms
    faster than the baseline (11.8 vs 11.9 ms), where the saved element-wise work alone is
    worth ~0.7 ms, so it is modelled as blocking like the other TP collectives
    (``--async-tensor-model-parallel-allreduce`` runs it beside the dgrad GEMM instead:
    :mod:`sim.models.features.tp_async`). Placed as the backward collective of an operator
    *after* the linear (rows are walked in reverse in backward), so it runs before the
    linear's backward. No-op without sequence parallelism.
    """
    if dm.t == 1 or not dm.sp:
        return Conj()
    return Conj(None, tp_collective(CollKind.ALLGATHER, _gathered(dm, tokens, ag_bytes)))


def linear_params(model: ModelSpec, k: int, n: int, t: int, column: bool) -> int:
    """Weight ``k×n`` split ``t`` ways; column-parallel bias split, row-parallel bias replicated."""
    bias = (n // t if column else n) if model.bias else 0
    return k * n // t + bias

"""Rotary position embedding (RoPE) as Megatron-Core applies it to q and k in every attention
layer of a model with ``position_embedding: rope``.

Megatron-Core (NVIDIA/Megatron-LM at commit d98e8a64, ``megatron/core/transformer/
attention.py``) calls ``apply_rotary_pos_emb`` once on the query and once on the key of each
layer, after the QKV GEMM (``megatron/core/models/common/embeddings/rope_utils.py``). The
frequencies ``freqs`` are fp32 ``[s, 1, 1, d]``, computed once per model forward; with context
parallelism ``RotaryEmbedding`` keeps this rank's ``s/cp`` positions
(``get_pos_emb_on_this_cp_rank``). Per GPU a layer rotates ``Q = n·h/t`` query and
``K = n·kv_hidden/t`` key elements (``n = b·s/cp`` tokens, ``a/t`` heads); ``P = (s/cp)·d``
frequencies. Bytes are HBM bytes read + written (``A`` = 2, bf16 activations; fp32 4).

**Fused** (``apply_rope_fusion``, on unless Megatron-LM's ``--no-rope-fusion``: its
``store_false`` flag in ``megatron/training/arguments.py``; NeMo's recipes set
``apply_rope_fusion: true``): Transformer Engine's ``fused_apply_rotary_pos_emb``
(``transformer_engine/common/fused_rope/fused_rope.cu`` at commit d0067d0d): one kernel per
tensor per direction; each block takes the sine and cosine of one position's ``d`` frequencies
(``sincosf`` into shared memory) and rotates every head of that token. Forward reads the
tensor and the frequencies and writes the result: ``2A·X + 4P``; backward the same for the
gradient. The frequencies are counted once per kernel (the ``b`` blocks of a position re-read
them from L2). A ``rotary_percent`` below 1 (Nemotron: 0.5) changes nothing here: the kernel
copies the unrotated part of each head, so the tensor is read and written whole.

**Unfused** (``--no-rope-fusion``): ``_apply_rotary_pos_emb_bshd``, one kernel per ATen
operator. Forward per tensor, 12 kernels: ``torch.cos(freqs)`` (8P), ``· mscale`` (8P, a
multiply by the Python float 1.0 still runs), ``.to(bf16)`` (6P), the same three for ``sin``;
``t · cos_`` (4X + 2P), ``rotate_half``: ``chunk`` (views) then ``-x2`` (2X) and ``cat``
(4X); ``· sin_`` (4X + 2P); the add (6X); the final ``cat((t, t_pass))`` with an empty
``t_pass`` (a copy, 4X; the slice ``t[..., :rot_dim]`` over the whole head dimension is the
tensor itself) = 24X + 48P. Backward (autograd; ``freqs`` needs no gradient), 5 kernels:
``grad · sin_`` (4X + 2P), the negation's backward (2X), ``chunk``'s backward, a ``cat`` of
the two halves (4X), ``grad · cos_`` (4X + 2P), and the sum of t's two gradients (6X) =
20X + 4P. Every kernel is timed by the compute model's element-wise roofline (the measured
element-wise bandwidth efficiency plus the per-kernel overhead, :mod:`sim.models.compute`).

Activation memory is as without RoPE (the rotated q and k replace the QKV output that the
attention kernel saves). PyTorch eager runs (``--no-compile``, :mod:`sim.models.features.eager`)
count torchtitan's complex-number RoPE instead of these kernels.
"""

from __future__ import annotations

from sim.errors import UsageError
from sim.models.vocab.dims import Dims
from sim.models.vocab.ops import ACT_BYTES as A
from sim.models.vocab.ops import Op, elementwise
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig

F32 = 4  # fp32 bytes (the frequencies and their sine / cosine)
#: names of the fused kernels, which PyTorch eager (sim/models/features/eager.py) replaces by its
# own
FUSED_NAMES = ("rope_q", "rope_k", "rope_q_grad", "rope_k_grad")


def applies(model: ModelSpec) -> bool:
    """Whether ``model``'s attention layers rotate q and k."""
    return model.position_embedding == "rope"


def _tensors(dm: Dims) -> tuple[tuple[str, int], ...]:
    """The rotated tensors of one layer on one GPU: name and element count."""
    return (("q", dm.n * dm.q_width // dm.t), ("k", dm.n * dm.kvh // dm.t))


def _freqs(dm: Dims) -> int:
    """Frequencies of this CP rank's positions: ``(s/cp)·d``."""
    return dm.s // dm.cp * dm.d


def _unfused_fwd(name: str, x: int, p: int) -> tuple[Op, ...]:
    trig = tuple(op for f in ("cos", "sin") for op in (
        elementwise(f"{name}_{f}", 2 * F32 * p),
        elementwise(f"{name}_{f}_mscale", 2 * F32 * p),
        elementwise(f"{name}_{f}_to_bf16", (F32 + A) * p)))
    return trig + (
        elementwise(f"{name}_mul_cos", 2 * A * x + A * p),
        elementwise(f"{name}_rotate_neg", A * x),
        elementwise(f"{name}_rotate_cat", 2 * A * x),
        elementwise(f"{name}_mul_sin", 2 * A * x + A * p),
        elementwise(f"{name}_add", 3 * A * x),
        elementwise(f"{name}_cat_pass", 2 * A * x),
    )


def _unfused_bwd(name: str, x: int, p: int) -> tuple[Op, ...]:
    return (
        elementwise(f"{name}_mul_sin", 2 * A * x + A * p),
        elementwise(f"{name}_rotate_neg", A * x),
        elementwise(f"{name}_chunk_cat", 2 * A * x),
        elementwise(f"{name}_mul_cos", 2 * A * x + A * p),
        elementwise(f"{name}_accumulate", 3 * A * x),
    )


def _ops(model: ModelSpec, par: ParallelConfig, dm: Dims, suffix: str, unfused) -> tuple[Op, ...]:
    """The fused kernel per tensor (reads the tensor and the fp32 freqs, writes the result), or
    ``unfused(name, x, p)``'s kernels per tensor; none without rotary embeddings."""
    if not applies(model):
        return ()
    p = _freqs(dm)
    if par.apply_rope_fusion:
        return tuple(elementwise(f"rope_{t}{suffix}", 2 * A * x + F32 * p)
                     for t, x in _tensors(dm))
    return tuple(op for t, x in _tensors(dm) for op in unfused(f"rope_{t}{suffix}", x, p))


def forward_ops(model: ModelSpec, par: ParallelConfig, dm: Dims) -> tuple[Op, ...]:
    """The RoPE kernels after the QKV GEMM (none without rotary embeddings)."""
    return _ops(model, par, dm, "", _unfused_fwd)


def backward_ops(model: ModelSpec, par: ParallelConfig, dm: Dims) -> tuple[Op, ...]:
    """The RoPE gradient kernels before the QKV input-gradient GEMM."""
    return _ops(model, par, dm, "_grad", _unfused_bwd)


def split_forward_ops(model: ModelSpec, par: ParallelConfig, dm: Dims) -> tuple[Op, ...]:
    """Copies Megatron-Core's QKV split makes around the rotary embedding, forward (none
    without RoPE or in PyTorch eager, whose torchtitan block has separate q/k/v linears).

    Megatron-Core (``SelfAttention.get_query_key_value_tensors``, megatron/core/transformer/
    attention.py, identical at core_v0.8.0 baf94af3 and core_v0.12.0 d580efc6) views the QKV
    output as ``[s, b, ng, (np/ng + 2)·hn]`` and splits it (TE ``SplitAlongDim``) into views:
    ``query [s, b, ng, np/ng·hn]``, ``key``/``value [s, b, ng, hn]``. Then

    * GQA (``np > ng``): ``query.reshape(s, b, np, hn)`` cannot be a view (the group stride is
      ``(np/ng + 2)·hn``, not ``np/ng·hn``), so PyTorch copies q: reads and writes ``Q``;
    * Transformer Engine's attention (flash or cuDNN backend) calls ``get_qkv_layout``
      (transformer_engine/pytorch/attention.py at v1.9 e79d915a and v2.1 450146ae): k is the
      rotary kernel's new tensor, v still the strided view, so their strides differ, no layout
      matches and it runs ``.contiguous()`` on q, k and v — a copy of v (``K``, read and
      written); q and k are left as they are (counted: none).
    """
    if not (applies(model) and par.compile):
        return ()
    (_, q), (_, k) = _tensors(dm)
    ops: tuple[Op, ...] = ()
    if dm.q_width > dm.kvh:  # heads per group > 1
        ops += (elementwise("qkv_split_query_copy", 2 * A * q),)
    if par.fused_attention:
        ops += (elementwise("qkv_split_value_copy", 2 * A * k),)
    return ops


def split_backward_ops(model: ModelSpec, par: ParallelConfig, dm: Dims) -> tuple[Op, ...]:
    """The backward of Megatron-Core's QKV split with rotary embedding: TE's
    ``_SplitAlongDim.backward`` (transformer_engine/pytorch/attention.py at v1.9 e79d915a,
    ``transformer_engine/pytorch/utils.py`` from v2.4) returns the gradients without a copy
    only when they are adjacent views of one buffer; dq and dk are the rotary backward's new
    tensors, so it runs ``torch.cat(grad_outputs, dim=split_dim)``: reads dq, dk, dv and
    writes dqkv, ``2A·(Q + 2K)``. None without RoPE or in PyTorch eager."""
    if not (applies(model) and par.compile):
        return ()
    (_, q), (_, k) = _tensors(dm)
    return (elementwise("qkv_split_grad_cat", 2 * A * (q + 2 * k)),)


def check(model: ModelSpec, par: ParallelConfig) -> None:
    """``--no-rope-fusion`` only where it changes the run: a RoPE model in Megatron-Core's
    fused layer (PyTorch eager counts torchtitan's own RoPE kernels)."""
    if par.apply_rope_fusion:
        return
    if not applies(model):
        raise UsageError(f"model {model.name} has {model.position_embedding} positions, no "
                         "rotary embedding, so it would change nothing", field="apply_rope_fusion")
    if not par.compile:
        raise UsageError("with --no-compile the rotary embedding is torchtitan's eager "
                         "complex multiply, not Megatron-Core's, so it would change nothing",
                         field="apply_rope_fusion")


def describe(model: ModelSpec, par: ParallelConfig, dm: Dims) -> str:
    """The assumption line of the position embedding's kernels."""
    if model.position_embedding == "learned":
        return ("position embedding: learned (added to the word embedding on the first stage); "
                "no rotary kernels")
    if model.position_embedding == "alibi":
        return ("position embedding: ALiBi (a bias on the attention scores, inside the "
                "attention kernel: not counted); no rotary kernels")
    if not par.compile:
        return "RoPE: torchtitan's eager kernels (--no-compile line)"
    (_, q), (_, k) = _tensors(dm)
    where = (f"{dm.n} tokens (s/cp = {dm.s // dm.cp} positions)" if dm.cp > 1
             else f"{dm.n} tokens") + f", heads/TP = {dm.a // dm.t}"
    if par.apply_rope_fusion:
        nbytes = 2 * (2 * A * (q + k) + 2 * F32 * _freqs(dm))
        return (f"RoPE: fused TE kernel (Megatron-Core apply_rope_fusion, the default), q and "
                f"k, fwd+bwd: 4 kernels per layer and microbatch, each reading the tensor and "
                f"the fp32 frequencies and writing the result ({nbytes:,} bytes in all; {where}); "
                "element-wise roofline; --no-rope-fusion: the unfused torch kernels")
    nbytes = sum(op.bytes for op in forward_ops(model, par, dm) + backward_ops(model, par, dm))
    return (f"RoPE: --no-rope-fusion, Megatron-Core's unfused _apply_rotary_pos_emb_bshd on q "
            f"and k: 12 forward kernels (cos, sin, mscale, casts, two muls, rotate_half's neg and "
            f"cat, add, cat) and 5 backward kernels per tensor ({nbytes:,} bytes per layer and "
            f"microbatch; {where}); element-wise roofline")

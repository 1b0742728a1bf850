"""The language-model loss on the last pipeline stage: Megatron-Core's vocab-parallel cross
entropy, unfused (the default) or fused (``--cross-entropy-loss-fusion``, implementation
``--cross-entropy-fusion-impl native | te``).

Per GPU the loss sees ``e = n·v/t`` logits (``n = b·s/cp`` tokens, vocabulary ``v`` split over
TP ``t``); bytes are HBM bytes read + written per logit (``A`` = 2, bf16 logits; fp32 4). Every
kernel is timed by the compute model's element-wise roofline. Sources: NVIDIA/Megatron-LM at
d98e8a64dd (``megatron/core/models/common/language_module/language_module.py``
``compute_language_model_loss`` picks the path; ``megatron/core/model_parallel_config.py``:
``cross_entropy_loss_fusion = False``, ``cross_entropy_fusion_impl = 'native'``).

**Unfused** (``megatron/core/tensor_parallel/cross_entropy.py`` ``_VocabParallelCrossEntropy``):
the cast to fp32 and max (``A + 4 + 8``), subtract + target logit (8), exp + sum (8), three
kernels; after each a TP all-reduce of ``n`` fp32 values (the max, ``predicted_logits``,
``sum_exp_logits``): 3 all-reduces of ``4n`` bytes. Backward: ``softmax − one-hot`` scaled in
place (8) and the cast to the logits' dtype (``4 + A``).

**Fused, native** (``megatron/core/fusions/fused_cross_entropy.py``, file last changed in
d8691457): the same arithmetic in three ``jit_fuser`` (``torch.compile``) functions, each one
kernel, updating the fp32 logits in place: ``calculate_logits_max`` (cast + max: reads ``A``,
writes 4), ``calculate_predicted_logits`` (subtract, gather, exp, row sum: 8),
``calculate_cross_entropy_loss`` (normalise: 8); TP all-reduces: the max (``4n`` bytes), then
one of ``torch.cat((predicted_logits, sum_exp_logits))`` (``8n`` bytes) — 2 instead of 3.
Backward: ``calculate_gradients``, one kernel reading the fp32 softmax and writing the bf16
gradient (``4 + A``). That torch.compile keeps each in-place update in one pass is an
assumption (a graph that both mutates and reduces a tensor may be given a copy by Inductor).

**Fused, te** (Transformer Engine's ``parallel_cross_entropy``,
``transformer_engine/pytorch/triton/cross_entropy.py`` at NVIDIA/TransformerEngine 02965d2e):
Triton kernels on the bf16 logits, no fp32 copy: ``online_softmax_kernel`` reads each logit
once (``A``) into per-token max, sum and target logit; with TP > 1 one TP all-gather
(``all_gather_into_tensor``) of those 3 fp32 per token (``12·n·t`` bytes gathered);
``cross_entropy_forward_kernel`` reads the ``t`` triples of each token and writes its loss
(``12t + 4`` bytes per token); backward ``cross_entropy_backward_kernel`` reads and rewrites the
logits in place with the gradient (``2A``). The revision read still has ``assert False,
"triton fused ce with tp is not fully tested."`` before that all-gather, while Megatron-Bridge's
performance recipes run ``te`` at TP 8 (docs/validation.md, Llama 3.1 405B): the all-gather is
modelled as written after the assert. Megatron-LM's own argument check rejects ``te`` with the
fusion ("disabled due to stability issues", ``megatron/training/arguments.py``); Megatron-Core
only warns (``model_parallel_config.py``).
"""

from __future__ import annotations

from sim.comm import CollKind
from sim.models.vocab.dims import Dims, tp_collective
from sim.models.vocab.ops import ACT_BYTES as A
from sim.models.vocab.ops import elementwise
from sim.models.vocab.rows import Block, Conj

FLAG = "--cross-entropy-loss-fusion"
IMPL_FLAG = "--cross-entropy-fusion-impl"
IMPLS = ("native", "te")


def variant(par) -> str:
    """``""`` (unfused), ``"native"`` or ``"te"``: the loss ``par`` runs."""
    return par.cross_entropy_fusion_impl if par.cross_entropy_loss_fusion else ""


def all_reduce_sizes(dm: Dims, fusion: str) -> list[int]:
    """The TP all-reduces of one microbatch's loss forward, in bytes (none at TP 1)."""
    if dm.t == 1:
        return []
    four_n = 4 * dm.n
    return {"": [four_n] * 3, "native": [four_n, 2 * four_n]}[fusion]


def loss_items(dm: Dims, fusion: str) -> list[Block | Conj]:
    """The loss's blocks and TP collectives (after the output layer), for ``fusion``
    (:func:`variant`)."""
    e = dm.n * dm.v // dm.t
    if fusion == "te":
        gather = ([Conj(tp_collective(CollKind.ALLGATHER, 12 * dm.n * dm.t), None)]
                  if dm.t > 1 else [])
        return [Block("output_cross_entropy1", fwd=(elementwise("cross_entropy1", A * e),),
                      ig=(elementwise("cross_entropy_grad", 2 * A * e),)),
                *gather,
                Block("output_cross_entropy2",
                      fwd=(elementwise("cross_entropy2", (12 * dm.t + 4) * dm.n),))]
    if fusion == "native":
        fwd, grad = [(A + 4) * e, 8 * e, 8 * e], (4 + A) * e
    else:
        fwd, grad = [(A + 4 + 8) * e, 8 * e, 8 * e], (8 + 4 + A) * e
    sizes = all_reduce_sizes(dm, fusion)
    items: list[Block | Conj] = []
    for i, nbytes in enumerate(fwd, start=1):
        ig = (elementwise("cross_entropy_grad", grad),) if i == 1 else ()
        items.append(Block(f"output_cross_entropy{i}",
                           fwd=(elementwise(f"cross_entropy{i}", nbytes),), ig=ig))
        if i <= len(sizes):
            items.append(Conj(tp_collective(CollKind.ALLREDUCE, sizes[i - 1]), None))
    return items


def describe(par) -> str:
    """The assumption line of a fused loss (``""`` for the unfused default)."""
    fusion = variant(par)
    if fusion == "native":
        return (f"Megatron-Core's fused vocab-parallel cross entropy ({FLAG}, "
                "native): 3 fused kernels (cast + max, exp + sum, normalise) and one backward "
                "kernel; 2 TP all-reduces (the max, n fp32; then predicted logits and exp sums "
                "batched, 2n fp32) instead of 3")
    if fusion == "te":
        return (f"Transformer Engine's fused cross entropy ({FLAG}, {IMPL_FLAG} te): "
                "an online-softmax kernel reading the bf16 logits once, a per-token loss "
                "kernel (after one TP all-gather of 3n fp32 at TP > 1), and one backward "
                "kernel rewriting the logits with their gradient")
    return ""  # the unfused loss: the stage line of the report states it

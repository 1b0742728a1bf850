"""Context parallelism as Megatron-Core runs it: ring attention through TransformerEngine.

With ``--cp N`` (Megatron's ``--context-parallel-size``) each CP rank holds ``s/N`` tokens of
every sequence: with causal masking the sequence is cut into ``2N`` chunks and rank ``r`` keeps
chunks ``r`` and ``2N−1−r`` (TransformerEngine ``AttnFuncWithCPAndKVP2P``; Megatron-Core
``get_batch_on_this_cp_rank``). Everything outside attention is per token and simply runs on
``s/N`` tokens; attention needs every rank's keys and values: in ``N`` steps each rank attends
with its queries to one KV block while passing that block on to the next rank of the ring.

What runs, per layer and microbatch on one rank (TransformerEngine ``AttnFuncWithCPAndKVP2P``,
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`` at
d0067d0da6cb01811b8072a7d304f0e00344ce2b; the same steps in ``transformer_engine/pytorch/
attention.py`` at v1.8 3ec998e9 and v2.1 450146ae, differences below). Attention in bf16 (FP8
attention, ``fp8_dpa``, is not modelled), Megatron's ``sbhd`` layout, no padding. Sizes on
this TP shard: ``sq = s/N`` queries, ``hq = a/t`` heads, ``E_q = b·sq·hq·d`` elements of Q
and of the output, ``E_kv`` those of K and V together.

Forward (``forward``):

* ``torch.cat`` of K and V into the send buffer (a copy: 4 bytes per element of ``E_kv``);
* step 0: the fused attention of the rank's two chunks against themselves, causal, ``sq ×
  sq``; steps ``i ≥ 1``: one non-causal call of half the size — ranks ``r ≥ i`` attend with
  all ``sq`` queries to the first half of the received block ("lower-triangle", ``sq ×
  sq/2``), ranks ``r < i`` with their second query chunk to the whole block
  ("upper-triangle", ``sq/2 × sq``). Step ``i`` issues the exchange of its KV block (on the
  NCCL stream, ``flash_attn_p2p_communicate``) before its attention, and step ``i+1`` waits
  for it (``req.wait()``);
* per step ``i ≥ 1`` the softmax-LSE correction (``flash_attn_fwd_softmax_lse_correction``,
  fp32: reads two LSEs, writes one: 12 bytes per query row and head);
* after the last step, the output corrections on the current stream
  (``flash_attn_fwd_out_correction_init`` for step 0: reads the step's bf16 output, writes the
  bf16 output, 4 bytes per element of ``E_q``; ``flash_attn_fwd_out_correction`` for every
  later step: reads the step's output and reads and writes the output, 6 bytes per element of
  the step's queries). The accumulator is bf16 (``out_corrected.to(out_init_step.dtype)``);
  fp32 buffers and a final cast exist only for FP8 attention.

Backward (``backward``), one stream:

* the copy of K and V into the first send buffer (``p2p_comm_buffers[0][0].copy_(kv)``,
  4 bytes per element of ``E_kv``);
* step ``i`` issues its exchange — KV only at ``i = 0``, KV and the accumulated dKV in
  between, dKV only at ``i = N−1`` — then runs the attention backward of step ``N−1−i``'s
  forward call (the diagonal causal call last) and updates dQ (``dq.copy_`` at the first step,
  4 bytes per element; ``dq.add_`` after, 6 bytes per element), waits for the exchange and
  updates dK and dV in the received buffer (``copy_`` at the first step, ``add_`` after: two
  kernels, 4 or 6 bytes per element of ``E_kv``).

The ranks of a ring step run different calls (the upper- and lower-triangle halves) and the
ring advances as its slowest member: simrun, which simulates one representative rank, times
every step ``i ≥ 1`` as the slower of the two calls and every per-step element-wise kernel at
its larger size over the ranks (dQ and the output correction at all ``sq`` queries, dK/dV at
the whole block: at most 3 bytes per element of the smaller of ``E_q`` and ``E_kv`` more than
the rank that moves the most). Not modelled: the forward's two alternating streams
(TransformerEngine runs step ``i`` on stream ``i mod 2`` "to resolve wave quantization", so
consecutive steps' kernels may overlap; simrun runs them back to back), the LSE clone and
copies of one row per query and head, and the ``contiguous()`` of the half tensors (views of
contiguous memory in ``sbhd``: no copy). TransformerEngine 1.8 and 2.1 differ in small ways:
the step-0 output merge is a zero-filled output plus a full correction (2 + 6 instead of 4
bytes per element of ``E_q``), the LSE is merged in fp64, and dK and dV are updated as one
stacked tensor (one kernel instead of two); simrun follows d0067d0d.

Rows per layer (forward order): ``attn_cp{k}_dkv`` before each step ``attn_cp{k}`` and
``attn_cp_merge`` after the last. Backward walks them in reverse, so ``attn_cp{k}_dkv`` runs
the dK/dV update of step ``k`` after that step's exchange (the row waits for it), before the
next step issues its own. Network: one exchange is every CP rank sending one or two blocks to
its successor at once — the traffic of one step of a ring all-gather; it is costed as the ring
all-gather whose every edge carries them (``N/(N−1)`` times the bytes in all), with that
all-gather's latency terms (``N−1`` ring steps of NCCL latency instead of one: a few µs too
many per exchange, stated). FLOP convention as without CP (full ``s×s`` scores, the causal
half executed): every step counts ``1/N`` of the rank's ``1/N`` share, so model FLOPs do not
change with ``N``; the half-size calls execute exactly that work.
"""

from __future__ import annotations

import re

from sim.comm import CollKind, Comm, GroupKind
from sim.models.vocab.dims import Dims
from sim.models.vocab.ops import ACT_BYTES as A
from sim.models.vocab.ops import Op, OpKind, elementwise
from sim.models.vocab.rows import Block, Row

#: bytes per element of the element-wise kernels of the ring (bf16 tensors; per query row and
#: head for the fp32 LSE correction), the kinds :mod:`sim.kernels.lookup` times them by
COPY_BYTES, ADD_BYTES, LSE_BYTES = 2 * A, 3 * A, 12
_STEP = re.compile(r"attn_cp(\d+)")


def _sizes(dm: Dims) -> tuple[int, int, int, int]:
    """``(rows, q_width, kv_width, hq)``: the rank's token rows ``b·s/N`` and the widths of Q
    (and the output) and of K and V together on this TP shard."""
    return dm.b * (dm.s // dm.cp), dm.q_width // dm.t, 2 * dm.kvh // dm.t, dm.a // dm.t


def _copy(name: str, rows: int, width: int, count: int = 1) -> Op:
    """``count`` copies of ``rows × width`` bf16 elements each (reads and writes 2 bytes)."""
    return Op(name, OpKind.ELEMENTWISE, 0, count * COPY_BYTES * rows * width, kernel="cp_copy",
              shape=(rows, width), count=count)


def _add(name: str, rows: int, width: int, count: int = 1) -> Op:
    """``count`` in-place adds ``x.add_(y)`` of ``rows × width`` bf16 elements each."""
    return Op(name, OpKind.ELEMENTWISE, 0, count * ADD_BYTES * rows * width, kernel="add",
              shape=(rows, width), count=count)


def ring_attention_blocks(dm: Dims) -> list[Block]:
    """The ring-attention rows of one layer on one CP rank (module docstring): per step ``k``
    a ``attn_cp{k}_dkv`` and an ``attn_cp{k}`` block, then ``attn_cp_merge``."""
    n = dm.cp
    hb, d = dm.b * (dm.a // dm.t), dm.d
    rows, qw, kvw, hq = _sizes(dm)
    sq = dm.s // n
    hkv = max(1, dm.kvh // d // dm.t)
    qkvo = A * rows * (2 * qw + kvw)  # Q, O and one KV block
    flops = 4 * hb * sq * sq * d  # every step: 1/N of the rank's share (full s×s convention)
    diag = (dm.b, hq, hkv, sq, d, 1)
    half = (dm.b, hq, hkv, sq, d, 0, sq // 2)  # lower-triangle; the upper one is its transpose
    blocks: list[Block] = []
    for k in range(n):
        last = k == n - 1  # last forward step = first backward step (TE backward i = 0)
        shape, fwd_kernel, bwd_kernel = ((diag, "attn_fwd", "attn_bwd") if k == 0 else
                                         (half, "attn_fwd_ring", "attn_bwd_ring"))
        fwd: tuple[Op, ...] = (Op(f"flash_attn_cp{k}", OpKind.FLASH_FWD, flops, qkvo,
                                  kernel=fwd_kernel, shape=shape),)
        if k > 0:
            fwd += (elementwise(f"cp{k}_lse_correction", LSE_BYTES * rows * hq,
                                "cp_lse_correction", (rows, hq)),)
        ig = (Op(f"flash_attn_cp{k}_grad", OpKind.FLASH_BWD, 2 * flops, 2 * qkvo,
                 kernel=bwd_kernel, shape=shape),
              Op(f"flash_attn_cp{k}_grad_recompute_qk", OpKind.FLASH_BWD, flops // 2, 0,
                 recompute=True, kernel="attn_bwd_part", shape=shape),
              _copy(f"cp{k}_dq_copy", rows, qw) if last else _add(f"cp{k}_dq_add", rows, qw))
        dkv = (_copy if last else _add)(f"cp{k}_dkv_update", rows, kvw // 2, count=2)  # dK, dV
        cat = (_copy("cp_kv_cat", rows, kvw),) if k == 0 else ()
        blocks.append(Block(f"attn_cp{k}_dkv", fwd=cat, ig=(dkv,)))
        blocks.append(Block(f"attn_cp{k}", fwd=fwd, ig=ig))
    merge = (_copy("cp_out_correction_init", rows, qw),) + tuple(
        elementwise(f"cp{k}_out_correction", ADD_BYTES * rows * qw, "cp_out_correction",
                    (rows, qw)) for k in range(1, n))
    blocks.append(Block("attn_cp_merge", fwd=merge, ig=(_copy("cp_kv_send_copy", rows, kvw),)))
    return blocks


def kv_block_bytes(dm: Dims) -> int:
    """Bytes of one KV block on one GPU: keys and values of the rank's ``s/N`` tokens."""
    return 2 * dm.n * dm.kvh // dm.t * A


def ring_exchange(dm: Dims, block_bytes: int) -> Comm:
    """One ring step moving ``block_bytes`` from every CP rank to its successor, as the ring
    all-gather whose edges each carry one block (see the module docstring)."""
    n = dm.cp
    return Comm(CollKind.ALLGATHER, GroupKind.CP, block_bytes * n // (n - 1), blocking=False,
                overlap=True)


def attach_ring_exchanges(rows: list[Row], dm: Dims) -> None:
    """Give the ``attn_cp{k}`` rows their overlapped ring exchanges (in place): forward, the KV
    block at every step but the last; backward (TE step ``N−1−k``), the KV block at the first
    step, KV and dKV in between, the dKV block at the last."""
    kv, n = kv_block_bytes(dm), dm.cp
    for r in rows:
        m = _STEP.fullmatch(r.name)
        if m:
            k = int(m.group(1))
            r.fwd_comm = ring_exchange(dm, kv) if k < n - 1 else None
            r.ig_comm = ring_exchange(dm, kv if k in (0, n - 1) else 2 * kv)

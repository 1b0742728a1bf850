"""Context parallelism as Megatron-Core runs it: ring attention through TransformerEngine.

With ``--cp N`` (Megatron's ``--context-parallel-size``) each CP rank holds ``s/N`` tokens of
every sequence: with causal masking the sequence is cut into ``2N`` chunks and rank ``i`` keeps
chunks ``i`` and ``2N−1−i`` (TransformerEngine ``AttnFuncWithCPAndKVP2P``; Megatron-Core
``get_batch_on_this_cp_rank``), which gives every rank, and every ring step, the same share of
the causal attention work. Everything outside attention is per token and simply runs on
``s/N`` tokens; attention needs every rank's keys and values: in ``N`` steps each rank
computes its queries against one KV block while passing that block on to the next rank of the
CP ring, peer to peer, so the transfer overlaps the attention kernel of the step.

simrun generates, per layer, ``N`` attention rows ``attn_cp{k}``. Forward: row ``k`` computes
``1/N`` of the rank's attention and, for ``k < N−1``, exchanges the KV block (``2·(s/N)·b·
kv_hidden/t`` elements) around the ring, issued when the row's compute starts (``Comm.overlap``);
the next row waits for both. Backward (TransformerEngine's backward ring): each step exchanges
the KV block and its partial dK/dV (twice the bytes), ``N`` exchanges, the last returning the
gradients to their owner. The time of a forward is therefore
``(N−1)·max(c, x) + c`` for step compute ``c`` and exchange time ``x``.

Network: one ring step is every CP rank sending one block to its successor at once — the
traffic of one step of a ring all-gather; it is costed as the ring all-gather whose every edge
carries one block (``N/(N−1)`` blocks in all), with that all-gather's latency terms (``N−1``
ring steps of NCCL latency instead of one: a few µs too many per exchange, stated).
FLOP convention as without CP (full ``s×s`` scores, flash attention): the rank's share is
``1/N`` of the layer's attention, ``1/N`` of it per step.
"""

from __future__ import annotations

from sim.comm import CollKind, Comm, GroupKind
from sim.models.dims import Dims
from sim.models.ops import ACT_BYTES as A
from sim.models.ops import Op, OpKind
from sim.models.rows import Block, Row


def ring_attention_blocks(dm: Dims) -> list[Block]:
    """The ``N`` attention steps of one layer on one CP rank (flash-attention kernels on an
    ``(s/N) × (s/N)`` block of the rank's ``a/t`` heads)."""
    hb = dm.b * (dm.a // dm.t)
    sq = dm.s // dm.cp
    d = dm.d
    qkvo = A * dm.n * (2 * dm.q_width + 2 * dm.kvh) // dm.t  # Q, O and one KV block
    # A kernel table times each step as the causal attention kernel of the rank's s/N tokens:
    # exactly step 0 (the rank's two chunks against themselves) and the same executed work as
    # every later step (a non-causal half block, sq × sq/2).
    shape = (dm.b, dm.a // dm.t, max(1, dm.kvh // d // dm.t), sq, d, 1)
    fwd = (Op("flash_attn_cp", OpKind.FLASH_FWD, 4 * hb * sq * sq * d, qkvo, kernel="attn_fwd",
              shape=shape),)
    ig = (Op("flash_attn_cp_grad", OpKind.FLASH_BWD, 8 * hb * sq * sq * d, 2 * qkvo,
             kernel="attn_bwd", shape=shape),
          Op("flash_attn_cp_grad_recompute_qk", OpKind.FLASH_BWD, 2 * hb * sq * sq * d, 0,
             recompute=True, kernel="attn_bwd_part", shape=shape))
    return [Block(f"attn_cp{k}", fwd=fwd, ig=ig) for k in range(dm.cp)]


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
    """Give the ``attn_cp{k}`` rows their overlapped ring exchanges (in place)."""
    kv = kv_block_bytes(dm)
    fwd, bwd = ring_exchange(dm, kv), ring_exchange(dm, 2 * kv)
    for r in rows:
        if r.name.startswith("attn_cp"):
            k = int(r.name[len("attn_cp"):])
            r.fwd_comm = fwd if k < dm.cp - 1 else None
            r.ig_comm = bwd

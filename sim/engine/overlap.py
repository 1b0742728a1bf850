"""Time of a tensor-parallel collective pipelined with the GEMM it feeds or is fed by
(Megatron-Core ``--tp-comm-overlap``: Transformer Engine's userbuffers), with the GEMM slowed
while a communication kernel holds some of the GPU's SMs.

Transformer Engine (``transformer_engine/pytorch/module/base.py``, ``initialize_ub``) overlaps
each TP collective of a transformer layer with one GEMM, by one of three methods (its default
per layer: ``ring_exchange`` for qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad; ``pipeline`` for
proj_fprop, fc2_fprop; ``bulk`` for qkv/fc1 dgrad and wgrad):

- ``ring_exchange`` (all-gather feeding a GEMM; ``num_splits`` = TP size ``n``): the GEMM runs
  on the local chunk first while the next chunk arrives by point-to-point copy from the ring
  neighbour; ``n − 1`` transfers, each beside one GEMM chunk; the last chunk's GEMM runs alone.
- ``pipeline`` (a GEMM feeding a reduce-scatter; ``num_splits`` = ``k``, 4 by default): chunk
  ``i``'s reduce-scatter runs beside chunk ``i + 1``'s GEMM; the first GEMM chunk runs alone and
  the last chunk's reduce-scatter is exposed.
- ``bulk``: the whole collective beside the whole (independent) GEMM.
- ``nccl``: as ``bulk``, but an NCCL collective issued asynchronously beside the GEMM
  (Megatron's ``async_tensor_model_parallel_allreduce``, Transformer Engine's backward without
  userbuffers: :mod:`sim.models.features.tp_async`); its kernel holds one SM per NCCL channel
  (CTA), the count the engine takes from the network
  (:meth:`~sim.network.base.Network.kernel_channels`,
  capped by ``--nccl-channels``) when it compiles the pass.

Interference: while a communication kernel runs on ``comm_sms`` of the GPU's ``sms`` SMs, the
GEMM gets the rest (Transformer Engine launches it with that SM margin): it runs at
``(sms − comm_sms) / sms`` of its speed. A step where transfer ``c`` runs beside GEMM work
``g`` (alone-time) therefore takes ``max(c, c + g − c·(sms − comm_sms)/sms)``: the GEMM is slowed
for as long as the transfer runs, then finishes alone. The transfer's own speed is the
network's (its cost ``C`` of the whole collective, split evenly over the transfers).

All times in integer nanoseconds; results are rounded up to whole ns.
"""

from __future__ import annotations

METHODS = ("ring_exchange", "pipeline", "bulk", "nccl")


def overlapped_ns(method: str, gemm_ns: int, comm_ns: int, splits: int, sms: int,
                  comm_sms: int) -> int:
    """Time (ns) of the GEMM of ``gemm_ns`` and the collective of ``comm_ns`` overlapped by
    ``method`` in ``splits`` chunks, the communication kernel holding ``comm_sms`` of ``sms``
    SMs. Never less than ``max(gemm_ns, comm_ns)``; with nothing to overlap it is their sum.

    A step of GEMM work ``g`` beside a transfer ``c`` takes ``max(c, g + c·comm_sms/sms)``
    (the GEMM at ``(sms − comm_sms)/sms`` of its speed while the transfer runs). The sums below
    are those steps scaled by a common denominator ``den``, in integers, so the rounding up is
    exact."""
    if method not in METHODS:
        raise ValueError(f"unknown overlap method {method!r}")
    if sms <= 0 or not 0 <= comm_sms < sms:
        raise ValueError(f"need 0 <= comm_sms < sms, got {comm_sms} of {sms}")
    g, c, h = gemm_ns, comm_ns, comm_sms
    if c == 0 or g == 0:
        return g + c
    if method in ("bulk", "nccl") or splits <= 1:
        # max(c, g + c·h/sms)
        den = sms
        num = max(c * sms, g * sms + c * h)
    elif method == "ring_exchange":
        # (n − 1) steps of g/n beside c/(n − 1), then the last g/n alone
        n = splits
        den = n * sms
        num = max(c * den, (n - 1) * g * sms + c * h * n) + g * sms
    else:  # pipeline: g/k alone, (k − 1) steps of g/k beside c/k, then c/k alone
        k = splits
        den = k * sms
        num = g * sms + (k - 1) * max(c * sms, g * sms + c * h) + c * sms
    return -(-num // den)

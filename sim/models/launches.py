"""The kernel launches of a generated phase, for the host-dispatch model (:mod:`sim.engine.host`).

Counting rule: every modelled operator is ``op.count`` kernel launches (one per local expert for
a grouped GEMM, which Transformer Engine's ``GroupedLinear`` runs as one GEMM per expert), each
taking ``1/count`` of the operator's time; an ``attn_bwd_part`` operator is FLOPs of the
attention-backward kernel counted apart (:mod:`sim.models.layers`), not a launch of its own —
its time is added to the kernel before it. Not counted, because simrun has no operator for them:
the framework's small bookkeeping kernels (index arithmetic, ``torch.sum`` of the routing map,
memsets, the dispatcher's device-to-host copies), optimizer and gradient-bucket kernels, and the
pipeline send/receive launches.
"""

from __future__ import annotations

from sim.models.compute import Timer
from sim.models.vocab.ops import Op


def phase_launches(timer: Timer, ops: tuple[Op, ...], dtype: str) -> tuple[tuple[int, ...], int]:
    """``(kernels_ns, sync_kernels)`` of a phase running ``ops`` (see
    :class:`~sim.program.workload.Phase`): the GPU time (ns, rounded) of each launch in issue
    order, and how many leading launches the host waits for (through the last operator marked
    ``host_waits``; 0: none)."""
    kernels: list[float] = []
    sync = 0
    for op in ops:
        t, _how = timer.op_ns(op, dtype)
        if op.kernel == "attn_bwd_part" and kernels:
            kernels[-1] += t
            continue
        n = max(op.count, 1)
        kernels.extend([t / n] * n)
        if op.host_waits:
            sync = len(kernels)
    return tuple(round(k) for k in kernels), sync

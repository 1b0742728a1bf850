"""The communication vocabulary shared by the workload and the network.

:class:`CollKind` (what a communication does), :class:`GroupKind` (which process group it runs
in) and :class:`Comm` (one communication issued by a layer phase) are imported by the workload
readers and generator, the network models and the engine alike; this module imports nothing
from the rest of :mod:`sim`, so it sits below all of them. Sizes are integer bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class CollKind(str, Enum):
    """Communication operation kinds."""

    ALLREDUCE = "ALLREDUCE"
    ALLGATHER = "ALLGATHER"
    REDUCESCATTER = "REDUCESCATTER"
    ALLTOALL = "ALLTOALL"
    BROADCAST = "BROADCAST"
    SENDRECV = "SENDRECV"  # point-to-point (pipeline activations / gradients)


class GroupKind(str, Enum):
    """Process groups a communication runs in."""

    TP = "TP"
    DP = "DP"
    EP = "EP"
    DP_EP = "DP_EP"
    PP = "PP"
    CP = "CP"  # context parallelism (Megatron-Core): the ring of ranks sharing a sequence
    # Megatron's embedding group: the first and the last pipeline stage (same TP/DP position),
    # where the tied input/output embedding's gradient is all-reduced (Megatron-LM
    # parallel_state.get_embedding_group, _allreduce_embedding_grads)
    EMB = "EMB"
    # Megatron-Core's expert tensor-parallel group (``--expert-tensor-parallel-size``, ETP):
    # the ranks that split one expert's weights when ETP differs from TP (with ETP = TP the
    # experts use the TP group itself, GroupKind.TP)
    ETP = "ETP"


@dataclass(frozen=True, slots=True)
class Comm:
    """One communication issued by a layer phase.

    ``blocking`` collectives stall the compute stream until done (TP/EP); non-blocking ones
    (data-parallel gradient reductions) run on their group's communication stream and overlap
    later compute; the optimizer waits for them. ``post_delay_ns`` is the AICB "process time"
    added after the collective completes.

    ``overlap``: issued on its own stream of the group when its phase's compute starts and
    running concurrently with it; the phase ends when both are done (ring-attention KV blocks).
    ``prefetch``: issued the same way but awaited later, by a phase with ``await_group``
    (ZeRO-3 parameter prefetch). ``per_microbatch``: a non-blocking communication issued in
    every microbatch, not only the last one's backward (ZeRO-2/3 gradient reduce-scatter).
    """

    kind: CollKind
    group: GroupKind
    size_bytes: int
    blocking: bool = True
    post_delay_ns: int = 0
    overlap: bool = False
    prefetch: bool = False
    per_microbatch: bool = False

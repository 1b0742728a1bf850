"""The internal, typed workload model shared by every reader and by the generator.

Units: compute times are integer nanoseconds (``*_ns``), sizes integer bytes (``*_bytes``).
Integers keep sums exact (no float drift over millions of events) and make runs reproducible.

A *layer* is one row of a workload file: a forward phase, an input-gradient phase and a
weight-gradient phase, each with a compute time and at most one communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from sim.comm import Comm, GroupKind


class PhaseKind(str, Enum):
    FORWARD = "forward"
    INPUT_GRAD = "input_grad"
    WEIGHT_GRAD = "weight_grad"


@dataclass(frozen=True, slots=True)
class GemmOverlap:
    """A blocking collective pipelined with a GEMM of its phase (Megatron-Core
    ``--tp-comm-overlap``, Transformer Engine userbuffers; :mod:`sim.engine.overlap`).

    ``gemm_ns``: the GEMM's time alone (part of the phase's ``compute_ns``); ``method``:
    ``ring_exchange``, ``pipeline`` or ``bulk``; ``splits``: chunks; ``comm_sms``: SMs the
    communication kernel takes from the GEMM of the GPU's ``sms``."""

    comm: Comm
    gemm_ns: int
    method: str
    splits: int
    comm_sms: int
    sms: int


@dataclass(frozen=True, slots=True)
class Phase:
    """Compute (ns) followed by an optional communication. ``await_group``: first wait for the
    oldest outstanding prefetched (``Comm.prefetch``) communication of that group.
    ``overlaps``: blocking collectives run pipelined with GEMMs of this phase's compute.
    ``kernels_ns``: the GPU time (ns) of each kernel launch of the compute, in issue order
    (generated programs; empty: not known — a workload file's row); ``sync_kernels``: the host
    waits, after issuing the compute and before the comm, until the first ``sync_kernels`` of
    them have finished (a device-to-host copy it needs; 0: no wait). See :mod:`sim.engine.host`."""

    compute_ns: int = 0
    comm: Comm | None = None
    await_group: GroupKind | None = None
    overlaps: tuple[GemmOverlap, ...] = ()
    kernels_ns: tuple[int, ...] = ()
    sync_kernels: int = 0


NO_PHASE = Phase()


@dataclass(frozen=True, slots=True)
class Layer:
    """One workload row: forward, input-gradient and weight-gradient phases.

    ``line`` is the 1-based line in the source file (0 for generated layers).
    """

    name: str
    forward: Phase = NO_PHASE
    input_grad: Phase = NO_PHASE
    weight_grad: Phase = NO_PHASE
    line: int = 0
    # Megatron-Core --overlap-param-gather: the parameter all-gather buckets this layer opens
    # (its first forward in the iteration waits for them)
    param_buckets: tuple[int, ...] = ()
    # compute (ns) the first forward of the iteration adds to the forward phase: work done
    # once per iteration (Transformer Engine's FP8 weight casts, cached for later microbatches)
    first_forward_ns: int = 0

    def phase(self, kind: PhaseKind) -> Phase:
        if kind is PhaseKind.FORWARD:
            return self.forward
        if kind is PhaseKind.INPUT_GRAD:
            return self.input_grad
        return self.weight_grad


@dataclass
class WorkloadHeader:
    """Parallel layout declared by a workload file; ``None`` = not given in the file."""

    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    vpp: int | None = None
    ga: int | None = None
    all_gpus: int | None = None
    pp_comm_bytes: int | None = None
    declared_rows: int | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class Workload:
    """A parsed workload file: the rows of one representative rank, as written."""

    path: str
    format: str
    header: WorkloadHeader
    layers: list[Layer]
    assumptions: list[str] = field(default_factory=list)

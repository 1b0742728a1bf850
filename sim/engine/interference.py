"""SM interference: an NCCL kernel that runs beside compute takes SMs from it.

An NCCL collective runs as one kernel with one CTA (thread block) per channel, each resident on
an SM for the whole collective. The channels are NCCL's choice per collective: its
communicator's channel count (``--nccl-channels``, the ``NCCL_MAX_NCHANNELS``-like cap), cut
down for small messages by the size rule of NCCL's tuning (enqueue.cc ``topoGetAlgoInfo``: one
channel less while ``nBytes < nc · nThreads · threshold``) for the algorithm and protocol the
network model chose (:func:`sim.network.nccl.kernel_channels`, the rule the collective's
bandwidth model uses; NVLS: 16 at every size). While asynchronous collectives of a rank (DP
gradient reductions, parameter all-gathers, ring-attention exchanges, ZeRO prefetches) are in
flight on its GPU, that rank's compute runs on the SMs their kernels leave free: at
``(sms − ctas) / sms`` of its speed, ``ctas`` the sum over the running kernels (at most
``sms − 1``); the time lost is counted as exposed communication of the kernel's group (the
compute stream was held back by it). ``comm_slowdown`` stretches an asynchronous collective by
that factor for the time compute ran beside it (its kernel shares memory bandwidth and issue
slots with that compute): it ends ``(comm_slowdown − 1) × (compute time beside it)`` later.

Blocking collectives do not run beside compute (the stream waits for them), so they take no
SMs from it; Transformer Engine's GEMM-overlapped collectives carry their own SM count
(:mod:`sim.engine.overlap`), except the NCCL ones issued asynchronously beside one GEMM
(``nccl`` overlaps, :mod:`sim.models.features.tp_async`), whose kernel holds its channels' SMs by
the same rule (:func:`overlap_ctas`). Pipeline send/receive kernels are not counted (stated).

The speed change is exact in simulated time: a compute run that a collective starts or ends
during is advanced piecewise (one extra event per change); a rank with no asynchronous
collective issued and not yet finished takes the plain timeout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from sim.assumption import Assumption
from sim.comm import Comm, GroupKind
from sim.engine.segments import Fused, Part
from sim.network.base import CommRequest

#: NCCL channels of a communicator (the CTAs of a collective at full size) when the user does
#: not say (``--nccl-channels``): an ``ncclAllGather`` beside a GEMM on an H100 was seen
#: launching 24 blocks (NVIDIA developer forum, "Compute-Communication Overlap Causes Severe
#: GEMM Performance Degradation because of Tail Effect", forums.developer.nvidia.com/t/337991).
#: NCCL picks the count per topology; this is one observed value. Smaller messages use fewer
#: (:func:`sim.network.nccl.kernel_channels`).
DEFAULT_NCCL_CHANNELS = 24
#: SMs assumed for a GPU the catalogue has no count for (an H100 SXM's)
DEFAULT_SMS = 132


NO_ASYNC = Assumption("interference: none: no asynchronous collective ran beside compute in "
                      "this run (nothing to take SMs from)", "interference-none")


@dataclass(frozen=True)
class Interference:
    """An asynchronous communication kernel holds one SM per NCCL channel (CTA) of the GPU's
    ``sms``: at most ``comm_sms`` (the communicator's channels, ``--nccl-channels``), fewer
    for small messages (the network's :meth:`~sim.network.base.Network.kernel_channels`);
    ``comm_slowdown`` ≥ 1 on its own duration."""

    sms: int
    comm_sms: int
    comm_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if self.sms <= 0 or not 0 <= self.comm_sms < self.sms:
            raise ValueError(f"need 0 <= comm_sms < sms, got {self.comm_sms} of {self.sms}")
        if self.comm_slowdown < 1.0:
            raise ValueError(f"comm_slowdown must be >= 1, got {self.comm_slowdown}")

    def describe(self, sms_source: str, beside: bool = True,
                 used: dict[GroupKind, tuple[int, ...]] | None = None) -> str:
        """The assumption line (``beside``: compute ran beside an asynchronous collective;
        ``used``: the CTA counts the run's kernels took, by group)."""
        if not beside:
            return NO_ASYNC
        if not self.comm_sms and self.comm_slowdown == 1.0:
            return ("interference: none (--nccl-channels 0): an asynchronous collective takes "
                    "nothing from the compute beside it")
        seen = "; ".join(f"{g.value} {'/'.join(map(str, c))}"
                         for g, c in sorted((used or {}).items(), key=lambda gc: gc[0].value))
        return (f"interference: an asynchronous NCCL collective (DP gradients, parameter "
                f"all-gathers, ring-attention exchanges, ZeRO prefetch, "
                f"--async-tensor-model-parallel-allreduce's TP collectives) holds one SM per NCCL "
                f"channel (CTA) of the GPU's {self.sms} ({sms_source}) while it runs: the "
                f"channels NCCL's tuning gives its size, algorithm and protocol, at most "
                f"{self.comm_sms} (--nccl-channels, the communicator's channels)"
                + (f" (this run: {seen})" if seen else "")
                + "; compute beside it runs on the SMs left free, the time lost counted as "
                f"exposed communication of its group; the collective itself is stretched "
                f"×{self.comm_slowdown:g} (--comm-overlap-slowdown; no published measurement "
                "of it was found, 1 by default); pipeline send/receive kernels not counted")


def overlap_ctas(sharing: ComputeSharing | None, net, members: tuple[int, ...],
                 comm: Comm, record: bool = True) -> int:
    """SMs the NCCL kernel of ``comm`` holds beside its GEMM (an ``nccl`` overlap): its
    channels at that size (``net.kernel_channels``, at most ``--nccl-channels``); none
    without interference or in a group of one (no kernel runs). ``record``: note the count
    for the assumption line (the kernel does run beside compute)."""
    if sharing is None or len(members) <= 1:
        return 0
    ctas = net.kernel_channels(CommRequest(comm.kind, comm.group, members, comm.size_bytes),
                               sharing.intf.comm_sms)
    if ctas and record:
        sharing.used.setdefault(comm.group, set()).add(ctas)
    return ctas


def ran_beside(beside_compute_ns: int, used: dict[GroupKind, tuple[int, ...]]) -> bool:
    """Whether some communication kernel took SMs from compute in a run: compute ran beside
    an asynchronous collective, or a TP kernel ran (TP collectives are blocking except the
    ``nccl`` GEMM overlaps, which always run beside their GEMM)."""
    return beside_compute_ns > 0 or GroupKind.TP in used


class ComputeSharing:
    """Per rank: asynchronous collectives issued but not finished (``pending``), those whose
    kernel is running (``running``, by group), and compute advanced at the shared speed."""

    def __init__(self, env: simpy.Environment, intf: Interference):
        self.env, self.intf = env, intf
        self.pending: dict[int, int] = {}
        self.running: dict[int, dict[GroupKind, int]] = {}
        self.taken: dict[int, int] = {}  # per rank: CTAs (SMs) of the kernels running now
        # CTA counts the kernels took, by group (for the assumption line)
        self.used: dict[GroupKind, set[int]] = {}
        self._changed: dict[int, simpy.Event] = {}
        # per rank: compute time run while at least one collective ran beside it (cumulative)
        self.beside: dict[int, int] = {}
        self._slow_since: dict[int, int] = {}  # start of a slowed compute interval in progress

    def issued(self, rank: int) -> None:
        self.pending[rank] = self.pending.get(rank, 0) + 1

    def start(self, rank: int, group: GroupKind, ctas: int) -> None:
        """A kernel of ``ctas`` CTAs of ``rank``'s ``group`` collective starts."""
        run = self.running.setdefault(rank, {})
        run[group] = run.get(group, 0) + 1
        self.taken[rank] = self.taken.get(rank, 0) + ctas
        self.used.setdefault(group, set()).add(ctas)
        self._change(rank)

    def end(self, rank: int, group: GroupKind | None, ctas: int = 0) -> None:
        """A collective of ``rank`` finished (``group`` ``None``: it never ran a kernel), its
        kernel of ``ctas`` CTAs with it."""
        if group is not None:
            run = self.running[rank]
            run[group] -= 1
            if not run[group]:
                del run[group]
            self.taken[rank] -= ctas
        self.pending[rank] -= 1
        self._change(rank)

    def beside_now(self, rank: int) -> int:
        """Compute time ``rank`` has run beside collectives so far, including the interval in
        progress."""
        t0 = self._slow_since.get(rank)
        return self.beside.get(rank, 0) + (self.env.now - t0 if t0 is not None else 0)

    def _change(self, rank: int) -> None:
        ev = self._changed.pop(rank, None)
        if ev is not None:
            ev.succeed()

    def quiet(self, rank: int) -> bool:
        """No asynchronous collective of ``rank`` can run during its next compute."""
        return not self.pending.get(rank)

    def _group(self, rank: int) -> GroupKind | None:
        run = self.running.get(rank)
        return min(run) if run else None  # by name: a GroupKind compares as its value

    def work(self, rank: int, ns: int, lost: dict[GroupKind, int]):
        """Run ``ns`` of compute (its time alone); adds the time lost to running collectives
        to ``lost`` by group."""
        env, sms = self.env, self.intf.sms
        left = ns * sms  # work in SM-nanoseconds
        start = env.now
        slow: dict[GroupKind, int] = {}  # time run beside each group's kernels
        while left > 0:
            group = self._group(rank)
            speed = sms - min(self.taken.get(rank, 0), sms - 1) if group is not None else sms
            t0, dt = env.now, math.ceil(left / speed)
            ev = self._changed.get(rank)
            if ev is None:
                ev = self._changed[rank] = env.event()
            done = env.timeout(dt)
            if group is not None:
                self._slow_since[rank] = t0
            yield done | ev
            self._slow_since.pop(rank, None)
            elapsed = env.now - t0
            left -= elapsed * speed
            if group is not None:
                slow[group] = slow.get(group, 0) + elapsed
                self.beside[rank] = self.beside.get(rank, 0) + elapsed
        extra = env.now - start - ns
        if extra > 0:  # to the group whose kernels it ran beside longest
            group = max(slow, key=lambda g: (slow[g], g.value))
            lost[group] = lost.get(group, 0) + extra

    def fused(self, rank: int, step: Fused):
        """Run a fused step part by part (compute slowed, blocking-comm parts at their own
        time). Returns ``(parts as run: (part, start, end), time lost by group)``."""
        env = self.env
        lost: dict[GroupKind, int] = {}
        ran: list[tuple[Part, int, int]] = []
        for part in step.parts:
            t0 = env.now
            if part.group is None:
                yield from self.work(rank, part.duration_ns, lost)
            else:
                yield env.timeout(part.duration_ns)
            ran.append((part, t0, env.now))
        return ran, lost

"""Host (CPU) dispatch of GPU kernels: the GPU cannot start a kernel before the CPU has issued it.

Mechanism. Each rank's training process issues its kernels one after another from one CPU
thread (PyTorch eager dispatch, then the CUDA launch); issuing one kernel takes the host
``t_host`` (``--host-dispatch-us``). Kernels run on the GPU in issue order, so kernel ``i`` of
the rank starts at ``max(GPU free, host issue time of i)``. The host normally runs ahead of the
GPU (launches are asynchronous) and its lead only grows while the GPU is busy or waits for
another rank; the GPU waits for the host only

- after a *host synchronisation*: the host blocks until the GPU has finished some kernel
  (Megatron-Core's alltoall MoE dispatcher waits once per MoE layer forward for the
  tokens-per-expert counts: :func:`sim.models.features.moe.dispatcher_syncs_host`), so it resumes
  issuing with no lead at all; and
- when issuing is slower than running (``n·t_host`` > the GPU time of ``n`` kernels).

Segment after a sync (GPU idle at time 0, the host issues kernel ``i`` at ``(i+1)·t_host``,
kernels of GPU time ``d_0 … d_{n-1}``): by induction on ``i`` the end of kernel ``i`` is
``E_i = max_{j≤i}((j+1)·t_host + Σ_{j≤k≤i} d_k)`` (``E_i = max(E_{i−1}, (i+1)·t_host) + d_i``:
either the kernel waited for its predecessor or for its issue), so the segment lasts
``max_i((i+1)·t_host + Σ_{j≥i} d_j)`` — at least ``t_host + Σ d`` (the first launch) and at
least ``n·t_host + d_{n−1}`` (host-bound). Kernels ``5, 1, 1`` µs with ``t_host = 2`` µs end at
``max(2 + 7, 4 + 2, 6 + 1) = 9`` µs.

State per simulated rank: ``ready`` (the host time at which it has issued everything so far;
0 at the start of the iteration, when host and GPU start together — Megatron's training step
ends in host syncs, e.g. the loss and gradient-norm reductions read on the CPU). A compute part
of a fused run (:class:`~sim.engine.segments.Part`) issues its phase's kernel list
(:mod:`sim.models.launches`: each modelled operator's ``count`` kernels, scaled to the part's
actual time); a collective (fused part, blocking step, asynchronous issue) is one launch; a
GEMM-overlapped collective two; stream waits none. A part whose phase has no kernel list (a
workload file's row) runs without host time. The time the GPU waits is idle time (``bubble``,
also counted in ``host_wait_ns``), placed before the step in the timeline: the step's end, and
so every later event, is exact for its kernel times; inside the step the waits are drawn
together at its start.

CUDA graphs (``program.cuda_graphs``, :class:`~sim.program.graphs.GraphCapture`): the kernels of
one captured region, pass direction, microbatch and chunk are replayed by one graph launch,
which costs the host ``t_host``; its other kernels cost the host nothing to issue and start as
soon as the GPU is free, in order (a segment of ``n`` captured kernels right after a sync lasts
``t_host + Σ d`` instead of ``max_i((i+1)·t_host + Σ_{j≥i} d_j)``). Eager kernels between two
kernels of one replay (a gradient bucket's reduction) cost their launch and leave it open. The
GPU times are the eager kernels' (a graph replays the same kernels).

Not modelled: prologue/epilogue tasks (optimizer, gradient buckets),
pipeline send/receive launches, the framework's uncounted small kernels
(:mod:`sim.models.launches`), and the device-to-host copy and the dispatcher's small all-gather
of the routing counts (their latency would lengthen each wait).
"""

from __future__ import annotations

import simpy

from sim.engine.ledger import Ledger
from sim.engine.segments import AsyncIssue, Blocking, Fused, OverlapBlocking, Step
from sim.program.graphs import GraphCapture
from sim.program.workload import PhaseKind

# a flattened fused step: (GPU ns, launches: 0 or 1, back); back > 0 marks no kernel but the
# host's wait for the end of the kernel ``back`` entries before it
Kernel = tuple[int, int, int]
# a kernel's captured region and pass (backward?), None where it is issued eagerly
Region = tuple[str, bool] | None


def scaled_kernels(kernels_ns: tuple[int, ...], duration_ns: int) -> list[int]:
    """``kernels_ns`` rescaled (whole ns) to add up to ``duration_ns`` exactly (the part's time
    after compute scaling, jitter or a first forward's extra work)."""
    total = sum(kernels_ns)
    if total <= 0:
        return [0] * (len(kernels_ns) - 1) + [duration_ns]
    out, cum, prev = [], 0, 0
    for k in kernels_ns:
        cum += k
        edge = duration_ns * cum // total
        out.append(edge - prev)
        prev = edge
    return out


def flatten(step: Fused, capture: GraphCapture | None = None
            ) -> tuple[tuple[Kernel, ...], tuple[Region, ...]]:
    """The kernels of a fused step in issue order (see the module docstring) and the captured
    region of each (all ``None`` without ``capture``)."""
    out: list[Kernel] = []
    regions: list[Region] = []
    for p in step.parts:
        if p.group is not None:
            ks = [(p.duration_ns, 1, 0)]
        elif not p.kernels_ns:
            ks = [(p.duration_ns, 0, 0)]
        else:
            ks = [(d, 1, 0) for d in scaled_kernels(p.kernels_ns, p.duration_ns)]
            if p.sync_kernels:  # after issuing the part, wait for its first sync_kernels
                ks.append((0, 0, len(p.kernels_ns) - p.sync_kernels + 1))
        out += ks
        regions += [region_of(capture, p.layer, p.group, p.phase)] * len(ks)
    return tuple(out), tuple(regions)


def region_of(capture: GraphCapture | None, layer: str, group, phase: PhaseKind) -> Region:
    """The captured region of a step of ``layer`` (``None``: eager)."""
    label = capture.label(layer, group) if capture is not None else None
    return None if label is None else (label, phase is not PhaseKind.FORWARD)


def issue(kernels, t_host_ns: int, gpu_ns: int, ready_ns: int) -> tuple[int, int, list]:
    """Run ``kernels`` (:data:`Kernel`) from GPU-free time ``gpu_ns`` with the host's issue
    clock at ``ready_ns``. Returns ``(GPU end, host ready, [(start, end) per kernel])``."""
    times: list[tuple[int, int]] = []
    for d, launches, back in kernels:
        if back:  # the host blocks until that kernel has finished
            ready_ns = max(ready_ns, times[-back][1])
            continue
        if launches:
            ready_ns += t_host_ns
            start = max(gpu_ns, ready_ns)
        else:
            start = gpu_ns
        gpu_ns = start + d
        times.append((start, gpu_ns))
    return gpu_ns, ready_ns, times


def segment_after_sync_ns(kernels_ns, t_host_ns: int) -> int:
    """Closed form of a segment issued right after a sync (module docstring):
    ``max_i((i+1)·t_host + Σ_{j≥i} d_j)``."""
    d = list(kernels_ns)
    return max((i + 1) * t_host_ns + sum(d[i:]) for i in range(len(d))) if d else 0


class HostDispatch:
    """The per-rank host issue clock of one simulation (``t_host_ns`` > 0)."""

    def __init__(self, env: simpy.Environment, ledger: Ledger, t_host_ns: int,
                 capture: GraphCapture | None = None) -> None:
        if t_host_ns <= 0:
            raise ValueError("host dispatch time must be positive (0: leave the model off)")
        self.env, self.ledger, self.t, self.capture = env, ledger, t_host_ns, capture
        self.ready: dict[int, int] = {}
        self.replay: dict[int, tuple] = {}  # rank -> the graph replay it last launched
        self._flat: dict[int, tuple[Fused, tuple[Kernel, ...], tuple[Region, ...]]] = {}

    def _replayed(self, rank: int, kernels, regions, mb: int, chunk: int) -> list[Kernel]:
        """``kernels`` with the launch of each captured kernel but the first of its graph
        replay taken off (:meth:`GraphCapture.key`; the rank's open replay carries over)."""
        cur, out = self.replay.get(rank), []
        for k, r in zip(kernels, regions, strict=True):
            if r is not None and k[1]:
                key = self.capture.key(r[0], r[1], mb, chunk)
                if key == cur:
                    k = (k[0], 0, k[2])
                cur = key
            out.append(k)
        if cur is not None:
            self.replay[rank] = cur
        return out

    def gap_ns(self, rank: int, step: Step, now: int, mb: int = 0, chunk: int = 0) -> int:
        """How long the GPU of ``rank`` waits for the host before ``step`` of microbatch ``mb``
        and model chunk ``chunk`` (and the host's clock advanced past its launches)."""
        t, ready = self.t, self.ready.get(rank, 0)
        kind = type(step)
        if kind is Fused:
            got = self._flat.get(id(step))
            if got is None or got[0] is not step:
                got = self._flat[id(step)] = (step, *flatten(step, self.capture))
            kernels = got[1]
            if self.capture is not None:
                kernels = self._replayed(rank, kernels, got[2], mb, chunk)
            launches = sum(k[1] for k in kernels)
            if ready + launches * t <= now and not any(k[2] for k in kernels):
                self.ready[rank] = ready + launches * t  # the host is ahead throughout
                return 0
            end, self.ready[rank], _ = issue(kernels, t, now, ready)
            return end - now - step.duration_ns
        n = 2 if kind is OverlapBlocking else 1 if kind in (Blocking, AsyncIssue) else 0
        if not n:
            return 0
        if self.capture is not None:  # a comm step: one graph launch at most
            comm = step.overlap.comm if kind is OverlapBlocking else step.comm
            r = region_of(self.capture, step.layer, comm.group, step.phase)
            if r is not None:
                n = self._replayed(rank, [(0, 1, 0)], [r], mb, chunk)[0][1]
                if not n:  # its graph replay is already launched
                    return 0
        ready += n * t
        self.ready[rank] = ready
        return max(0, ready - now)

    def before(self, rank: int, step: Step, mb: int, chunk: int):
        """Wait (GPU idle) until the host has issued ``step``'s first kernel(s)."""
        gap = self.gap_ns(rank, step, self.env.now, mb, chunk)
        if gap <= 0:
            return
        t0 = self.env.now
        yield self.env.timeout(gap)
        st = self.ledger.stats[rank]
        st.bubble_ns += gap
        st.host_wait_ns += gap
        self.ledger.span(rank, "compute", t0, t0 + gap, "bubble", "host dispatch", mb, chunk)


def describe(t_host_ns: int) -> str:
    """The assumption line of ``--host-dispatch-us`` (empty when off)."""
    if t_host_ns <= 0:
        return ""
    return (f"host dispatch: the CPU takes {t_host_ns / 1000:g} µs to issue each modelled "
            "kernel (--host-dispatch-us, set by the user: no published measurement of this "
            "stack's per-kernel host time was found, so the default is 0 = off); kernel i starts "
            "at max(GPU free, its issue time); the host runs ahead of the GPU except after "
            "Megatron-Core's alltoall MoE dispatcher's per-layer forward sync (token_dispatcher."
            "py, _maybe_dtoh_and_synchronize) and at the iteration start; a segment after a "
            "sync lasts max_i((i+1)·t_host + Σ_{j≥i} d_j); GPU idle time waiting for the host "
            "is counted as idle (host_wait_s); prologue/epilogue tasks and pipeline transfers "
            "are not counted (sim.engine.host)")

"""Kinds of step the event loop runs that need more than a timeout: the spans of a fused run
(:func:`fused_spans`), a non-fusable blocking collective (:func:`blocking`) and a
GEMM-overlapped collective costed as it runs (:func:`overlap_blocking`)."""

from __future__ import annotations

import simpy

from sim.engine.comms import GROUP_NAME, Rendezvous, comm_args
from sim.engine.interference import ComputeSharing
from sim.engine.ledger import Ledger
from sim.engine.overlap import overlapped_ns
from sim.engine.result import LayerStats, RankStats
from sim.engine.segments import Blocking, Fused, OverlapBlocking


def add_layer_comm(st: RankStats, layer: str, group: str, ns: int) -> None:
    """Add ``ns`` of exposed ``group`` communication to ``st``'s totals of ``layer``."""
    ls = st.layers.get(layer)
    if ls is None:
        ls = st.layers[layer] = LayerStats()
    ls.comm_ns[group] = ls.comm_ns.get(group, 0) + ns


def overlap_blocking(env: simpy.Environment, rdv: Rendezvous, ledger: Ledger, rank: int,
                     step: OverlapBlocking, mb: int, chunk: int):
    """The rendezvous, the collective (``c`` ns from its start), then the rest of
    :func:`overlapped_ns` (GEMM and collective pipelined). The GEMM's time is compute, the
    remainder (and any rendezvous wait) exposed communication of the group."""
    st, o = ledger.stats[rank], step.overlap
    t0 = env.now
    res, (_, arrived) = yield from rdv.collective(
        rank, o.comm, f"{step.layer} {step.phase.value} (overlapped with its GEMM)")
    c = env.now - arrived
    rest = overlapped_ns(o.method, step.gemm_ns, c, o.splits, o.sms, o.comm_sms) - c
    if rest > 0:
        yield env.timeout(rest)
    g = o.comm.group
    gv = GROUP_NAME[g]
    exposed = env.now - t0 - step.gemm_ns
    st.compute_ns += step.gemm_ns
    st.exposed_comm_ns[g] += exposed
    add_layer_comm(st, step.layer, gv, exposed)
    if ledger.spans is not None:
        ledger.span(rank, gv, t0, env.now, "comm", f"{step.layer}.{step.phase.value}", mb,
                    chunk, comm_args(o.comm, res.algorithm if res else ""))


def blocking(env: simpy.Environment, rdv: Rendezvous, ledger: Ledger, rank: int,
             step: Blocking, mb: int, chunk: int):
    """A non-fusable blocking collective: its time (rendezvous wait included) is exposed
    communication of its group."""
    st, t0 = ledger.stats[rank], env.now
    res, _ = yield from rdv.collective(rank, step.comm, f"{step.layer} {step.phase.value}")
    d, g = env.now - t0, step.comm.group
    gv = GROUP_NAME[g]
    st.exposed_comm_ns[g] += d
    add_layer_comm(st, step.layer, gv, d)
    if ledger.spans is not None:
        ledger.span(rank, gv, t0, env.now, "comm", f"{step.layer}.{step.phase.value}", mb,
                    chunk, comm_args(step.comm, res.algorithm if res else ""))


def fused_spans(ledger: Ledger, rank: int, t0: int, step: Fused, mb: int, chunk: int) -> None:
    """The spans of the parts of a fused run that started at ``t0``."""
    span = ledger.span
    for part in step.parts:
        s0 = t0 + part.offset_ns
        s1 = s0 + part.duration_ns
        if part.group is None:
            span(rank, "compute", s0, s1, part.phase.value, part.layer, mb, chunk)
        else:
            span(rank, part.group.value, s0, s1, "comm", f"{part.layer}.{part.phase.value}",
                 mb, chunk, comm_args(part.comm, part.algorithm))


def fused_shared(sharing: ComputeSharing, ledger: Ledger, rank: int, step: Fused, mb: int,
                 chunk: int):
    """A fused step on a rank whose asynchronous collectives may take SMs from its compute
    (:mod:`sim.engine.interference`): compute parts slowed while they run; the time lost is
    exposed communication of their group (a ``slowed by`` span on the compute stream)."""
    st = ledger.stats[rank]
    ran, lost = yield from sharing.fused(rank, step)
    st.compute_ns += step.compute_ns
    for g, ns in step.comm_ns:
        st.exposed_comm_ns[g] += ns
    for g, ns in lost.items():
        st.exposed_comm_ns[g] += ns
    if ledger.spans is None:
        return
    for part, s0, s1 in ran:
        s_end = s0 + part.duration_ns
        if part.group is None:
            ledger.span(rank, "compute", s0, s_end, part.phase.value, part.layer, mb, chunk)
            if s1 > s_end:
                ledger.span(rank, "compute", s_end, s1, "comm_wait", "slowed by communication",
                            mb, chunk)
        else:
            ledger.span(rank, part.group.value, s0, s1, "comm", f"{part.layer}."
                        f"{part.phase.value}", mb, chunk, comm_args(part.comm, part.algorithm))

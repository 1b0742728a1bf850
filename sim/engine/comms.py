"""The engine's communication: rendezvous of group members, FIFO streams of asynchronous
collectives, and pipeline transfers between stages.

A collective starts when every simulated member of its group has reached it (keyed by group and
per-rank sequence number; members that disagree on its kind or size are an error). The waits
are recorded as dependencies for the critical path (:class:`~sim.engine.critical.Wait`).

Each part owns its state and is given what it shares with the rest of the engine: the SimPy
environment, the network, the :class:`~sim.engine.ledger.Ledger` and the
:class:`~sim.engine.ledger.Groups`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from sim.comm import CollKind, Comm, GroupKind
from sim.engine.interference import ComputeSharing
from sim.engine.jitter import Jitter
from sim.engine.ledger import Groups, Ledger
from sim.errors import SimulationStalled
from sim.network.base import CommRequest, Network


@dataclass(slots=True)
class Meeting:
    """A rendezvous in progress: how many simulated members are still to come, the event that
    lets them all go on, who arrived last and when (it started what follows), and for a
    collective what its members run (kind, bytes) — every member must agree."""

    remaining: int
    done: simpy.Event
    last_rank: int
    last_ns: int = 0
    kind: CollKind | None = None
    size_bytes: int = 0


GROUP_NAME = {g: g.value for g in GroupKind}  # a member's value without the enum property


class Waiting:
    """What a rank waits on in a collective, as the stall message words it (formatted only
    when one is written)."""

    __slots__ = ("comm", "members", "what")

    def __init__(self, comm: Comm, members: tuple[int, ...], what: str):
        self.comm, self.members, self.what = comm, members, what

    def __str__(self) -> str:
        c = self.comm
        return f"{c.kind.value} in {c.group.value} group {self.members} ({self.what})"


class Receiving:
    """A rank waiting for pipeline message ``key``, as the stall message words it."""

    __slots__ = ("key",)

    def __init__(self, key: tuple):
        self.key = key

    def __str__(self) -> str:
        _, kind, mb, vs = self.key
        return f"receive of {kind} microbatch {mb} for virtual stage {vs}"


class Rendezvous:
    """Collectives and barriers among the simulated members of a group."""

    def __init__(self, env: simpy.Environment, net: Network, groups: Groups, ledger: Ledger,
                 jitter: Jitter | None = None):
        self.env, self.net, self.groups, self.ledger = env, net, groups, ledger
        self.jitter = jitter
        self._meetings: dict[tuple, Meeting] = {}
        self._seq: dict[tuple[int, GroupKind], int] = {}
        self._requests: dict[int, dict[int, tuple[Comm, CommRequest]]] = {}

    def request(self, rank: int, comm: Comm, members: tuple[int, ...]) -> CommRequest:
        """The network request of ``comm`` in ``rank``'s group ``members`` (one object per
        rank and comm, reused: requests are immutable)."""
        mine = self._requests.get(rank)
        if mine is None:
            mine = self._requests[rank] = {}
        got = mine.get(id(comm))
        if got is None or got[0] is not comm:  # identity checked: an id may be reused
            got = mine[id(comm)] = (comm, CommRequest(comm.kind, comm.group, members,
                                                      comm.size_bytes))
        return got[1]

    def next_seq(self, rank: int, group: GroupKind) -> int:
        """The number of ``rank``'s next collective or barrier in its ``group`` group."""
        k = (rank, group)
        n = self._seq.get(k, 0)
        self._seq[k] = n + 1
        return n

    def _arrive(self, key: tuple, members: tuple[int, ...], rank: int) -> Meeting:
        m = self._meetings.get(key)
        if m is None:
            m = self._meetings[key] = Meeting(self.groups.sim_count(members), self.env.event(),
                                              rank)
        return m

    def collective(self, rank: int, comm: Comm, what: str, seq: int | None = None,
                   blocking: bool = True):
        """Rendezvous with the group's simulated members, then run ``comm`` on the network.

        Returns (result, cause): cause = (the rank that arrived last, when) — it started the
        collective. A blocking wait is recorded as a dependency of ``rank``."""
        env, ledger = self.env, self.ledger
        members = self.groups.of(comm.group, rank)
        if seq is None:
            seq = self.next_seq(rank, comm.group)
        if self.groups.sim_count(members) == 1:  # the only simulated member: no meeting
            m = None
            done = env.event()
            cause = (rank, env.now)
            ev = self.net.start(self.request(rank, comm, members))
            ev.callbacks.append(self._finisher(done, env.now, comm.group, members[0], seq))
        else:
            m = self._meet(rank, comm, members, what, seq)
            done = m.done
        ledger.waiting[rank] = Waiting(comm, members, what)
        t0 = env.now
        res = yield done
        if m is not None:
            cause = (m.last_rank, m.last_ns)
        if blocking and env.now > t0:
            ledger.wait(rank, t0, env.now, GROUP_NAME[comm.group], *cause)
        if comm.post_delay_ns:
            yield env.timeout(comm.post_delay_ns)
        ledger.waiting.pop(rank, None)
        return res, cause

    def _meet(self, rank: int, comm: Comm, members: tuple[int, ...], what: str,
              seq: int) -> Meeting:
        """``rank``'s arrival at collective ``seq`` of its group; the last to arrive starts it
        on the network."""
        env = self.env
        key = (comm.group, members[0], seq)
        m = self._meetings.get(key)
        if m is None:
            m = self._arrive(key, members, rank)
            m.kind, m.size_bytes = comm.kind, comm.size_bytes
        elif (m.kind, m.size_bytes) != (comm.kind, comm.size_bytes):
            assert m.kind is not None
            raise SimulationStalled(
                f"ranks {m.last_rank} and {rank} disagree on {comm.group.value} collective "
                f"#{seq} of group {members}: {m.kind.value} of {m.size_bytes} bytes vs "
                f"{comm.kind.value} of {comm.size_bytes} bytes ({what})")
        m.remaining -= 1
        m.last_rank, m.last_ns = rank, env.now  # the last to arrive starts it
        if m.remaining == 0:
            del self._meetings[key]
            ev = self.net.start(self.request(rank, comm, members))
            ev.callbacks.append(self._finisher(m.done, env.now, comm.group, members[0], seq))
        return m

    def _finisher(self, done: simpy.Event, t0: int, *what):
        """The network's completion callback: ``done`` succeeds then, or later by the transfer
        jitter of collective ``what`` (the same for every member)."""
        jitter, env = self.jitter, self.env

        def finish(e: simpy.Event) -> None:
            extra = jitter.transfer_extra_ns(env.now - t0, *what) if jitter else 0
            if extra:
                env.timeout(extra).callbacks.append(lambda _t: done.succeed(e.value))
            else:
                done.succeed(e.value)
        return finish

    def barrier(self, rank: int, group: GroupKind):
        """Wait until every simulated member of ``rank``'s ``group`` group arrives here."""
        env, ledger = self.env, self.ledger
        members = self.groups.of(group, rank)
        key = (group, members[0], "barrier", self.next_seq(rank, group))
        m = self._arrive(key, members, rank)
        m.remaining -= 1
        m.last_rank, m.last_ns = rank, env.now
        if m.remaining == 0:
            del self._meetings[key]
            m.done.succeed()
        t0 = env.now
        if not m.done.processed:
            ledger.waiting[rank] = f"its {group.value} peers {members} to start the same pass"
            yield m.done
            ledger.waiting.pop(rank, None)
        if env.now > t0:
            ledger.wait(rank, t0, env.now, group.value, m.last_rank, m.last_ns)


class AsyncStreams:
    """Per rank and group kind, a FIFO stream of non-blocking collectives."""

    def __init__(self, env: simpy.Environment, rdv: Rendezvous, ledger: Ledger,
                 sharing: ComputeSharing | None = None):
        self.env, self.rdv, self.ledger, self.sharing = env, rdv, ledger, sharing
        self._tail: dict[tuple[int, GroupKind], simpy.Process] = {}
        self._pending: dict[int, list[tuple[simpy.Process, GroupKind]]] = {
            r: [] for r in ledger.stats}
        # overlapped / prefetched comms (Comm.overlap, Comm.prefetch): their own FIFO stream
        # per (rank, group), and those not yet awaited, oldest first
        self._overlap_tail: dict[tuple[int, GroupKind], simpy.Process] = {}
        self._overlapped: dict[tuple[int, GroupKind], list[simpy.Process]] = {}

    def issue(self, rank: int, comm: Comm, label: str) -> simpy.Process:
        """Queue ``comm`` on ``rank``'s stream of its group kind; the rank goes on. Returns the
        process that ends when ``comm`` has completed."""
        key = (rank, comm.group)
        prev = self._tail.get(key)
        if self.sharing is not None:
            self.sharing.issued(rank)
        proc = self.env.process(self._run(rank, comm, prev, label,
                                          self.rdv.next_seq(rank, comm.group)))
        self._tail[key] = proc
        self._pending[rank].append((proc, comm.group))
        return proc

    def issue_overlap(self, rank: int, comm: Comm, label: str) -> None:
        """Start ``comm`` on the group's overlap stream (FIFO, separate from the gradient
        stream); :meth:`await_overlap` waits for it (end of the phase's compute, or a later
        phase's ``await_group``)."""
        key = (rank, comm.group)
        prev = self._overlap_tail.get(key)
        if self.sharing is not None:
            self.sharing.issued(rank)
        proc = self.env.process(self._run(rank, comm, prev, label,
                                          self.rdv.next_seq(rank, comm.group)))
        self._overlap_tail[key] = proc
        self._overlapped.setdefault(key, []).append(proc)

    def await_overlap(self, rank: int, group: GroupKind):
        """Wait for the oldest comm of :meth:`issue_overlap` in ``group`` not yet waited for
        (the time is exposed ``group`` comm; nothing outstanding: no wait)."""
        queue = self._overlapped.get((rank, group))
        if not queue:
            return
        yield from self.wait_for(rank, queue.pop(0), group,
                                 f"its overlapped {group.value} communication")

    def _run(self, rank: int, comm: Comm, prev: simpy.Process | None, label: str, seq: int):
        env = self.env
        if prev is not None and not prev.processed:
            yield prev
        t0 = env.now
        sharing = self.sharing
        if sharing is not None and len(self.rdv.groups.of(comm.group, rank)) == 1:
            sharing.end(rank, None)  # a group of one: no kernel runs (no interference)
            sharing = None
        if sharing is not None:  # its kernel is launched: its CTAs hold SMs (interference)
            members = self.rdv.groups.of(comm.group, rank)
            ctas = self.rdv.net.kernel_channels(
                CommRequest(comm.kind, comm.group, members, comm.size_bytes),
                sharing.intf.comm_sms)
            sharing.start(rank, comm.group, ctas)
            beside0 = sharing.beside_now(rank)
        res, cause = yield from self.rdv.collective(rank, comm, label, seq, blocking=False)
        if sharing is not None:
            extra = sharing.intf.comm_slowdown - 1.0
            if extra > 0:  # slowed for the compute time beside it
                beside = sharing.beside_now(rank) - beside0
                if beside > 0:
                    yield env.timeout(math.ceil(beside * extra))
            sharing.end(rank, comm.group, ctas)
        if self.ledger.spans is not None:
            self.ledger.span(rank, comm.group.value, t0, env.now, "comm", label, -1, -1,
                             comm_args(comm, res.algorithm if res else ""))
        return cause

    def wait_for(self, rank: int, proc: simpy.Process, group: GroupKind, what: str):
        """Wait until the issued comm ``proc`` has completed (exposed comm time of ``group``)."""
        if proc.processed:
            return
        env, ledger = self.env, self.ledger
        t0 = env.now
        ledger.waiting[rank] = what
        yield proc
        ledger.waiting.pop(rank, None)
        ledger.stats[rank].exposed_comm_ns[group] += env.now - t0
        ledger.wait(rank, t0, env.now, GROUP_NAME[group], *proc.value)
        if ledger.spans is not None:
            ledger.span(rank, "compute", t0, env.now, "comm_wait", f"wait {group.value}",
                        args=(("group", group.value),))

    def drain(self, rank: int):
        """Wait for every outstanding non-blocking comm of ``rank`` (exposed comm time)."""
        env, ledger = self.env, self.ledger
        st = ledger.stats[rank]
        for ev, group in self._pending[rank]:
            if not ev.processed:
                t0 = env.now
                ledger.waiting[rank] = f"its outstanding {group.value} gradient communication"
                yield ev
                st.exposed_comm_ns[group] += env.now - t0
                ledger.wait(rank, t0, env.now, group.value, *ev.value)
                ledger.span(rank, "compute", t0, env.now, "comm_wait", f"wait {group.value}",
                            args=(("group", group.value),))
        self._pending[rank].clear()
        ledger.waiting.pop(rank, None)


class PipeTransfers:
    """Asynchronous sends between pipeline stages of ``size_bytes`` each, and their receives.

    A message is keyed ``(receiver, "F" | "B", microbatch, virtual stage)``."""

    def __init__(self, env: simpy.Environment, net: Network, ledger: Ledger, size_bytes: int,
                 jitter: Jitter | None = None):
        self.env, self.net, self.ledger, self.size_bytes = env, net, ledger, size_bytes
        self.jitter = jitter
        self._msgs: dict[tuple, simpy.Event] = {}
        self._send_start: dict[tuple, tuple[int, int]] = {}  # key -> (send time, sender)

    def _msg(self, key: tuple) -> simpy.Event:
        ev = self._msgs.get(key)
        if ev is None:
            ev = self._msgs[key] = self.env.event()
        return ev

    def send(self, rank: int, dst: int, key: tuple, mb: int, chunk: int) -> None:
        """Start sending message ``key`` from ``rank`` to ``dst``; the sender goes on."""
        env, size = self.env, self.size_bytes
        now = env.now
        self._send_start[key] = (now, rank)
        target = self._msg(key)
        if size <= 0:
            target.succeed()
            return
        ev = self.net.start(CommRequest(CollKind.SENDRECV, GroupKind.PP, (rank, dst), size))

        def arrived(_ev: simpy.Event, t0: int = now) -> None:
            target.succeed()
            if self.ledger.spans is not None:
                self.ledger.span(rank, "PP", t0, env.now, "comm", f"{key[1]}{mb} → rank {dst}",
                                 mb, chunk, (("bytes", size), ("peer", dst)))

        if self.jitter is None:
            ev.callbacks.append(arrived)
            return
        def jittered(_ev: simpy.Event, t0: int = now) -> None:
            extra = self.jitter.transfer_extra_ns(env.now - t0, "pp", rank, *key)
            if extra:
                env.timeout(extra).callbacks.append(arrived)
            else:
                arrived(_ev)

        ev.callbacks.append(jittered)

    def recv(self, rank: int, key: tuple):
        """Wait for message ``key``: time before its send started is pipeline bubble, the rest
        exposed PP communication."""
        ev = self._msg(key)
        if ev.processed:
            del self._msgs[key]
            self._send_start.pop(key, None)
            return
        env, ledger = self.env, self.ledger
        st = ledger.stats[rank]
        t0 = env.now
        ledger.waiting[rank] = Receiving(key)
        yield ev
        del self._msgs[key]
        ledger.waiting.pop(rank, None)
        t1 = env.now
        ts, sender = self._send_start.pop(key)
        ledger.wait(rank, t0, t1, "PP", sender, ts)
        bubble = min(max(ts - t0, 0), t1 - t0)
        st.bubble_ns += bubble
        st.pipeline_wait_ns += bubble
        st.exposed_comm_ns[GroupKind.PP] += t1 - t0 - bubble
        if bubble and ledger.spans is not None:
            ledger.span(rank, "compute", t0, t0 + bubble, "bubble", "wait for other stage")
        if t1 - t0 - bubble and ledger.spans is not None:
            ledger.span(rank, "compute", t0 + bubble, t1, "recv_wait", "wait for PP transfer")

    def check_delivered(self) -> None:
        """Raise :class:`SimulationStalled` if a message was sent but never received."""
        lost = sorted(k for k, ev in self._msgs.items() if ev.triggered)
        if lost:
            dst, kind, mb, vs = lost[0]
            src = self._send_start.get(lost[0], (0, "?"))[1]
            raise SimulationStalled(
                f"{len(lost)} pipeline transfer(s) sent but never received, e.g. rank {src} "
                f"sent the {'activation' if kind == 'F' else 'gradient'} of microbatch {mb} "
                f"to rank {dst} (virtual stage {vs})")


def comm_args(comm: Comm | None, algorithm: str) -> tuple[tuple[str, object], ...]:
    """A span's arguments for a communication (op, group, bytes, blocking, algorithm)."""
    if comm is None:
        return ()
    out: tuple[tuple[str, object], ...] = (("op", comm.kind.value), ("group", comm.group.value),
                                           ("bytes", comm.size_bytes), ("blocking", comm.blocking))
    return out + ((("algorithm", algorithm),) if algorithm else ())

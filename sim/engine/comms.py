"""The engine's communication: rendezvous of group members, FIFO streams of asynchronous
collectives, and pipeline transfers between stages (a mixin of the engine in core.py).

A collective starts when every simulated member of its group has reached it (keyed by group and
per-rank sequence number; members that disagree on its kind or size are an error). The waits
are recorded as dependencies for the critical path: (wait start, wait end, group, the rank
whose arrival or send ended the wait, when it did).
"""

from __future__ import annotations

import simpy

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import SimulationStalled
from sim.network.base import CommRequest


class CommStreams:
    """Rendezvous, asynchronous streams and pipeline messages; state lives in the engine."""

    def msg(self, key: tuple) -> simpy.Event:
        ev = self.msgs.get(key)
        if ev is None:
            ev = self.msgs[key] = self.env.event()
        return ev

    def collective(self, rank: int, comm: Comm, what: str, seq: int | None = None,
                   blocking: bool = True):
        """Rendezvous with the group's simulated members, then run ``comm`` on the network.

        Returns (result, cause): cause = (the rank that arrived last, when) — it started the
        collective. A blocking wait is recorded as a dependency of ``rank``."""
        members = self.group(comm.group, rank)
        if seq is None:
            seq = self.next_seq(rank, comm.group)
        key = (comm.group, members[0], seq)
        entry = self.rdv.get(key)
        if entry is None:
            entry = self.rdv[key] = [self.sim_count(members), self.env.event(), rank, 0,
                                     comm.kind, comm.size_bytes]
        elif (entry[4], entry[5]) != (comm.kind, comm.size_bytes):
            raise SimulationStalled(
                f"ranks {entry[2]} and {rank} disagree on {comm.group.value} collective #{seq} "
                f"of group {members}: {entry[4].value} of {entry[5]} bytes vs "
                f"{comm.kind.value} of {comm.size_bytes} bytes ({what})")
        entry[0] -= 1
        entry[2], entry[3] = rank, self.env.now  # the last to arrive starts it
        if entry[0] == 0:
            del self.rdv[key]
            done = entry[1]
            ev = self.net.start(CommRequest(comm.kind, comm.group, members, comm.size_bytes))
            ev.callbacks.append(lambda e: done.succeed(e.value))
        self.waiting[rank] = f"{comm.kind.value} in {comm.group.value} group {members} ({what})"
        t0 = self.env.now
        res = yield entry[1]
        cause = (entry[2], entry[3])
        if blocking and self.env.now > t0:
            self.deps[rank].append((t0, self.env.now, comm.group.value, *cause))
        if comm.post_delay_ns:
            yield self.env.timeout(comm.post_delay_ns)
        self.waiting.pop(rank, None)
        return res, cause

    def barrier(self, rank: int, group: GroupKind):
        """Wait until every simulated member of ``rank``'s ``group`` group arrives here."""
        members = self.group(group, rank)
        key = (group, members[0], "barrier", self.next_seq(rank, group))
        entry = self.rdv.get(key)
        if entry is None:
            entry = self.rdv[key] = [self.sim_count(members), self.env.event(), rank, 0]
        entry[0] -= 1
        entry[2], entry[3] = rank, self.env.now
        if entry[0] == 0:
            del self.rdv[key]
            entry[1].succeed()
        t0 = self.env.now
        if not entry[1].processed:
            self.waiting[rank] = f"its {group.value} peers {members} to start the same pass"
            yield entry[1]
            self.waiting.pop(rank, None)
        if self.env.now > t0:
            self.deps[rank].append((t0, self.env.now, group.value, entry[2], entry[3]))

    def sim_count(self, members: tuple[int, ...]) -> int:
        """How many members of a group are simulated (they all must reach its collectives)."""
        need = self._sim_count.get(members)
        if need is None:
            need = self._sim_count[members] = sum(1 for r in members if r in self.sim_set)
        return need

    def next_seq(self, rank: int, group: GroupKind) -> int:
        k = (rank, group)
        n = self.seq.get(k, 0)
        self.seq[k] = n + 1
        return n

    def issue_async(self, rank: int, comm: Comm, label: str) -> None:
        key = (rank, comm.group)
        prev = self.async_tail.get(key)
        proc = self.env.process(self.async_proc(rank, comm, prev, label,
                                                self.next_seq(rank, comm.group)))
        self.async_tail[key] = proc
        self.pending[rank].append((proc, comm.group))

    def async_proc(self, rank: int, comm: Comm, prev, label: str, seq: int):
        if prev is not None and not prev.processed:
            yield prev
        t0 = self.env.now
        res, cause = yield from self.collective(rank, comm, label, seq, blocking=False)
        self.span(rank, comm.group.value, t0, self.env.now, "comm", label, -1, -1,
                  comm_args(comm, res.algorithm if res else ""))
        return cause

    def drain(self, rank: int):
        """Wait for every outstanding non-blocking comm of ``rank`` (exposed comm time)."""
        st = self.stats[rank]
        for ev, group in self.pending[rank]:
            if not ev.processed:
                t0 = self.env.now
                self.waiting[rank] = f"its outstanding {group.value} gradient communication"
                yield ev
                st.exposed_comm_ns[group] += self.env.now - t0
                self.deps[rank].append((t0, self.env.now, group.value, *ev.value))
                self.span(rank, "compute", t0, self.env.now, "comm_wait", f"wait {group.value}",
                          args=(("group", group.value),))
        self.pending[rank].clear()
        self.waiting.pop(rank, None)

    def send(self, rank: int, dst: int, key: tuple, mb: int, chunk: int) -> None:
        now = self.env.now
        self.send_start[key] = (now, rank)
        size = self.prog.pp_bytes
        target = self.msg(key)
        if size <= 0:
            target.succeed()
            return
        ev = self.net.start(CommRequest(CollKind.SENDRECV, GroupKind.PP, (rank, dst), size))

        def arrived(e, t0=now):
            target.succeed()
            self.span(rank, "PP", t0, self.env.now, "comm", f"{key[1]}{mb} → rank {dst}", mb,
                      chunk, (("bytes", size), ("peer", dst)))

        ev.callbacks.append(arrived)

    def recv(self, rank: int, key: tuple):
        ev = self.msg(key)
        if ev.processed:
            del self.msgs[key]
            self.send_start.pop(key, None)
            return
        env, st = self.env, self.stats[rank]
        t0 = env.now
        self.waiting[rank] = f"receive of {key[1]} microbatch {key[2]} for virtual stage {key[3]}"
        yield ev
        del self.msgs[key]
        self.waiting.pop(rank, None)
        t1 = env.now
        ts, sender = self.send_start.pop(key)
        self.deps[rank].append((t0, t1, "PP", sender, ts))
        bubble = min(max(ts - t0, 0), t1 - t0)
        st.bubble_ns += bubble
        st.exposed_comm_ns[GroupKind.PP] += t1 - t0 - bubble
        if bubble:
            self.span(rank, "compute", t0, t0 + bubble, "bubble", "wait for other stage")
        if t1 - t0 - bubble:
            self.span(rank, "compute", t0 + bubble, t1, "recv_wait", "wait for PP transfer")


def comm_args(comm: Comm | None, algorithm: str) -> tuple[tuple[str, object], ...]:
    if comm is None:
        return ()
    out: tuple[tuple[str, object], ...] = (("op", comm.kind.value), ("group", comm.group.value),
                                           ("bytes", comm.size_bytes), ("blocking", comm.blocking))
    return out + ((("algorithm", algorithm),) if algorithm else ())

"""Fluid flows with max-min fair rates (progressive filling), advanced in integer nanoseconds.

A :class:`Flow` is one coflow (a ring/tree channel or a point-to-point transfer), possibly
standing for several identical copies, with an optional rate cap ``maxrate`` (bytes/ns). It
*loads* links with integer multiplicities (how many of its edges — over all its copies — cross
each link) and is *limited* by the links of its own path. All its edges move at the flow's rate
(bytes/ns = GB/s); each carries ``rem`` bytes.

Rates are the max-min fair allocation, computed by progressive filling: every unfrozen flow's
rate rises together; a link saturates at level ``(capacity − load of frozen flows) / (sum of
multiplicities of unfrozen flows)``; the flows limited by the first saturated link freeze at
that level; repeat. Loads are accumulated as *integer multiplicity × level* per round, so that a
flow of multiplicity K and K separate identical flows give bit-identical rates (symmetric and
per-rank simulation agree exactly).

Time: a flow's bytes are advanced only when its rate changes (``rem −= old_rate × elapsed``);
it completes at ``t + ceil(rem / rate)`` ns. Recomputation touches only the connected set of
flows that share links with the flows that started or ended.
"""

from __future__ import annotations

import heapq
import math


class Flow:
    __slots__ = ("path", "loads", "rem", "maxrate", "rate", "t", "fin", "ver", "owner", "bneck",
                 "strict", "solo", "sig")

    def __init__(self, path: tuple[int, ...], loads: tuple[tuple[int, int], ...], rem: float,
                 owner: object = None, maxrate: float = math.inf,
                 strict: frozenset[int] | None = None):
        self.path = path
        self.loads = loads
        self.rem = rem
        self.maxrate = maxrate
        self.rate = 0.0
        self.t = 0
        self.fin = -1
        self.ver = 0
        self.owner = owner
        self.bneck = -1  # the link that limits the rate (-1: the flow's own cap), after a fill
        # a class of transfers (sim/network/alltoall.py): the links all of them cross; its
        # rate is each transfer's own only when one of these (or the cap) limits it
        self.strict = strict
        # a list shared by flows of equal path, loads and cap on one solver's capacities: its
        # rate and bottleneck alone ([] until the first :func:`_alone_rate`); None: not shared
        self.solo: list | None = None
        # what a fill reads of it (path, loads, cap) as a small integer, set by the solver on
        # its first fill with other flows (-1: not yet)
        self.sig = -1


def inexact(flows: list[Flow]) -> int:
    """How many class flows a fill limited by a link only some of their transfers cross."""
    return sum(1 for f in flows if f.strict is not None and f.bneck >= 0
               and f.bneck not in f.strict)


def ceil_ns(x: float) -> int:
    """Whole nanoseconds needed for ``x`` ns of transfer (tolerant to float noise)."""
    return max(0, math.ceil(x - 1e-6))


def waterfill(flows: list[Flow], cap: list[float]) -> list[float]:
    """Max-min fair rates (bytes/ns) of ``flows`` given link capacities ``cap`` (bytes/ns)."""
    return [_alone_rate(flows[0], cap)] if len(flows) == 1 else _fill(flows, cap)


def _fill(flows: list[Flow], cap: list[float]) -> list[float]:
    remcap, nunf = _link_totals(flows, cap)
    rates = [0.0] * len(flows)
    unfrozen = list(range(len(flows)))
    while unfrozen:
        best = math.inf
        for i in unfrozen:
            if flows[i].maxrate < best:
                best = flows[i].maxrate
            for link in flows[i].path:
                n = nunf[link]
                if n > 0:
                    s = remcap[link] / n
                    if s < best:
                        best = s
        frozen = []
        rest = []
        for i in unfrozen:
            if flows[i].maxrate <= best:
                frozen.append(i)
                flows[i].bneck = -1
                continue
            for link in flows[i].path:
                n = nunf[link]
                if n > 0 and remcap[link] / n <= best:
                    frozen.append(i)
                    flows[i].bneck = link
                    break
            else:
                rest.append(i)
        count: dict[int, int] = {}
        for i in frozen:
            rates[i] = best
            for link, m in flows[i].loads:
                count[link] = count.get(link, 0) + m
        for link, c in count.items():
            remcap[link] -= c * best
            nunf[link] -= c
        unfrozen = rest
    return rates


def _link_totals(flows: list[Flow], cap: list[float]
                 ) -> tuple[dict[int, float], dict[int, int]]:
    """Per link the flows load: (its capacity, the sum of their multiplicities)."""
    remcap: dict[int, float] = {}
    nunf: dict[int, int] = {}
    for f in flows:
        for link, m in f.loads:
            if link not in remcap:
                remcap[link] = cap[link]
                nunf[link] = m
            else:
                nunf[link] += m
    return remcap, nunf


def _alone_rate(f: Flow, cap: list[float]) -> float:
    """:func:`waterfill` of one flow (the common case when every rank is simulated): the same
    operations, without the bookkeeping of several flows; remembered in ``f.solo``."""
    solo = f.solo
    if solo:
        f.bneck = solo[1]
        return solo[0]
    mult: dict[int, int] = {}
    for link, m in f.loads:
        mult[link] = mult.get(link, 0) + m
    best = f.maxrate
    for link in f.path:
        n = mult[link]
        if n > 0:
            s = cap[link] / n
            if s < best:
                best = s
    f.bneck = -1
    if f.maxrate > best:
        for link in f.path:
            n = mult[link]
            if n > 0 and cap[link] / n <= best:
                f.bneck = link
                break
    if solo is not None:
        solo += (best, f.bneck)
    return best


_FILL_MEMO_FLOWS = 1_000_000  # at most this many flows over the remembered fills (~50 MB)


class FluidSolver:
    """Active flows, their rates, and the heap of their completion times."""

    def __init__(self, cap: list[float]):
        self.cap = cap
        # link -> its active flows (in the order they were added); a link's dict is kept
        # when its last flow ends (most flows end alone: no dict made and freed per flow)
        self.users: dict[int, dict[Flow, int]] = {}
        self.heap: list[tuple[int, int, int, Flow]] = []
        self._seq = 0
        self.strict_flows = False  # set when class flows are added
        self.inexact = 0  # fills that limited a class flow by a link not all its transfers use
        # fills remembered by the signatures of their flows in order: a fill reads only the
        # flows' paths, loads and caps and the fixed capacities, so a repeated set of flows
        # (every microbatch of a steady pipeline) gets the same rates and bottlenecks
        self._sigs: dict[tuple, int] = {}
        self._fills: dict[tuple[int, ...], tuple[list[float], list[int]]] = {}
        self._filled = 0  # flows over all remembered fills (bounds the memory)

    def add(self, flows: list[Flow], now: int) -> None:
        users = self.users
        alone = len(flows) == 1  # one flow, and (see below) no other on its links
        for f in flows:
            f.t = now
            for link, m in f.loads:
                u = users.get(link)
                if u is None:
                    users[link] = {f: m}
                else:
                    if u:
                        alone = False
                    u[f] = m
        self._refill(flows if alone else self._component(flows), now)

    def remove(self, flows: list[Flow], now: int) -> None:
        users = self.users
        touched: list[Flow] = []
        gone = set(flows)
        # with class flows (many shared links), each link's users are visited once
        links: set[int] | None = set() if self.strict_flows else None
        for f in flows:
            f.ver += 1
            for link, _ in f.loads:
                u = users[link]
                del u[f]
                if not u:  # kept, empty, for the next flow on the link
                    continue
                if links is None:
                    touched.extend(g for g in u if g not in gone)
                elif link not in links:
                    links.add(link)
                    touched.extend(g for g in u if g not in gone)
        if touched:
            self._refill(self._component(touched), now)

    def _component(self, seeds: list[Flow]) -> list[Flow]:
        """The flows connected to ``seeds`` by shared links, in depth-first order (the order
        sets the tie-break of equal finish times, so it is kept as it is for ordinary flows;
        with class flows each link is expanded once)."""
        users = self.users
        if len(seeds) == 1:  # a flow alone on its links: what the search below finds
            for link, _ in seeds[0].loads:
                if len(users[link]) != 1:
                    break
            else:
                return list(seeds)
        return _search(users, list(seeds), set() if self.strict_flows else None)

    def _rates(self, comp: list[Flow]) -> list[float]:
        """:func:`waterfill` of ``comp``, remembered (with the bottlenecks it sets)."""
        if len(comp) == 1:
            return [_alone_rate(comp[0], self.cap)]
        sigs = self._sigs
        ids = []
        for f in comp:
            sig = f.sig
            if sig < 0:  # first fill with other flows
                sig = f.sig = sigs.setdefault((f.path, f.loads, f.maxrate), len(sigs))
            ids.append(sig)
        key = tuple(ids)
        got = self._fills.get(key)
        if got is not None:
            for f, b in zip(comp, got[1], strict=True):
                f.bneck = b
            return got[0]
        rates = _fill(comp, self.cap)
        if self._filled > _FILL_MEMO_FLOWS:
            self._fills.clear()
            self._filled = 0
        self._fills[key] = (rates, [f.bneck for f in comp])
        self._filled += len(comp)
        return rates

    def _refill(self, comp: list[Flow], now: int) -> None:
        """New rates for the connected flows ``comp`` (:meth:`_component`)."""
        rates = self._rates(comp)
        if self.strict_flows:
            self.inexact += inexact(comp)
        heap = self.heap
        for f, r in zip(comp, rates, strict=True):
            if r != f.rate:
                set_rate(f, r, now)
                self._seq += 1
                heapq.heappush(heap, (f.fin, self._seq, f.ver, f))

    def next_time(self) -> int | None:
        heap = self.heap
        while heap:
            fin, _, ver, f = heap[0]
            if ver == f.ver and f.fin == fin:
                return fin
            heapq.heappop(heap)
        return None

    def pop_due(self, now: int) -> list[Flow]:
        heap = self.heap
        out = []
        while heap and heap[0][0] <= now:
            fin, _, ver, f = heapq.heappop(heap)
            if ver == f.ver and f.fin == fin:
                out.append(f)
        return out


def _search(users: dict[int, dict[Flow, int]], stack: list[Flow],
            claimed: set[int] | None = None) -> list[Flow]:
    """Depth-first search from ``stack`` (popped last first) over shared links: the flows in
    the order they are reached. With ``claimed`` (class flows, which share many links) each
    link is expanded once."""
    seen: dict[Flow, None] = {}
    pop = stack.pop
    push = stack.append
    while stack:
        f = pop()
        if f in seen:
            continue
        seen[f] = None
        for link, _ in f.loads:
            if claimed is not None:
                if link in claimed:
                    continue
                claimed.add(link)
            for g in users[link]:
                if g not in seen:
                    push(g)
    return list(seen)


def set_rate(f: Flow, rate: float, now: int) -> None:
    """Advance ``f`` to ``now`` at its old rate, then give it ``rate`` and a new finish time."""
    if f.rate > 0.0 and now > f.t:
        f.rem -= f.rate * (now - f.t)
    f.t = now
    f.rate = rate
    f.ver += 1
    f.fin = now + ceil_ns(f.rem / rate) if f.rem > 0.0 else now


def run_alone(flows: list[Flow], cap: list[float], memo: dict | None = None,
              flags: list[int] | None = None) -> int:
    """Duration (ns) until the last of ``flows`` completes when nothing else runs.

    Mirrors :class:`FluidSolver` exactly (same arithmetic), without SimPy; ``memo`` caches the
    rates per set of still-active flows (they do not depend on sizes). ``flags`` collects the
    :func:`inexact` count of every fill.
    """
    active = list(range(len(flows)))
    now = 0
    while active:
        key = tuple(active)
        got = memo.get(key) if memo is not None else None
        if got is None:
            sub = [flows[i] for i in active]
            got = (waterfill(sub, cap), inexact(sub))
            if memo is not None:
                memo[key] = got
        rates, bad = got
        if flags is not None:
            flags.append(bad)
        for i, r in zip(active, rates, strict=True):
            f = flows[i]
            if r != f.rate:
                set_rate(f, r, now)
        now = min(flows[i].fin for i in active)
        active = [i for i in active if flows[i].fin > now]
    return now

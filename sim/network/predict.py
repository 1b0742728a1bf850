"""``simrun collective``: an nccl-tests-style predictor of collective time and bandwidth.

Example: ``simrun collective --topo topologies/dgx-a100-1024.yaml --op allreduce --gpus 16
--sizes 8:8G`` prints, per message size, the predicted time, algbw and busbw (nccl-tests'
definitions: algbw = size / time; busbw = algbw × 2(n−1)/n for all-reduce, × (n−1)/n for
all-gather / reduce-scatter / all-to-all, × 1 for broadcast and send/recv) and the algorithm
and protocol chosen. Sizes follow nccl-tests: the whole buffer for all-reduce / broadcast /
all-to-all, the full output of all-gather, the full input of reduce-scatter, the message of
each send. ``sendrecv`` runs nccl-tests' pattern: every rank sends to the next and receives from
the previous at the same time (over the flow model, so the transfers share links).
The GPUs are ranks 0 … N−1 in placement order (GPU r on node r // GPUs-per-node).
Times are what nccl-tests measures: collectives launched back to back on one stream, so each
one's host launch overhead (the topology's ``launch_overhead_ns``, which simulations charge
per collective) is hidden behind the previous collective and not counted.
"""

from __future__ import annotations

import simpy

from sim.comm import CollKind, GroupKind
from sim.errors import UsageError
from sim.limits import INT64_MAX, parse_int
from sim.network.base import CommRequest, nccl_busbw_factor
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses

OPS = {
    "allreduce": CollKind.ALLREDUCE,
    "allgather": CollKind.ALLGATHER,
    "reducescatter": CollKind.REDUCESCATTER,
    "alltoall": CollKind.ALLTOALL,
    "broadcast": CollKind.BROADCAST,
    "sendrecv": CollKind.SENDRECV,
}
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
ROW_KEYS = ("size_bytes", "time_s", "algbw_GBps", "busbw_GBps", "algorithm")


def parse_size(text: str) -> int:
    """``8``, ``64K``, ``16M``, ``8G`` (binary suffixes: 2^10, 2^20, 2^30 bytes)."""
    t = text.strip().upper().removesuffix("B")
    suffix = t[-1:] if t[-1:] in ("K", "M", "G") else ""
    num = t[: len(t) - len(suffix)]
    value = parse_int(num)
    if value is None:
        raise UsageError(f"bad size {text!r} (expected e.g. 8, 64K, 16M, 8G)", field="sizes")
    if value * _SUFFIX[suffix] > INT64_MAX:  # as in workload files
        raise UsageError(f"size {text!r} exceeds 2^63−1 bytes", field="sizes")
    return value * _SUFFIX[suffix]


def parse_sizes(text: str) -> list[int]:
    """``A:B``: A, 2A, 4A, … up to B inclusive (nccl-tests ``-b A -e B -f 2``); ``A``: one size."""
    lo_s, sep, hi_s = text.partition(":")
    lo = parse_size(lo_s)
    hi = parse_size(hi_s) if sep else lo
    if lo < 1 or hi < lo:
        raise UsageError(f"sizes {text!r}: need 1 ≤ A ≤ B in A:B", field="sizes")
    out = []
    s = lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def _sendrecv_ns(net, n: int, size: int) -> tuple[int, str]:
    """nccl-tests sendrecv: rank r sends ``size`` bytes to r+1 (mod n), all at once."""
    env = simpy.Environment()
    pl = Placement(1, n, 1)
    net.bind(env, pl, RankClasses.per_rank(pl))
    out: list[int] = []
    algo = ""

    def one(r: int):
        nonlocal algo
        res = yield net.start(CommRequest(CollKind.SENDRECV, GroupKind.PP, (r, (r + 1) % n),
                                          size))
        algo = res.algorithm
        out.append(env.now)

    for r in range(n):
        env.process(one(r))
    env.run()
    return max(out), algo


def predict_rows(op: str, gpus: int, sizes: list[int], net) -> list[dict]:
    """One row per size: ``size_bytes``, ``time_s``, ``algbw_GBps``, ``busbw_GBps``,
    ``algorithm``."""
    kind = OPS[op]
    ranks = tuple(range(gpus))
    launch_ns = getattr(net, "launch_ns", 0)  # hidden in back-to-back runs (module docstring)
    rows = []
    for s in sizes:
        if kind is CollKind.SENDRECV:
            t_ns, algo = _sendrecv_ns(net, gpus, s)
        else:
            res = net.isolated(CommRequest(kind, GroupKind.DP, ranks, s))
            t_ns, algo = res.duration_ns, res.algorithm
        t = max(t_ns - launch_ns, 1) * 1e-9
        algbw = s / t / 1e9
        rows.append({"size_bytes": s, "time_s": t, "algbw_GBps": algbw,
                     "busbw_GBps": algbw * nccl_busbw_factor(kind, gpus), "algorithm": algo})
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'size_bytes':>14} {'time_us':>13} {'algbw_GBps':>11} {'busbw_GBps':>11}  "
             "algorithm"]
    for r in rows:
        lines.append(f"{r['size_bytes']:>14d} {r['time_s'] * 1e6:>13.2f} {r['algbw_GBps']:>11.2f} "
                     f"{r['busbw_GBps']:>11.2f}  {r['algorithm']}")
    return "\n".join(lines) + "\n"


def header_lines(topo, op: str, gpus: int, net) -> list[str]:
    """The ``#`` lines above the table: what was predicted, on what, and how busbw is made."""
    nodes = -(-gpus // topo.gpus_per_node)
    head = [
        f"# simrun collective: {op} over {gpus} GPUs ({nodes} node{'s' if nodes > 1 else ''}"
        f" of {topo.gpus_per_node}) on {topo.name} ({topo.path})",
        f"# busbw = algbw × {nccl_busbw_factor(OPS[op], gpus):.4g} (nccl-tests); time in µs, "
        "bandwidth in GB/s (1e9 bytes/s); sizes in bytes",
        f"# time of back-to-back collectives as nccl-tests measures it: the "
        f"{getattr(net, 'launch_ns', 0) / 1000:g} µs launch overhead per collective is hidden "
        "behind the previous one and not counted",
    ]
    return head + [f"# {line}" for line in net.describe()[1:10] if not line.startswith("chosen")]

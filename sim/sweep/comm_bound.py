"""A lower bound (ns) on the time of one blocking collective, from bytes and link capacities
only: the part of :mod:`sim.sweep.bound`'s bound that counts communication.

Whatever algorithm, protocol and routing the network model takes (:mod:`sim.network`), every
byte a GPU sends leaves it on one of its own links and every byte it receives arrives on one;
the flow model never runs a link above its capacity (max-min fair sharing, rates capped by
the capacities in GB/s = bytes/ns, :mod:`sim.network.fluid`), and protocol efficiencies,
latencies, the pipeline ramp and contention only lengthen a transfer. So a collective that
makes some GPU send or receive ``B`` bytes takes at least ``B / C`` ns, ``C`` the sum of the
capacities of every link a GPU of the topology has (its NVSwitch port, its xGMI links, its
PCIe link; :func:`gpu_link_capacity`).

Bytes each member of a group of ``t`` must move, by kind, for any algorithm (sizes as NCCL
and nccl-tests count them: the whole buffer ``S``):

- all-gather: each receives the other members' shards, ``(t−1)/t · S``;
- reduce-scatter: each sends its contributions to the other members' shards, ``(t−1)/t · S``
  (reduced in the network or not, each of those elements leaves it at least once);
- all-reduce: likewise ``(t−1)/t · S`` (a weaker bound than the ``S`` it needs for t = 2);
- all-to-all: each sends ``(t−1)/t · S`` to the others.

Other kinds (point-to-point, broadcast) count 0. Where the topology calibrates collective
times by size (``collectives.time_curves``: measured factors that may shorten them) no bound
is given (:func:`comm_bound` returns ``None``). ``tests/test_sweep_bound.py`` checks the bound
against every candidate algorithm and protocol the tuner costs on the shipped topologies.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.comm import CollKind, Comm, GroupKind

_MOVED = (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLREDUCE, CollKind.ALLTOALL)


def gpu_link_capacity(topology) -> float:
    """GB/s: the sum of the capacities of all links of one GPU in one direction (NVSwitch
    port, every xGMI link, PCIe), as :class:`sim.topology.cluster.Cluster` builds them."""
    node = topology.node
    cap = 0.0
    if node.nvlink is not None:
        cap += node.nvlink.gpu_bandwidth_GBps
    if node.xgmi is not None:
        cap += (topology.gpus_per_node - 1) * node.xgmi.link_GBps
    if node.pcie is not None:
        cap += node.pcie.bandwidth_GBps * node.pcie.efficiency
    return cap


def moved_bytes(kind: CollKind, size_bytes: int, t: int) -> int:
    """Bytes some member of a ``t``-member group must send or receive (see the module)."""
    if t <= 1 or kind not in _MOVED:
        return 0
    return (t - 1) * size_bytes // t


def group_sizes(program) -> dict[GroupKind, int]:
    """Members of each group kind of ``program``'s layout (those of rank 0's groups: every
    group of a kind has as many)."""
    from sim.parallel.placement import Placement

    p = program
    pl = Placement(p.tp, p.dp, p.pp, p.ep, cp=p.cp, etp=p.etp)
    return {g: len(pl.group(g, 0)) for g in GroupKind}


def comm_bound(topology, group_sizes: dict[GroupKind, int]
               ) -> Callable[[Comm], int] | None:
    """``comm → ns``: the lower bound of a blocking ``comm`` in a layout whose groups have
    ``group_sizes`` members, on ``topology``; ``None`` where no bound is given."""
    if topology.collectives.time_curves:
        return None
    cap = gpu_link_capacity(topology)
    if cap <= 0:
        return None

    def bound(comm: Comm) -> int:
        moved = moved_bytes(comm.kind, comm.size_bytes, group_sizes.get(comm.group, 1))
        return int(moved // cap) + comm.post_delay_ns

    return bound

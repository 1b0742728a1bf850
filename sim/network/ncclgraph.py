"""NCCL's communication graph as the plans need it: the double binary tree over nodes and the
number of separately routed flows a channel's traffic through one NIC becomes (channels per
NIC × queue pairs per connection) under ECMP hashing. Sources: NVIDIA/nccl v2.30.7
(src/graph/trees.cc, src/graph/search.cc, src/transport/net_ib/connect.cc).
"""

from __future__ import annotations

from sim.topology.cluster import Cluster


def btree_parent(nranks: int, rank: int) -> int:
    """Parent of ``rank`` in NCCL's binary tree over ``nranks`` (-1: the root), as
    ``ncclGetBtree`` builds it (NCCL v2.30.7 src/graph/trees.cc): the parent flips the lowest
    set bit and sets the next one, ``(rank ^ bit) | (bit << 1)``, or only clears it when that
    is out of range."""
    if rank == 0:
        return -1
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return rank ^ bit if up >= nranks else up


def dtree_edges(nranks: int, tree: int) -> list[tuple[int, int]]:
    """(child, parent) node positions of tree 0 or 1 of NCCL's double binary tree
    (``ncclGetDtree``, trees.cc): tree 1 is the mirror image of tree 0 when ``nranks`` is
    even, tree 0 shifted by one rank when it is odd."""
    out = []
    for r in range(nranks):
        if tree == 0:
            p = btree_parent(nranks, r)
        elif nranks % 2 == 0:
            q = btree_parent(nranks, nranks - 1 - r)
            p = -1 if q < 0 else nranks - 1 - q
        else:
            q = btree_parent(nranks, (r - 1) % nranks)
            p = -1 if q < 0 else (q + 1) % nranks
        if p >= 0:
            out.append((r, p))
    return out


# NCCL doubles the rings its topology search found when one carries at least this many GB/s
# (ncclTopoDupChannels, NCCL v2.30.7 src/graph/search.cc:1036-1049)
DUP_CHANNELS_MIN_GBPS = 25.0


def flows_per_rail(cl: Cluster) -> int:
    """Separately routed flows a ring or tree channel's traffic through one NIC is split into
    under ECMP hashing: NCCL's channels per NIC × queue pairs per connection. NCCL's search
    finds one ring per NIC at the NIC's rate and duplicates the rings when that rate is ≥ 25
    GB/s (:data:`DUP_CHANNELS_MIN_GBPS`: 2 channels per NDR NIC, 1 per HDR NIC); every channel
    has its own connection, and a connection spreads its data over NCCL_IB_QPS_PER_CONNECTION
    queue pairs (``fabric.qps_per_connection``; NCCL's default 1, src/transport/net_ib/
    connect.cc:60), each a flow of its own to an ECMP hash (RoCE: its own UDP source port).
    1 for the other routings: D-mod-K routes by destination alone and spreading routings
    spread every flow, so the split changes no load."""
    f = cl.topo.fabric
    if cl.routing != "ecmp" or f is None or not cl.nics:
        return 1
    dup = 2 if cl.topo.node.nics.bandwidth_GBps >= DUP_CHANNELS_MIN_GBPS else 1
    return dup * f.qps_per_connection

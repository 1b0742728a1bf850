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


# NCCL's search speeds across nodes, GB/s per channel, by compute capability (×10) of the
# GPUs (speedArrayInter, sm90SpeedArrayInter, sm100SpeedArrayInter: v2.30.7
# src/graph/search.cc:1052-1066).
SPEEDS_INTER = {
    80: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4,
         1.2, 0.24, 0.12),
    90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
         0.24, 0.12),
    100: (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
          3.0, 2.4, 1.2, 0.24, 0.12),
}
# The ring search's channel limit, MAXCHANNELS / 2 (init.cc:1177; MAXCHANNELS 64, device.h:91).
MAX_RING_CHANNELS = 32


def dup_channels(cc: int, channels: int, bw: float) -> tuple[int, float]:
    """``ncclTopoDupChannels`` (search.cc:1036-1049) on a graph of ``channels`` channels of
    ``bw`` GB/s found by the search: doubled (at most :data:`MAX_RING_CHANNELS`), each carrying
    ``bw / 2``, when ``bw ≥ 25`` unless the GPUs are newer than Ampere (cc > 80) with
    ``bw < 50`` and more than 4 channels."""
    if bw < DUP_CHANNELS_MIN_GBPS or (cc > 80 and bw < 50.0 and channels > 4):
        return channels, bw
    dup = min(channels * 2, MAX_RING_CHANNELS)
    return dup, bw / -(-dup // channels)


def tree_graph(cc: int, rails: int, speed: float, intra_GBps: float
               ) -> tuple[int, float, float]:
    """(nChannels, bwIntra, bwInter) of NCCL's tree graph across nodes whose ranks reach
    ``rails`` NICs at ``speed`` GB/s each (one NIC's rate through NCCL: the topology's NIC line
    rate × efficiency, NCCL's 24 for HDR, 48 for NDR) with ``intra_GBps`` of NVLink (or PCIe)
    per GPU, as NCCL v2.30.7 derives it:

    - the ring search finds one channel per NIC at ``speed`` (a NIC carries one channel of
      that rate, search.cc ``ncclTopoSearchRecNet`` subtracting ``bw`` from the NIC), at most
      :data:`MAX_RING_CHANNELS`, then :func:`dup_channels`;
    - the tree search runs with exactly the ring's channel count (init.cc:1184-1185) and the
      ring's per-channel rate across nodes (bwInter);
    - its second pass raises bwIntra through the speed table while bwIntra < 2·bwInter and
      the channels fit (search.cc:1259-1283, "increase bwIntra for trees (2 nodes or
      collnet)"); assumed here to fit while nChannels × bwIntra ≤ ``intra_GBps`` (every
      channel's chain crossing every GPU's links once; NCCL's search may fit one step more by
      ending chains on different GPUs).
    """
    channels, bw = dup_channels(cc, min(rails, MAX_RING_CHANNELS), speed)
    speeds = SPEEDS_INTER[cc]
    idx = next((i for i, s in enumerate(speeds) if s <= bw), len(speeds) - 1)
    intra = bw
    if speeds[idx] == bw:
        while idx > 0 and intra < 2 * bw and channels * speeds[idx - 1] <= intra_GBps:
            idx -= 1
            intra = speeds[idx]
    return channels, intra, bw

"""In-network reduction: NVLS (NVLink SHARP in a node's NVSwitches) and SHARP / CollNet (in
the fabric's switches), NCCL's ``NVLS`` and ``CollNetDirect`` all-reduce algorithms.

A topology declares them: ``node.nvlink.nvls: true`` (NVSwitch gen3, H100 and newer) and
``fabric.sharp: true`` (InfiniBand switches with SHARP, e.g. Quantum). ``auto`` takes them when
they are cheaper; NCCL's switches (``--nccl-nvls-enable``, ``--nccl-collnet-enable``,
``--nccl-algo``) turn them off or on as in NCCL (NVLS on by default where supported, CollNet off
by default: NCCL_COLLNET_ENABLE=0).

- ``nvls`` (AllReduce inside one node): h = min(n, 32) heads (NCCL's NVLS graph: one head per
  GPU up to NCCL_MAX_NVLS_ARITY, search.cc:1126-1137; a rank that is not a head runs no
  reduce warps, connect.cc:256-266, all_reduce.h:441); head j reduces slice j (S/h) with a
  multimem load-reduce (the switch reads the n GPUs' S/h and adds them) and multicasts the
  result with a multimem store: every GPU sends S and receives S, a head S/h more each way. As
  flows: one coflow over the ranks in a cycle whose edges carry ``(1 + 1/h) · S`` (the heads'
  load binds). Payload efficiency NCCL's nvlsEfficiency (Hopper 0.85, Blackwell 0.74);
  latency NCCL's 25 µs + two step overheads + twice the path through the switch; ramp
  :func:`nvls_ramp_ns`.
- ``collnet`` (AllReduce over N ≥ 2 nodes with g ranks each): reduce-scatter inside each node
  (a ring, (g−1)/g · S per GPU), then GPU j of every node sends its S/g up to the fabric, whose
  switches add the N contributions and send the sum back: S/g up and S/g down per NIC (as flows:
  a cycle over the N GPUs j, each edge S/g, which loads every NIC once each way; between leaves
  its edges stand for the aggregation tree's up-links), then all-gather inside each node.
  Latency NCCL's (tuning.cc:418-421): 2 · (min(1, g−1) · 3.7 + (g−1) · 0.4) + 31 µs (14 with one
  GPU per node) + the physical latency of the paths.
- ``nvlstree`` (NCCL's NVLSTree: AllReduce over N ≥ 2 nodes whose NVSwitches declare ``nvls``,
  g ≥ 2 ranks on each and h ≥ 2 heads, h = the NICs the node's ranks use, at most 32; NCCL's
  NVLS graph has one head GPU per NIC, search.cc ``ncclTopoSearchRecNet``, at most
  NCCL_MAX_NVLS_ARITY = 32, search.cc:1126-1127, and needs ≥ 2 channels, tuning.cc:308-309):
  inside each node NVLS reduces the buffer to the heads (head j gets the
  node's sum of slice j, S/h) and multicasts the final sum from them; across nodes head j of
  every node runs NCCL's double binary tree on its slice through its own NIC. The two run as
  one pipeline (NCCL's NVLS-tree kernels), so the plan is one phase: per node an NVLS coflow
  (a cycle over the node's ranks, every GPU's up- and down-link loaded once with
  (1 + 1/h) · S — a head's load: S of its own contribution and its slice — divided by NCCL's
  nvlsEfficiency, which NCCL applies to the NVLink part only, tuning.cc:311-312) and per head
  and tree the tree's edges between the heads, each carrying S/(2h) up and S/(2h) down (on two
  nodes every NIC sends and receives S/h: the bus bandwidth twice the ring's, the doubling
  NCCL's tuning model makes for nNodes ≤ 2, tuning.cc:319-320). Latency NCCL's (tuning.cc:427):
  25 µs + 2·log2i(N) × 20.9 µs, plus a step overhead per NVLS step (2) and tree level
  (2·log2i(N)) and the physical paths (the switch twice, each tree level's path twice).
"""

from __future__ import annotations

from sim.comm import CollKind
from sim.network import nccl
from sim.network.ncclgraph import dtree_edges, flows_per_rail
from sim.network.plans import (
    Coflow,
    Plan,
    PlanPhase,
    _Lat,
    _rails,
    _rotate,
    build_plan,
    node_groups,
)
from sim.topology.cluster import Cluster


def nvls_plan(cl: Cluster, ranks: tuple[int, ...]) -> Plan | None:
    """NVLink SHARP all-reduce (module docstring); None unless the ranks share one node whose
    NVSwitches declare ``nvls``."""
    nv = cl.topo.node.nvlink
    if nv is None or not nv.nvls or len(ranks) < 2 or len(node_groups(cl, ranks)) > 1:
        return None
    n = len(ranks)
    h = min(n, nccl.NVLS_MAX_HEADS)
    cf = Coflow(tuple((ranks[i], ranks[(i + 1) % n], -1) for i in range(n)), 1 + 1 / h, 0)

    def latency(cfs) -> dict[str, int]:
        lat = _Lat(cl, "nvlink")
        for c in cfs:
            lat.add(c.edges, c.channel)
        # two steps (load-reduce, multicast store), each with the calibrated step overhead
        return {"Simple": round((nccl.NVLS_LAT_US + 2 * nccl.STEP_OVERHEAD_US) * 1000)
                + 2 * lat.intra_ns}

    return Plan(CollKind.ALLREDUCE, "nvls", ranks, (PlanPhase((cf,), latency),))


def collnet_plan(cl: Cluster, ranks: tuple[int, ...]) -> Plan | None:
    """SHARP / CollNet Direct all-reduce (module docstring); None unless the fabric declares
    ``sharp`` and the ranks span N ≥ 2 nodes with the same number on each."""
    f = cl.topo.fabric
    nodes = node_groups(cl, ranks)
    n_nodes, g = len(nodes), len(nodes[0])
    if f is None or not f.sharp or n_nodes < 2 or any(len(x) != g for x in nodes):
        return None

    def phys(cfs) -> tuple[int, int]:
        lat = _Lat(cl, "nvlink")
        for c in cfs:
            lat.add(c.edges, c.channel)
        return lat.intra_ns, lat.inter_ns

    def intra() -> PlanPhase:
        cfs = tuple(Coflow(tuple((s[j], s[(j + 1) % g], -1) for j in range(g)), (g - 1) / g, 0)
                    for s in nodes)
        return PlanPhase(cfs, lambda c: {"Simple": (g - 1) * phys(c)[0]})

    cfs = []
    for j in range(g):
        col = [x[j] for x in nodes]
        cfs.append(Coflow(tuple((col[i], col[(i + 1) % n_nodes], cl.nic_of(col[i]))
                                for i in range(n_nodes)), 1 / g, j))
    intra_hw = nccl.COLLNET_HW_LAT_US["nvlink" if cl.topo.node.nvlink else "pci"]
    net_hw = nccl.COLLNET_HW_LAT_US["net"] if g > 1 else nccl.HW_LAT_US[("tree", "net")]["Simple"]
    nccl_us = 2 * (min(1, g - 1) * intra_hw + (g - 1) * nccl.COLLNET_ARITY_US) + net_hw
    inter = PlanPhase(tuple(cfs), lambda c: {"Simple": round(nccl_us * 1000) + 2 * phys(c)[1]})
    phases = (intra(), inter, intra()) if g > 1 else (inter,)
    return Plan(CollKind.ALLREDUCE, "collnet", ranks, phases)


def _heads(cl: Cluster, nodes: list[list[int]]) -> list[int]:
    """The NICs (rails) of NVLSTree's heads: one per NIC the node's ranks use, at most
    :data:`~sim.network.nccl.NVLS_MAX_HEADS`."""
    return _rails(cl, nodes)[:nccl.NVLS_MAX_HEADS]


def nvlstree_plan(cl: Cluster, ranks: tuple[int, ...]) -> Plan | None:
    """NVLSTree all-reduce (module docstring); None unless the ranks span N ≥ 2 nodes with the
    same number g ≥ 2 on each, whose NVSwitches declare ``nvls``, reaching h ≥ 2 NICs."""
    nv = cl.topo.node.nvlink
    nodes = node_groups(cl, ranks)
    n_nodes, g = len(nodes), len(nodes[0])
    if nv is None or not nv.nvls or n_nodes < 2 or g < 2 or any(len(x) != g for x in nodes):
        return None
    rails = _heads(cl, nodes)
    h = len(rails)
    if h < 2:
        return None
    eff = nccl.nvls_efficiency(cl.topo.node.gpu.name)
    cfs = [Coflow(tuple((s[j], s[(j + 1) % g], -1) for j in range(g)), (1 + 1 / h) / eff, 0)
           for s in nodes]
    m = flows_per_rail(cl)
    for c, k in enumerate(rails):
        heads = [_rotate(cl, x, k, c)[0] for x in nodes]
        for t in (0, 1):
            edges = []
            for child, parent in dtree_edges(n_nodes, t):
                edges += [(heads[child], heads[parent], k), (heads[parent], heads[child], k)]
            cfs += [Coflow(tuple(edges), 1.0 / (2 * h * m), (2 * c + t) * m + q)
                    for q in range(m)]
    levels = n_nodes.bit_length() - 1

    def latency(cfs) -> dict[str, int]:
        lat = _Lat(cl, "nvlink")
        for cf in cfs:
            lat.add(cf.edges, cf.channel)
        us = (nccl.NVLS_LAT_US + 2 * levels * nccl.NVLSTREE_NET_LAT_US
              + (2 + 2 * levels) * nccl.STEP_OVERHEAD_US)
        return {"Simple": round(us * 1000) + 2 * lat.intra_ns + 2 * levels * lat.inter_ns}

    return Plan(CollKind.ALLREDUCE, "nvlstree", ranks, (PlanPhase(tuple(cfs), latency),))


def nvls_chunk_bytes(channel_bytes: float, heads: int) -> int:
    """NCCL's NVLS all-reduce chunk (bytes) on one node for a channel moving ``channel_bytes``
    with ``heads`` heads (v2.30.7 enqueue.cc:2258-2274, called per channel with nChannels 1,
    :717-735): NCCL_NVLS_CHUNKSIZE (128 KiB), 64 KiB when the channel moves less than
    64 · heads · 128 KiB, 32 KiB below 8 · heads · 64 KiB, 16 KiB below 2 · heads · 32 KiB."""
    chunk = nccl.NVLS_CHUNK_BYTES
    for times, smaller in ((64, 64 << 10), (8, 32 << 10), (2, 16 << 10)):
        if channel_bytes < times * heads * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_ramp_ns(cl: Cluster, plan: Plan, size_bytes: int, nvls_efficiency: float) -> int:
    """Pipeline ramp (ns) of NVLS and NVLSTree, NCCL's 16 channels at every size (enqueue.cc).

    NVLS (one node, h heads): a channel works in loops of h chunks (all_reduce.h:414, loopCount
    = nHeads · chunk) through three stages: scatter warps copy the loop from the user buffer
    into the NVLS buffer and post once for all h heads (prims_simple.h:406-468,
    ``ScatterGatherOp``: copy to every peer, then ``postPeer``), the heads' reduce warps
    load-reduce and multicast it, gather warps copy it out. The chunk is NCCL's for the
    channel's share (:func:`nvls_chunk_bytes`); the loop at most the share.
    Filling three stages costs two loops at one channel's rate, a GPU's NVLink rate × NCCL's
    NVLS factor × h/(h+1) / 16 (each stage assumed to run at the pipeline's rate, as in
    :func:`~sim.network.nccl.ramp_ns`). NVLSTree: chunks of at most 128 KiB
    (NCCL_NVLS_CHUNKSIZE) at a GPU's NVLink rate × the NVLS factor / 16, two hops (load-reduce,
    multicast store) and 2·log2i(N) more (up and down the tree over N nodes)."""
    nv = cl.topo.node.nvlink
    assert nv is not None
    if plan.algorithm == "nvls":
        h = min(len(plan.ranks), nccl.NVLS_MAX_HEADS)
        share = size_bytes / nccl.NVLS_CHANNELS
        loop = min(h * nvls_chunk_bytes(share, h), share)
        rate = nv.gpu_bandwidth_GBps * nvls_efficiency * h / (h + 1) / nccl.NVLS_CHANNELS
        return nccl.ramp_ns(3, loop, rate)
    rate = nv.gpu_bandwidth_GBps * nvls_efficiency / nccl.NVLS_CHANNELS
    chunk = min(nccl.NVLS_CHUNK_BYTES, size_bytes / (nccl.NVLS_CHANNELS * len(plan.ranks)))
    depth = 2 + 2 * (len(node_groups(cl, plan.ranks)).bit_length() - 1)
    return nccl.ramp_ns(depth, chunk, rate)


def nvlstree_nccl_algbw(cl: Cluster, plan: Plan, nic_GBps: float) -> float:
    """NCCL's predicted NVLSTree algorithm bandwidth (GB/s = bytes/ns) over the plan's ranks,
    which bounds NCCL's choice (tuning.cc:307-322, 379): busBw = h × min(bwInter × (2 on ≤ 2
    nodes), perChMaxNVLSTreeBw) with h channels (the heads) of ``nic_GBps`` (one NIC's rate
    through NCCL) each; the NVLink part (bwIntra × nvlsEfficiency × (h−1)/h × 2) is assumed
    not to bind (NCCL's NVLS graph bwIntra is not derived); algbw = busBw · n / (2(n−1)).
    inf for GPUs without NCCL's table (no NVLS)."""
    fam = nccl.nvidia_family(cl.topo.node.gpu.name)
    if fam not in nccl.PER_CH_MAX_NVLSTREE_GBPS:
        return float("inf")
    nodes = node_groups(cl, plan.ranks)
    two = len(nodes) <= 2
    per_ch = min(nic_GBps * (2 if two else 1),
                 nccl.PER_CH_MAX_NVLSTREE_GBPS[fam][1 if two else 2])
    n = len(plan.ranks)
    return len(_heads(cl, nodes)) * per_ch * n / (2 * (n - 1))


def build(cl: Cluster, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
    """:func:`~sim.network.plans.build_plan`, with the in-network algorithms."""
    if algorithm == "nvls":
        return nvls_plan(cl, ranks) if kind is CollKind.ALLREDUCE else None
    if algorithm == "collnet":
        return collnet_plan(cl, ranks) if kind is CollKind.ALLREDUCE else None
    if algorithm == "nvlstree":
        return nvlstree_plan(cl, ranks) if kind is CollKind.ALLREDUCE else None
    return build_plan(cl, kind, algorithm, ranks)

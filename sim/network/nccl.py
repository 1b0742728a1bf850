"""NCCL's tuning model and the size-dependent behaviour of its kernels (docs/collectives.md).

Sources (NVIDIA/nccl at v2.30.7): ``src/graph/tuning.cc`` (latencies, protocol bandwidth
factors: lines 148-176, 324-336), ``src/enqueue.cc`` (channel count by size in
``topoGetAlgoInfo``, chunk sizes in ``calcCollChunking``), ``src/include/device.h``,
``comm.h``, ``collectives.h`` and ``src/init.cc`` (buffer sizes, thread counts and thresholds,
chunk steps). Latencies here are in microseconds as in NCCL's source and converted to integer
ns by callers.

Link types: ``"nvlink"`` (NVSwitch), ``"pci"`` (PCIe tree), ``"net"`` (between nodes).
Protocols: LL (8-byte lines: 4 data + 4 flag bytes), LL128 (128-byte lines, 8 flag bytes),
Simple. Their *efficiency* is the fraction of a link's bandwidth that carries payload; the
network model sends ``bytes / efficiency`` on the wire.

Size-dependent mechanisms (each used by :class:`~sim.network.tuner.Tuner`):

- **channels by size** (enqueue.cc ``topoGetAlgoInfo``): NCCL drops channels while
  ``nBytes < nc · nThreads · threadThreshold`` — few channels (and so little bandwidth) for
  small messages;
- **pipeline ramp** (tree and broadcast chain only): a channel moves its data in chunks (at
  most NCCL's chunk size; smaller when the message is small); the pipeline of ``d`` hops
  reaches its rate only after its first chunk has crossed it, ``(min(d, NCCL_STEPS) − 1)``
  chunk times (the textbook ``(d + k − 1)`` chunk times of a pipeline of depth d with k
  chunks; a connection buffers at most NCCL_STEPS = 8 steps, device.h:26, so no more than that
  many chunks are in flight). Rings have none: every rank sends from step 0
  (:data:`RING_RAMP_DEPTH`);
- **step overhead** (not an NCCL constant; a stated physical property, calibrated): the time
  a GPU needs per algorithm step to see the previous rank's flag and start the next step.
"""

from __future__ import annotations

import math

from sim.kernels.gpus import find

PROTOCOLS = ("LL", "LL128", "Simple")

# Base latency per (algorithm family, protocol), µs (tuning.cc:151).
BASE_LAT_US = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
}

# Hardware latency per hop, µs: (family, link type) → protocol → µs (tuning.cc:159-174).
HW_LAT_US = {
    ("tree", "nvlink"): {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
    ("tree", "pci"): {"LL": 1.0, "LL128": 1.9, "Simple": 4.0},
    ("tree", "net"): {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
    ("ring", "nvlink"): {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    ("ring", "pci"): {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
    ("ring", "net"): {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
}

# Payload fraction of the bandwidth per (family, protocol) (tuning.cc:327-335). Ring: LL 0.5,
# LL128 0.92, Simple 1. Tree: LL 1/3.8, and NCCL caps tree bus bandwidth at 0.92 of the
# links' for LL128 and Simple.
EFFICIENCY = {
    "ring": {"LL": 0.5, "LL128": 0.92, "Simple": 1.0},
    "tree": {"LL": 1.0 / 3.8, "LL128": 0.92, "Simple": 0.92},
}

# NVLS (NVLink SHARP, single node): NCCL's bandwidth factor (nvlsEfficiency, tuning.cc:139-144:
# Hopper 0.85, Blackwell 0.74, chosen by the GPUs' compute capability; here by the GPU
# catalogue's family of the topology's GPU, :func:`nvls_efficiency`), its latency
# (base 0 + NVLink hwLat 25 µs, tuning.cc:153, 161, 424-425), channels (NVLS_NCHANNELS_SM90 16,
# src/transport/nvls.cc:155) and chunk size (NCCL_NVLS_CHUNKSIZE 128 KiB, nvls.cc:160).
NVLS_EFFICIENCY = 0.85
NVLS_EFFICIENCY_BLACKWELL = 0.74
BLACKWELL_FAMILIES = ("B200",)  # catalogue families of compute capability 10.x (sim/data/gpus.csv)
NVLS_LAT_US = 25.0
NVLS_CHANNELS = 16
NVLS_CHUNK_BYTES = 128 * 1024
# NCCL_MAX_NVLS_ARITY (device.h:213): the NVLS graph has at most this many heads
# (search.cc:1126-1127, 1137: on one node min(32, GPUs), every GPU a head up to 32).
NVLS_MAX_HEADS = 32
EFFICIENCY["nvls"] = {"Simple": NVLS_EFFICIENCY}
# CollNet Direct (SHARP): hardware latency of its Simple protocol per link type, µs
# (tuning.cc:160, 166, 172), the 0.4 µs arity serialisation per local rank (tuning.cc:420);
# payload efficiency 1 (its Hopper 0.85 bandwidth factor, tuning.cc:348, is not applied: no
# shipped topology declares SHARP on Hopper).
COLLNET_HW_LAT_US = {"nvlink": 3.7, "pci": 3.7, "net": 31.0}
COLLNET_ARITY_US = 0.4
EFFICIENCY["collnet"] = {"Simple": 1.0}
# NVLSTree (NVLS inside each node, a tree across nodes; NCCL's NCCL_ALGO_NVLS_TREE, all-reduce
# on ≥ 2 nodes, Simple only): latency = NVLink hwLat 25 µs + 2·log2i(nNodes) × the network's
# 20.9 µs (base 0; v2.30.7 tuning.cc:153, 161, 173, 427-428). Its payload factors: NCCL's
# nvlsEfficiency on the NVLink part only (tuning.cc:311-312; applied by the plan to its NVLS
# coflows, sim/network/innet.py), none on the network part (no ``.92`` as for the tree), so the
# plan as a whole has efficiency 1. Per-channel ceiling of NCCL's tuning model,
# ``perChMaxNVLSTreeBws`` (tuning.cc:205-211; N1 0: never on one node, :501-502), GB/s, by
# family and node count (N2: 2 nodes, N4: more); used for NCCL's choice only, like the tree's.
NVLSTREE_NET_LAT_US = 20.9
EFFICIENCY["nvlstree"] = {"Simple": 1.0}
PER_CH_MAX_NVLSTREE_GBPS = {"H100": (0.0, 57.7, 45.5), "B200": (0.0, 96.0, 80.0)}

# Multi-node ring AllReduce with the Simple protocol: latency × 1.4 on Ampere and newer
# (tuning.cc:647-649).
MULTINODE_RING_SIMPLE_FACTOR = 1.4

# Steps a connection's buffer holds (device.h:26).
NCCL_STEPS = 8
# Buffer bytes per protocol (init.cc:810-813): LL = 8 lines × 512 threads × 8 steps × 16 B;
# LL128 = 120 elements × 640 threads × 8 steps × 8 B; Simple 4 MiB.
BUFF_BYTES = {"LL": 8 * 512 * NCCL_STEPS * 16, "LL128": 120 * 640 * NCCL_STEPS * 8,
              "Simple": 1 << 22}
# Ring Simple moves NCCL_STEPS/2 steps per chunk (collectives.h:20-26); everything else one.
RING_SIMPLE_CHUNK_STEPS = NCCL_STEPS // 2
# Threads per channel (device.h:95-114) and bytes per thread before NCCL adds a channel
# (comm.h:49-51; the ring LL threshold is multiplied by the number of ranks, tuning.cc:593).
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}

# Per-step overhead, µs, on every ring or tree step, on top of NCCL's per-hop latency and the
# links' physical latency: the time a GPU needs to observe the previous rank's flag and start
# the next step. Not an NCCL constant: calibrated on one measurement only, the 8-byte
# all-reduce on one DGX A100 (8 GPUs, ring/LL: 33.7 µs, docs/calibration.md §A):
# (33.7 − 6.6 − 14 · (0.6 + 0.3)) / 14 = 1.04 µs. Evaluated on the others (§A2).
STEP_OVERHEAD_US = 1.04

# Pipeline depth charged to ring all-reduce / all-gather / reduce-scatter: 1, i.e. no ramp.
# NCCL's ring kernels (v2.30.7 src/device/all_gather.h and all_reduce.h, ``runRing``) have
# every rank send its own block in step 0 (``directCopySend`` / ``directSend``) and forward each
# received slice at once (``directRecvCopyDirectSend``), slices of NCCL_STEPS/4 steps
# (collectives.h:19-26): every link of the ring is busy from the first step, so nothing fills.
# The tree (a chunk climbs and descends the chain) and the broadcast chain (from the root) do
# fill, and keep their ramp.
RING_RAMP_DEPTH = 1


def family(algorithm: str) -> str:
    """NCCL table row used for an algorithm: tree for the double binary tree, nvls for NVLink
    SHARP, nvlstree for NVLS with a tree across nodes, collnet for SHARP in the fabric, ring
    otherwise."""
    return algorithm if algorithm in ("tree", "nvls", "nvlstree", "collnet") else "ring"


def efficiency(algorithm: str, protocol: str, nvls: float = NVLS_EFFICIENCY) -> float:
    """Payload fraction of the links' bandwidth; ``nvls``: the NVLS factor of the GPUs
    (:func:`nvls_efficiency`)."""
    if family(algorithm) == "nvls":
        return nvls
    return EFFICIENCY[family(algorithm)][protocol]


# Ring LL bus-bandwidth ceiling of NCCL's tuning model on one node, GB/s of payload:
# ``llMaxBws[compCapIndex][0]`` (v2.30.7 src/graph/tuning.cc:177-182, applied at 327 as
# ``busBw = min(llMaxBw, busBw * .5)``; Ampere 87.7 unchanged since v2.10.3 tuning.cc:74,
# Hopper 141.0 since v2.21.5, 87.7 in v2.17-v2.20; Blackwell 2 × 141.0), by the GPU
# catalogue's family (compute capability 8.x, 9.x, 10.x). An empirical ceiling NCCL's
# developers fitted to the LL protocol's throughput; applied here to the time as well as to
# the choice. Across nodes NCCL indexes the table by CPU vendor instead (not modelled);
# RCCL GPUs: none.
LL_MAX_BUSBW_1NODE_GBPS = {"A100": 87.7, "H100": 141.0, "B200": 282.0}


# NCCL's per-channel tree ceilings, GB/s of bus bandwidth per channel, by the GPU catalogue's
# family (compute capability 8.x / 9.x / 10.x) and node count (N1: one node, N2: two, N4: more):
# ``perChMaxTreeBws`` and ``perChMaxTreeLL128Bws`` (v2.30.7 src/graph/tuning.cc:191-204, the
# column ``index2 = nNodes <= 2 ? nNodes - 1 : 2`` at :267). Applied to the tree all-reduce
# (tuning.cc:330-336): ``busBw = min(busBw·.92, nChannels·perChMaxTreeBw)`` for every protocol,
# then for LL128 ``min(busBw·120/128, nChannels·perChMaxTreeLL128Bw)``, then ×.85 when the tree
# graph's pattern is NCCL_TOPO_PATTERN_TREE; algbw = 0.5 × busBw (:380). ``busBw`` there is
# nChannels × the tree graph's bwIntra on ≤ 2 nodes, × its bwInter on more (:306;
# :func:`sim.network.ncclgraph.tree_graph`). RCCL GPUs: none. simrun applies them to NCCL's
# choice only, not to the time (``Tuner.choose``): they are tuning heuristics, retuned with no
# hardware change (Blackwell's row was 2 × Hopper's, N4 72.0, until v2.28.3 made it 24.0,
# commit f1308997), not the kernels' rate.
PER_CH_MAX_TREE_GBPS = {"A100": (24.0, 23.6, 17.8), "H100": (38.7, 41.4, 36.0),
                        "B200": (70.0, 42.8, 24.0)}
PER_CH_MAX_TREE_LL128_GBPS = {"A100": (20.0, 20.0, 20.0), "H100": (36.7, 36.7, 29.0),
                              "B200": (55.6, 31.67, 20.0)}
TREE_BUSBW_FACTOR = 0.92  # tuning.cc:331, ``busBw * .92`` (also simrun's tree Simple efficiency)
TREE_PATTERN_FACTOR = 0.85  # tuning.cc:336, maxTreePattern == NCCL_TOPO_PATTERN_TREE
# Compute capability (×10) of the catalogue's NVIDIA families, for NCCL's per-generation tables.
COMPUTE_CAPABILITY = {"A100": 80, "H100": 90, "B200": 100}


def nvidia_family(gpu_name: str) -> str | None:
    """The GPU catalogue's family of ``gpu_name`` where NCCL's per-generation tables have a row
    (:data:`COMPUTE_CAPABILITY`); None for other GPUs (RCCL's, unknown)."""
    entry = find(gpu_name)
    return entry.family if entry is not None and entry.family in COMPUTE_CAPABILITY else None


def tree_busbw_caps(family: str, nodes: int, channels: int, bw: float,
                    pattern_tree: bool = False) -> tuple[float, float]:
    """NCCL's tree all-reduce bus bandwidth (GB/s) before the protocol factor, and its LL128
    ceiling, for ``channels`` tree channels of ``bw`` GB/s each over ``nodes`` nodes
    (tuning.cc:330-336; :data:`PER_CH_MAX_TREE_GBPS`): ``(min(0.92·nCh·bw, nCh·perChMaxTreeBw),
    nCh·perChMaxTreeLL128Bw)``, both × 0.85 for NCCL's TREE pattern."""
    col = min(max(nodes, 1), 3) - 1
    f = TREE_PATTERN_FACTOR if pattern_tree else 1.0
    simple = min(TREE_BUSBW_FACTOR * channels * bw, channels * PER_CH_MAX_TREE_GBPS[family][col])
    return simple * f, channels * PER_CH_MAX_TREE_LL128_GBPS[family][col] * f


def ll_max_busbw(gpu_name: str) -> float:
    """NCCL's single-node ring LL bus-bandwidth ceiling (GB/s) for the GPU named
    ``gpu_name`` (:data:`LL_MAX_BUSBW_1NODE_GBPS`); inf where the catalogue's family has none."""
    entry = find(gpu_name)
    if entry is None:
        return math.inf
    return LL_MAX_BUSBW_1NODE_GBPS.get(entry.family, math.inf)


def nvls_efficiency(gpu_name: str) -> float:
    """NCCL's NVLS bandwidth factor for the GPU named ``gpu_name``: Blackwell's 0.74 where the
    GPU catalogue puts it in a Blackwell family, else Hopper's 0.85 (NVLS needs NVSwitch gen3,
    so Hopper is the only other generation that runs it)."""
    entry = find(gpu_name)
    if entry is not None and entry.family in BLACKWELL_FAMILIES:
        return NVLS_EFFICIENCY_BLACKWELL
    return NVLS_EFFICIENCY


def ring_latency_us(protocol: str, steps: int, inter_steps: int, intra_type: str,
                    allreduce_multinode: bool = False) -> float:
    """``base + (steps − inter)·intraLat + inter·netLat`` (µs), NCCL's ring latency
    (tuning.cc:393-413), plus the step overhead of every step."""
    lat = (BASE_LAT_US["ring"][protocol]
           + (steps - inter_steps) * HW_LAT_US[("ring", intra_type)][protocol]
           + inter_steps * HW_LAT_US[("ring", "net")][protocol])
    if allreduce_multinode and protocol == "Simple":
        lat *= MULTINODE_RING_SIMPLE_FACTOR
    return lat + steps * STEP_OVERHEAD_US


def tree_latency_us(protocol: str, ppn: int, nodes: int, intra_type: str) -> float:
    """``base + 2·((ppn − 1)·intraLat + log2i(nodes)·netLat)`` (µs), NCCL's tree AllReduce
    (tuning.cc:414-417), plus the step overhead of its ``tree_depth`` steps."""
    log2i = max(nodes, 1).bit_length() - 1
    return BASE_LAT_US["tree"][protocol] + 2 * (
        (ppn - 1) * HW_LAT_US[("tree", intra_type)][protocol]
        + log2i * HW_LAT_US[("tree", "net")][protocol]) + \
        tree_depth(ppn, nodes) * STEP_OVERHEAD_US


def tree_depth(ppn: int, nodes: int) -> int:
    """Hops a chunk crosses in a tree all-reduce: up and down the chain of ``ppn`` ranks per
    node and the ``log2i(nodes)`` levels of the tree over nodes."""
    return 2 * ((ppn - 1) + (max(nodes, 1).bit_length() - 1))


def max_chunk_bytes(algorithm: str, protocol: str, broadcast: bool = False) -> int:
    """Payload bytes of one chunk at most (enqueue.cc ``calcCollChunking``): a step of the
    protocol's buffer (BUFF_BYTES / NCCL_STEPS), times the chunk steps for ring Simple
    (NCCL_STEPS/2; broadcast 1); LL carries 4 data bytes per 8, LL128 15 data words per 16."""
    step = BUFF_BYTES[protocol] // NCCL_STEPS
    if protocol == "Simple":
        ring = algorithm == "ring" and not broadcast
        return step * (RING_SIMPLE_CHUNK_STEPS if ring else 1)
    if protocol == "LL":
        return step // 2
    return step // 16 * 15


def channels_for(size_bytes: int, max_channels: int, algorithm: str, protocol: str,
                 nranks: int, pci_only: bool = False) -> int:
    """Channels NCCL runs a ring or tree collective of ``size_bytes`` on (enqueue.cc
    ``topoGetAlgoInfo``: fewer while ``nBytes < nc · nThreads · threshold``). Ring Simple uses
    256 threads where the ring's bandwidth is within PCI_BW (tuning.cc:244-247)."""
    nt = MAX_THREADS[protocol]
    if pci_only and algorithm == "ring" and protocol == "Simple":
        nt = 256
    thr = THREAD_THRESHOLD[protocol] * (nranks if algorithm == "ring" and protocol == "LL"
                                        else 1)
    return max(1, min(max_channels, size_bytes // (nt * thr)))


def kernel_channels(size_bytes: int, max_channels: int, algorithm: str, protocol: str,
                    nranks: int, pci_only: bool = False) -> int:
    """Channels, hence CTAs (one thread block per channel, each resident on an SM), of the
    kernel NCCL launches for a collective of ``size_bytes`` when its communicator has
    ``max_channels`` (``NCCL_MAX_NCHANNELS``-like cap; 0: none). Ring and tree: the same
    size rule as the bandwidth model (:func:`channels_for`, enqueue.cc ``topoGetAlgoInfo``);
    NVLS and NVLSTree: ``NVLS_CHANNELS`` at every size (SM90's 16; NCCL runs 24 or 32 on
    Blackwell, nvls.cc:155-213, not modelled); all-to-all, send/receive and the other
    algorithms: the ring Simple rule at their size (NCCL's per-peer p2p channel logic is not
    modelled)."""
    if max_channels <= 0:
        return 0
    if algorithm in ("nvls", "nvlstree"):
        return min(NVLS_CHANNELS, max_channels)
    if algorithm not in ("ring", "tree") or protocol not in MAX_THREADS:
        algorithm, protocol = "ring", "Simple"
    return channels_for(size_bytes, max_channels, algorithm, protocol, nranks, pci_only)


def ramp_ns(depth: int, chunk_bytes: float, channel_rate: float) -> int:
    """Time (ns) to fill a pipeline of ``depth`` hops with chunks of ``chunk_bytes`` payload at
    ``channel_rate`` payload bytes/ns: ``(min(depth, NCCL_STEPS) − 1)`` chunk times."""
    hops = min(depth, NCCL_STEPS) - 1
    if hops <= 0 or channel_rate <= 0:
        return 0
    return round(hops * chunk_bytes / channel_rate)

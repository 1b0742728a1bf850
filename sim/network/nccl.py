"""NCCL's latency and protocol model (src/graph/tuning.cc, v2.30; docs/collectives.md).

Latencies here are in microseconds as in NCCL's source and converted to integer ns by callers.
Link types: ``"nvlink"`` (NVSwitch), ``"pci"`` (PCIe tree), ``"net"`` (between nodes).
Protocols: LL (8-byte lines: 4 data + 4 flag bytes), LL128 (128-byte lines, 8 flag bytes),
Simple. Their *efficiency* is the fraction of a link's bandwidth that carries payload; the
network model sends ``bytes / efficiency`` on the wire.
"""

from __future__ import annotations

PROTOCOLS = ("LL", "LL128", "Simple")

# Base latency per (algorithm family, protocol), µs.
BASE_LAT_US = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
}

# Hardware latency per hop, µs: (family, link type) → protocol → µs.
HW_LAT_US = {
    ("tree", "nvlink"): {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
    ("tree", "pci"): {"LL": 1.0, "LL128": 1.9, "Simple": 4.0},
    ("tree", "net"): {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
    ("ring", "nvlink"): {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    ("ring", "pci"): {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
    ("ring", "net"): {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
}

# Payload fraction of the bandwidth per (family, protocol). Ring: LL 0.5, LL128 0.92, Simple 1.
# Tree: LL 1/3.8, and NCCL caps tree bus bandwidth at 0.92 of the links' for LL128 and Simple.
EFFICIENCY = {
    "ring": {"LL": 0.5, "LL128": 0.92, "Simple": 1.0},
    "tree": {"LL": 1.0 / 3.8, "LL128": 0.92, "Simple": 0.92},
}

# Multi-node ring AllReduce with the Simple protocol: latency × 1.4 on Ampere and newer.
MULTINODE_RING_SIMPLE_FACTOR = 1.4


def family(algorithm: str) -> str:
    """NCCL table row used for an algorithm: tree for the double binary tree, ring otherwise."""
    return "tree" if algorithm == "tree" else "ring"


def efficiency(algorithm: str, protocol: str) -> float:
    return EFFICIENCY[family(algorithm)][protocol]


def ring_latency_us(protocol: str, steps: int, inter_steps: int, intra_type: str,
                    allreduce_multinode: bool = False) -> float:
    """``base + (steps − inter)·intraLat + inter·netLat`` (µs), NCCL's ring latency."""
    lat = (BASE_LAT_US["ring"][protocol]
           + (steps - inter_steps) * HW_LAT_US[("ring", intra_type)][protocol]
           + inter_steps * HW_LAT_US[("ring", "net")][protocol])
    if allreduce_multinode and protocol == "Simple":
        lat *= MULTINODE_RING_SIMPLE_FACTOR
    return lat


def tree_latency_us(protocol: str, ppn: int, nodes: int, intra_type: str) -> float:
    """``base + 2·((ppn − 1)·intraLat + log2i(nodes)·netLat)`` (µs), NCCL's tree AllReduce."""
    log2i = max(nodes, 1).bit_length() - 1
    return BASE_LAT_US["tree"][protocol] + 2 * (
        (ppn - 1) * HW_LAT_US[("tree", intra_type)][protocol]
        + log2i * HW_LAT_US[("tree", "net")][protocol])

"""Hand-worked α–β cases for every collective and algorithm on tiny topologies.

The tiny topologies have round numbers, no physical latencies and no launch overhead, so each
time is exactly NCCL's latency term (docs/collectives.md, µs) + the step overhead (1.04 µs per
ring or tree step, calibrated: sim/network/nccl.py) + bytes / the bandwidth the flows get + for
NCCL's tree and broadcast chain the pipeline ramp, (min(d, 8) − 1) chunk times for a pipeline
of d hops, chunks of at most NCCL's chunk size (broadcast and tree Simple 512 KiB, LL 32 KiB,
LL128 576,000 B) or the channel's share of one step, at one channel's payload rate (ring bus
bandwidth / channels × protocol efficiency; channels = bus bandwidth / one link's). Rings
(all-reduce, all-gather, reduce-scatter) have no ramp: in NCCL's ring kernels every rank sends
its own block in the first step, so every link is busy from the start (sim/network/nccl.py).
Expected values are computed here by hand from those formulas, not by the model.

tiny-nvlink-4: 1 node, 4 GPUs, NVSwitch 100 GB/s per GPU.
tiny-pcie-4:   1 node, 4 GPUs on 2 PCIe switches (20 GB/s) under 2 sockets (CPU link 10 GB/s).
tiny-2x2:      2 nodes × 2 GPUs, NVSwitch 100 GB/s, one 10 GB/s NIC per GPU (2 rails).
S = 1e8 bytes unless stated. 1 GB/s = 1 byte/ns.
"""

from __future__ import annotations

import math

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.network import build_network
from sim.network.base import CommRequest
from sim.topology import load_topology

S = 100_000_000
AR, AG, RS, A2A, BC, P2P = (CollKind.ALLREDUCE, CollKind.ALLGATHER, CollKind.REDUCESCATTER,
                            CollKind.ALLTOALL, CollKind.BROADCAST, CollKind.SENDRECV)


def t_ns(topo: str, kind: CollKind, ranks, size=S, algorithm="auto", protocol="Simple"):
    net = build_network(load_topology(str(TOPOLOGIES / topo)), algorithm=algorithm,
                        protocol=protocol)
    res = net.isolated(CommRequest(kind, GroupKind.TP, tuple(ranks), size))
    return res.duration_ns, res.algorithm


def us(x: float) -> int:
    return round(x * 1000)


STEP = 1.04  # µs per ring/tree step (sim/network/nccl.py STEP_OVERHEAD_US, calibrated)
MiB = 1 << 20


def ramp(depth: int, chunk: float, rate: float) -> int:
    """(min(d, 8) − 1) chunk times, ns; rate in bytes/ns."""
    return round((min(depth, 8) - 1) * chunk / rate)


# ---- one NVSwitch node: 4 GPUs, 100 GB/s each ---------------------------------------------

def test_ring_allreduce_nvswitch():
    # 2(n−1)/n · S / B = 1.5e8 / 100 ns; latency base 8.4 + 2(n−1) · (3.4 + STEP) µs (ring,
    # NVLink). No ramp: every rank sends from the first step.
    assert t_ns("tiny-nvlink-4.yaml", AR, range(4), algorithm="ring") == (
        1_500_000 + us(8.4 + 6 * (3.4 + STEP)), "ring/Simple")


@pytest.mark.parametrize("kind", [AG, RS])
def test_ring_allgather_reducescatter_nvswitch(kind):
    # (n−1)/n · S / B; latency 8.4 + (n−1) · (3.4 + STEP) µs; no ramp
    assert t_ns("tiny-nvlink-4.yaml", kind, range(4)) == (
        750_000 + us(8.4 + 3 * (3.4 + STEP)), "ring/Simple")


def test_broadcast_chain_nvswitch():
    # pipelined chain: S / B; latency 8.4 + (n−1) · (3.4 + STEP) µs; ramp depth 3, 512 KiB
    assert t_ns("tiny-nvlink-4.yaml", BC, range(4)) == (
        1_000_000 + us(8.4 + 3 * (3.4 + STEP)) + ramp(3, MiB // 2, 25), "ring/Simple")


def test_alltoall_direct_nvswitch():
    # each GPU sends S/n to each of n−1 peers through its 100 GB/s port: (n−1)/n · S / B
    # latency (n−1) steps: 8.4 + 3 · 3.4 µs
    assert t_ns("tiny-nvlink-4.yaml", A2A, range(4)) == (750_000 + us(8.4 + 3 * 3.4),
                                                         "direct/Simple")


def test_sendrecv_nvswitch():
    assert t_ns("tiny-nvlink-4.yaml", P2P, (0, 3)) == (1_000_000 + us(8.4 + 3.4), "direct/Simple")


def test_tree_allreduce_single_node_is_a_chain_at_half_bus_bandwidth():
    # two chains 0-1-2-3 each carrying S/2 up and down; a middle GPU sends 2 edges per chain:
    # 4 edges share its 100 GB/s port → 25 GB/s per edge = NCCL's 0.5 · busBw / (2 trees).
    # tree Simple efficiency 0.92: wire bytes (S/2) / 0.92. Latency 8.4 + 2 · 3 · (4.0 + STEP)
    # µs. Ramp: depth 6, 512 KiB chunks at one channel's 25 · 0.92 GB/s.
    transfer = math.ceil((S / 2 / 0.92) / 25)
    assert t_ns("tiny-nvlink-4.yaml", AR, range(4), algorithm="tree") == (
        transfer + us(8.4 + 2 * 3 * (4.0 + STEP)) + ramp(6, MiB // 2, 25 * 0.92), "tree/Simple")


@pytest.mark.parametrize("protocol, eff, base, hop", [("LL", 0.5, 6.6, 0.6),
                                                      ("LL128", 0.92, 14.0, 1.9)])
def test_protocols_scale_wire_bytes_and_latency(protocol, eff, base, hop):
    size = 1_000_000
    got = t_ns("tiny-nvlink-4.yaml", AR, range(4), size, algorithm="ring", protocol=protocol)
    assert got == (math.ceil(1.5 * size / eff / 100 - 1e-6) + us(base + 6 * (hop + STEP)),
                   f"ring/{protocol}")


def test_auto_picks_least_time_ll_for_tiny_messages_simple_for_large():
    # 8 bytes: ring LL 6.6 + 6·(0.6 + STEP) µs beats tree LL 6.8 + 2·3·(0.6 + STEP) and the
    # rest. One channel (NCCL: 8 B < 512 threads · 8 · 4 ranks): 25 GB/s moves the 24 wire
    # bytes in 1 ns; no ramp
    assert t_ns("tiny-nvlink-4.yaml", AR, range(4), 8, protocol="auto") == (
        us(6.6 + 6 * (0.6 + STEP)) + 1, "ring/LL")
    assert t_ns("tiny-nvlink-4.yaml", AR, range(4), 1 << 30, protocol="auto")[1] == "ring/Simple"


# ---- one PCIe node: the ring crosses the 10 GB/s socket link once each way ----------------

def test_ring_allreduce_pcie_tree_is_bound_by_the_cpu_link():
    # ring 0→1→2→3→0: 1→2 and 3→0 cross the sockets (one edge per direction): 10 GB/s.
    # latency: PCI hop 5.7 µs: 8.4 + 6 · (5.7 + STEP); no ramp
    assert t_ns("tiny-pcie-4.yaml", AR, range(4), algorithm="ring") == (
        15_000_000 + us(8.4 + 6 * (5.7 + STEP)), "ring/Simple")


def test_sendrecv_pcie_same_switch_vs_across_sockets():
    assert t_ns("tiny-pcie-4.yaml", P2P, (0, 1))[0] == 5_000_000 + us(8.4 + 5.7)  # 20 GB/s
    assert t_ns("tiny-pcie-4.yaml", P2P, (0, 2))[0] == 10_000_000 + us(8.4 + 5.7)  # 10 GB/s


# ---- two nodes × two GPUs, one 10 GB/s NIC per GPU -----------------------------------------

def test_ring_allreduce_two_nodes_two_rails():
    # 2 channels (one per NIC); each channel's ring crosses each node's NIC once per direction;
    # each edge carries 2(n−1)/n · S / 2 = 0.75 S at 10 GB/s → 7.5e6 ns (busbw = 2 × 10).
    # latency: nsteps 2(n−1) = 6, nInter 2(N−1) = 2: (8.4 + 4·3.4 + 2·14) · 1.4 (multi-node
    # ring Simple all-reduce) + 6 · STEP; no ramp
    assert t_ns("tiny-2x2.yaml", AR, range(4), algorithm="ring") == (
        7_500_000 + us((8.4 + 4 * 3.4 + 2 * 14) * 1.4 + 6 * STEP), "ring/Simple")


@pytest.mark.parametrize("kind", [AG, RS])
def test_ring_allgather_reducescatter_two_nodes(kind):
    # 0.375 S per edge at 10 GB/s; nsteps n−1 = 3, nInter N−1 = 1, no 1.4 factor
    assert t_ns("tiny-2x2.yaml", kind, range(4), algorithm="ring") == (
        3_750_000 + us(8.4 + 2 * 3.4 + 14 + 3 * STEP), "ring/Simple")


def test_hierarchical_allreduce_two_nodes():
    # 1) intra-node reduce-scatter, ring of 2 over NVLink: (g−1)/g · S / 100 = 5e5 ns,
    #    latency 8.4 + 3.4; 2) two inter-node rings (GPU j of each node, own NIC) all-reduce
    #    S/g: 2(N−1)/N · S/2 / 10 = 5e6 ns, latency (8.4 + 2·14) · 1.4; 3) all-gather as 1).
    # (hierarchical is not an NCCL algorithm: step overheads, no NCCL ramp)
    intra = 500_000 + us(8.4 + 3.4 + STEP)
    inter = 5_000_000 + us((8.4 + 2 * 14) * 1.4 + 2 * STEP)
    assert t_ns("tiny-2x2.yaml", AR, range(4), algorithm="hierarchical") == (
        intra + inter + intra, "hierarchical/Simple")


def test_hierarchical_allgather_and_reducescatter_two_nodes():
    # all-gather: inter-node (N−1)/N · S/g / 10 = 2.5e6 (latency 8.4 + 14), then intra-node
    # (g−1)/g · S / 100 = 5e5 (latency 8.4 + 3.4); reduce-scatter: the same phases reversed
    want = 2_500_000 + us(8.4 + 14 + STEP) + 500_000 + us(8.4 + 3.4 + STEP)
    assert t_ns("tiny-2x2.yaml", AG, range(4), algorithm="hierarchical")[0] == want
    assert t_ns("tiny-2x2.yaml", RS, range(4), algorithm="hierarchical")[0] == want


def test_tree_allreduce_two_nodes_runs_at_nccls_tree_rate():
    # ring busBw = 2 NICs × 10 = 20 GB/s; NCCL's tree: algbw = 0.5 · busBw · 0.92 (Simple)
    # → S / 9.2 ns. (The links would allow 5 GB/s per tree edge; the NCCL cap is 2.5.)
    # latency: 8.4 + 2 · ((ppn−1) · 4.0 + log2(2) · 14) + 4 steps · STEP; ramp depth 4,
    # 512 KiB chunks at one channel's 10 · 0.92 GB/s
    transfer = math.ceil((S / 4 / 0.92) / 2.5)
    assert t_ns("tiny-2x2.yaml", AR, range(4), algorithm="tree") == (
        transfer + us(8.4 + 2 * (4.0 + 14) + 4 * STEP) + ramp(4, MiB // 2, 9.2), "tree/Simple")


def test_sendrecv_across_nodes_uses_the_destination_rail():
    # GPU 0 → GPU 3 (node 1, NIC 1): NVLink to GPU 1 (PXN), NIC 1, rail-1 leaf: 10 GB/s
    assert t_ns("tiny-2x2.yaml", P2P, (0, 3)) == (10_000_000 + us(8.4 + 14), "direct/Simple")


def test_alltoall_two_nodes():
    # each GPU sends S/4 to each peer; the two flows into GPU 2 from node 0 (from GPUs 0, 1)
    # share node 0's NIC 0 (rail of GPU 2): 5 GB/s each → 2.5e7 / 5 = 5e6 ns.
    # latency (n−1) = 3 network steps: 8.4 + 3 · 14 µs
    assert t_ns("tiny-2x2.yaml", A2A, range(4)) == (5_000_000 + us(8.4 + 3 * 14),
                                                    "direct/Simple")


def test_broadcast_two_nodes():
    # two chains (one per rail) each carrying S/2 at 10 GB/s; nsteps n−1 = 3, nInter N−1 = 1
    assert t_ns("tiny-2x2.yaml", BC, range(4)) == (
        5_000_000 + us(8.4 + 2 * 3.4 + 14 + 3 * STEP) + ramp(3, MiB // 2, 10), "ring/Simple")


@pytest.mark.parametrize("kind", list(CollKind))
def test_one_rank_or_zero_bytes_costs_nothing(kind):
    ranks = (1, 1) if kind is P2P else (2,)
    assert t_ns("tiny-2x2.yaml", kind, ranks)[0] == 0
    assert t_ns("tiny-2x2.yaml", kind, (0, 1), 0)[0] == 0


def test_launch_overhead_and_physical_latency_add(tmp_path):
    text = (TOPOLOGIES / "tiny-nvlink-4.yaml").read_text().replace(
        "launch_overhead_ns: 0", "launch_overhead_ns: 5000").replace(
        "link_bandwidth_GBps: 25}", "link_bandwidth_GBps: 25, latency_ns: 300}")
    p = tmp_path / "t.yaml"
    p.write_text(text)
    net = build_network(load_topology(str(p)), algorithm="ring", protocol="Simple")
    got = net.isolated(CommRequest(AR, GroupKind.TP, (0, 1, 2, 3), S)).duration_ns
    assert got == 1_500_000 + us(8.4 + 6 * (3.4 + STEP)) + 6 * 300 + 5000

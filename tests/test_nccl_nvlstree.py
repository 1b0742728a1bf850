"""NVLSTree (NVLS inside each node, NCCL's double binary tree across nodes), hand-derived.

tiny-2x2 with ``nvls: true`` on its NVSwitches: nodes of 2 GPUs, 100 GB/s of NVLink per GPU and
direction, one 10 GB/s NIC per GPU (2 heads per node), one leaf per rail, no physical latency, no
launch overhead; the test GPU has no NCCL table, so NVLS's factor is Hopper's 0.85 and NCCL's
NVLSTree ceiling does not apply. NVLSTree all-reduce of S bytes (sim/network/innet.py):

- NVLS in each node: every GPU's up- and down-link carries (1 + 1/2) · S / 0.85;
- across nodes, per rail, two trees (NCCL's double binary tree) whose edges carry S/4 each way.
  On 2 nodes each tree is one edge pair: each NIC sends S/4 for each tree, 10 GB/s shared by
  the two trees: S/4 / 5 GB/s. On 4 nodes, tree 0 is (1→2, 2→0, 3→2) and tree 1 its mirror
  (0→1, 1→3, 2→1) (``ncclGetDtree``): node 2's NIC carries tree 0 three times and tree 1 once,
  node 1's the reverse, so max-min gives both trees 10 / 4 = 2.5 GB/s: S/4 / 2.5 GB/s.
- Latency NCCL's 25 µs + 2·log2i(N) × 20.9 µs + (2 + 2·log2i(N)) step overheads of 1.04 µs;
  ramp (min(2 + 2·log2i(N), 8) − 1) chunks of min(128 KiB, S / (16 · n)) at 100 · 0.85 / 16 GB/s.

1 GB/s = 1 byte/ns. The published check: 2 DGX B200 nodes, 8 GiB, 690.07 GB/s busbw
(coreweave/nccl-tests pull request #92, docs/collectives.md).
"""

from __future__ import annotations

import math

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.network import build_network, innet
from sim.network.base import CommRequest
from sim.network.predict import predict_rows
from sim.topology import load_topology, parse_topology

S = 100_000_000
RATE = 100 * 0.85 / 16  # one NVLS channel's payload bytes/ns


def tiny(nodes: int = 2, nvls: bool = True):
    text = (TOPOLOGIES / "tiny-2x2.yaml").read_text().replace(
        "link_bandwidth_GBps: 25}", f"link_bandwidth_GBps: 25, nvls: {str(nvls).lower()}}}"
    ).replace("nodes: 2\n", f"nodes: {nodes}\n")
    return parse_topology(text, "tiny-nvls-2x2.yaml")


def allreduce(n: int, size: int = S) -> CommRequest:
    return CommRequest(CollKind.ALLREDUCE, GroupKind.DP, tuple(range(n)), size)


def hand(levels: int, transfer_ns: int, n: int) -> int:
    lat = round((25 + 2 * levels * 20.9 + (2 + 2 * levels) * 1.04) * 1000)
    chunk = min(128 * 1024, S / (16 * n))
    return transfer_ns + lat + round((2 + 2 * levels - 1) * chunk / RATE)


def test_two_nodes_hand_derived():
    net = build_network(tiny(), algorithm="nvlstree")
    res = net.isolated(allreduce(4))
    # NICs bind: S/4 at 5 GB/s = 5 ms; NVLS: 1.5 · S / 0.85 / 100 = 1.76 ms
    assert res.algorithm == "nvlstree/Simple"
    assert res.duration_ns == hand(1, 5_000_000, 4) == 5_000_000 + 70_960 + 74_017


def test_four_nodes_hand_derived():
    net = build_network(tiny(4), algorithm="nvlstree")
    res = net.isolated(allreduce(8))
    assert res.algorithm == "nvlstree/Simple"
    assert res.duration_ns == hand(2, 10_000_000, 8) == 10_000_000 + 114_840 + 123_362


def test_auto_takes_nvlstree_over_the_ring_and_only_where_nvls_runs():
    # ring: each NIC carries 2(n−1)/n · S / 2 = 0.75 S at 10 GB/s = 7.5 ms > NVLSTree's 5 ms
    assert build_network(tiny()).isolated(allreduce(4)).algorithm == "nvlstree/Simple"
    for net in (build_network(tiny(), nvls_enable=False), build_network(tiny(nvls=False))):
        assert not net.isolated(allreduce(4)).algorithm.startswith("nvls")
    net = build_network(tiny(), nccl_algo="allreduce:nvlstree")
    assert net.isolated(allreduce(4)).algorithm == "nvlstree/Simple"


def test_not_applicable_on_one_node_or_one_rank_per_node():
    net = build_network(tiny(), algorithm="nvlstree")
    assert net.tuner.plan(CollKind.ALLREDUCE, "nvlstree", (0, 1)) is None  # one node
    assert net.tuner.plan(CollKind.ALLREDUCE, "nvlstree", (0, 2)) is None  # one rank per node
    assert net.tuner.plan(CollKind.ALLGATHER, "nvlstree", (0, 1, 2, 3)) is None


def test_nccl_ceiling_and_two_dgx_b200_against_nccl_tests():
    b200 = load_topology(str(TOPOLOGIES / "dgx-b200.yaml"))
    h100 = load_topology(str(TOPOLOGIES / "dgx-h100-1024.yaml"))
    # NCCL's predicted algbw: 8 heads × min(2 × 48, perChMaxNVLSTreeBw) × n / (2(n−1))
    for topo, n, per_ch in ((b200, 16, 96.0), (h100, 16, 57.7), (h100, 1024, 45.5)):
        net = build_network(topo)
        plan = net.tuner.plan(CollKind.ALLREDUCE, "nvlstree", tuple(range(n)))
        assert innet.nvlstree_nccl_algbw(net.tuner.cluster, plan, 48.0) == pytest.approx(
            8 * per_ch * n / (2 * (n - 1)))
    # The time is the model's: on 2 B200 nodes the NICs bind (each sends S/8, algbw ≤ 384,
    # busbw ≤ 720); published 690.07 (coreweave/nccl-tests#92): within ±10%.
    row = predict_rows("allreduce", 16, [8 << 30], build_network(b200))[0]
    assert row["algorithm"] == "nvlstree/Simple"
    assert 690.07 * 0.9 <= row["busbw_GBps"] <= 720 and \
        row["busbw_GBps"] == pytest.approx(690.07, rel=0.10)
    # On H100 NVLS binds: algbw ≤ 370.8 · 0.85 · 8/9 = 280.2 GB/s, busbw ≤ 525.3 — above both
    # NCCL's predicted 8 × 57.7 = 461.6 and the measured 440.6 (same pull request; the model's
    # error there, +19%, is stated in docs/collectives.md, not fitted).
    row = predict_rows("allreduce", 16, [8 << 30], build_network(h100))[0]
    assert row["algorithm"] == "nvlstree/Simple"
    assert 461.6 < row["busbw_GBps"] <= 2 * 15 / 16 * 370.8 * 0.85 * 8 / 9
    assert math.isclose(row["busbw_GBps"], 523.68, abs_tol=0.01)

"""NCCL's tree bandwidth in its tuning model (NVIDIA/nccl v2.30.7): the tree graph's channels and
per-channel rates (src/graph/search.cc ``ncclTopoCompute``, ``ncclTopoDupChannels``), bwIntra on
<= 2 nodes and bwInter on more (src/graph/tuning.cc:306), bounded by ``perChMaxTreeBws`` and
``perChMaxTreeLL128Bws`` times the channel count (tuning.cc:191-204, 330-336). simrun lets
them steer NCCL's choice, not the time (they are tuning heuristics: sim/network/nccl.py).

Hand derivations (GB/s = bytes/ns):

- DGX A100, HDR through PCIe Gen4 = 24 GB/s per NIC (speedArrayInter has 24), 8 NICs: the ring
  finds 8 channels of 24 (24 < 25: no duplication). The tree search takes 8 channels, bwInter
  24, and raises bwIntra through 28, 30 (8 × 30 = 240 = 12 NVLinks × 20) but not 48 (384 >
  240): bwIntra 30. Two nodes: busBw = min(0.92 × 8 × 30 = 220.8, 8 × 23.6 = 188.8) = 188.8;
  more than two: min(0.92 × 8 × 24 = 176.64, 8 × 17.8 = 142.4) = 142.4. LL128 ceiling 8 × 20.
- 2 HGX A100 with 4 HDR NICs: 4 channels of 24, bwIntra 28, 30, 48 (4 × 48 = 192 <= 240, then
  48 = 2 × 24 stops): busBw = min(0.92 × 4 × 48, 4 × 23.6) = 94.4, algbw 47.2 < the ring's
  4 × 24 × 16/30 = 51.2: NCCL (and simrun) keep the ring, as measured (86-91 GB/s busbw).
- DGX H100, NDR through PCIe Gen5 = 48 per NIC: 8 channels of 48 (48 < 50 and 8 > 4: no
  duplication on Hopper), 48 is the top of sm90SpeedArrayInter (no raise): two nodes
  min(0.92 × 384, 8 × 41.4 = 331.2) = 331.2; LL128 8 × 36.7 = 293.6.
- DGX B200: 8 channels of 48, bwIntra 80, 86 (8 × 86 = 688 <= 18 × 40.1 = 721.8), not 96:
  min(0.92 × 688, 8 × 42.8 = 342.4) = 342.4; LL128 8 × 31.67 = 253.36. The tree's algbw 171.2
  stays below the ring's 384 × 16/30 = 204.8: NCCL's model keeps the ring on 2 B200 nodes.
"""

from __future__ import annotations

import math

import pytest
from conftest import TOPOLOGIES
from test_network_calibration import hgx_4nic

from sim.comm import CollKind, GroupKind
from sim.network import build_network, nccl, ncclgraph
from sim.network.base import CommRequest
from sim.topology import load_topology

GiB = 1 << 30


def topo(name: str):
    return load_topology(str(TOPOLOGIES / f"{name}.yaml"))


def allreduce(gpus: int, size: int) -> CommRequest:
    return CommRequest(CollKind.ALLREDUCE, GroupKind.DP, tuple(range(gpus)), size)


def test_dup_channels_as_search_cc():
    assert ncclgraph.dup_channels(80, 8, 24.0) == (8, 24.0)      # below 25 GB/s
    assert ncclgraph.dup_channels(80, 6, 40.0) == (12, 20.0)     # Ampere doubles
    assert ncclgraph.dup_channels(90, 8, 48.0) == (8, 48.0)      # > Ampere, < 50, > 4 channels
    assert ncclgraph.dup_channels(90, 4, 48.0) == (8, 24.0)      # 4 channels: doubled
    assert ncclgraph.dup_channels(100, 8, 96.0) == (16, 48.0)    # >= 50: doubled
    assert ncclgraph.dup_channels(80, 20, 30.0) == (32, 15.0)    # at most 32, bw / ceil(32/20)


def test_tree_graph_channels_and_rates():
    assert ncclgraph.tree_graph(80, 8, 24.0, 240.0) == (8, 30.0, 24.0)
    assert ncclgraph.tree_graph(80, 4, 24.0, 240.0) == (4, 48.0, 24.0)
    assert ncclgraph.tree_graph(90, 8, 48.0, 370.8) == (8, 48.0, 48.0)
    assert ncclgraph.tree_graph(100, 8, 48.0, 721.8) == (8, 86.0, 48.0)
    # Hopper with 4 NDR NICs: 4 × 48 duplicated to 8 × 24, bwIntra raised 30, 40, 42, 45
    # (8 × 48 = 384 > 370.8 stops it)
    assert ncclgraph.tree_graph(90, 4, 48.0, 370.8) == (8, 45.0, 24.0)


@pytest.mark.parametrize("name, gpus, simple, ll128", [
    ("dgx-a100-1024", 16, 188.8, 160.0),
    ("dgx-a100-1024", 64, 142.4, 160.0),
    ("dgx-h100-1024", 16, 331.2, 293.6),
    ("dgx-h100-1024", 64, 288.0, 232.0),
    ("dgx-b200", 16, 342.4, 253.36),
    ("dgx-b200", 64, 192.0, 160.0),
])
def test_tuner_tree_busbw(name, gpus, simple, ll128):
    tuner = build_network(topo(name)).tuner
    got = tuner.tree_busbw_GBps(tuple(range(gpus)))
    assert got == pytest.approx((simple, ll128), rel=1e-9)


def test_one_rank_per_node_is_nccls_tree_pattern():
    # 2 ranks on 2 DGX A100 nodes: one NIC, 24 GB/s; no NVLink hop, so bwIntra rises to 48
    # = 2 × 24; min(0.92 × 48, 23.6) × 0.85 (NCCL_TOPO_PATTERN_TREE, search.cc:1133,
    # tuning.cc:336) = 20.06; LL128 20 × 0.85 = 17.
    tuner = build_network(topo("dgx-a100-1024")).tuner
    assert tuner.tree_busbw_GBps((0, 8)) == pytest.approx((20.06, 17.0), rel=1e-9)


def test_one_node_caps_do_not_bind():
    # one DGX A100: 12 channels × 20 = 240; 0.92 × 240 = 220.8 < 12 × 24 (N1)
    tuner = build_network(topo("dgx-a100-1024")).tuner
    assert tuner.tree_busbw_GBps(tuple(range(8))) == pytest.approx((220.8, 240.0), rel=1e-6)


def predicted_ns(net, gpus: int, proto: str, size: int) -> int:
    tuner = net.tuner
    plan = tuner.rep_plan(CollKind.ALLREDUCE, "tree", tuple(range(gpus)))
    return tuner.alone_ns(plan, proto, size, ceiling=tuner.nccl_tree_ceiling(plan, proto))


@pytest.mark.parametrize("name, gpus, proto, algbw", [
    ("dgx-b200", 16, "Simple", 342.4 / 2),
    ("dgx-b200", 16, "LL128", 253.36 / 2),
    # 2 DGX A100 nodes: NCCL's 188.8 / 2 = 94.4 is above the model's own tree rate,
    # 0.5 × 0.92 × the ring's 192 = 88.32; the prediction never runs faster than the model
    ("dgx-a100-1024", 16, "Simple", 0.5 * 0.92 * 192),
    ("dgx-a100-1024", 64, "Simple", 142.4 / 2),
    ("dgx-a100-1024", 64, "LL128", 142.4 / 2),
])
def test_nccls_prediction_runs_the_tree_at_its_algbw(name, gpus, proto, algbw):
    # At 4 and 8 GiB every channel runs and chunks are full, so latency and ramp are equal:
    # the 4 GiB more take 4 GiB / algbw (payload algbw = 0.5 × NCCL's tree busBw).
    net = build_network(topo(name))
    t4, t8 = (predicted_ns(net, gpus, proto, s) for s in (4 * GiB, 8 * GiB))
    assert t8 - t4 == pytest.approx(4 * GiB / algbw, abs=2)


def test_the_tree_runs_at_the_models_rate_not_nccls_ceiling():
    # The ceilings steer NCCL's choice only: a tree forced on 2 DGX B200 nodes still runs at
    # 0.5 × 0.92 × the ring's 8 × 48 = 176.64 GB/s (Simple), not at NCCL's 171.2.
    net = build_network(topo("dgx-b200"), algorithm="tree", protocol="Simple")
    t4 = net.isolated(allreduce(16, 4 * GiB)).duration_ns
    t8 = net.isolated(allreduce(16, 8 * GiB)).duration_ns
    assert t8 - t4 == pytest.approx(4 * GiB / (0.5 * 0.92 * 384), abs=2)


def test_two_nodes_keep_the_ring_at_large_sizes():
    # 2 HGX A100 (4 HDR): tree 47.2 < ring 51.2 algbw; 2 DGX B200 without NVLS
    # (NCCL_NVLS_ENABLE=0): tree 171.2 < ring 204.8. With NVLS, NVLSTree runs on the B200s
    # (tests/test_nccl_nvlstree.py).
    for net in (build_network(hgx_4nic()), build_network(topo("dgx-b200"), nvls_enable=False),
                build_network(topo("dgx-a100-1024"))):
        assert net.isolated(allreduce(16, 8 * GiB)).algorithm == "ring/Simple"
    assert build_network(topo("dgx-b200")).isolated(
        allreduce(16, 8 * GiB)).algorithm == "nvlstree/Simple"
    net = build_network(hgx_4nic())
    assert net.tuner.tree_busbw_GBps(tuple(range(16)))[0] / 2 == pytest.approx(47.2)
    # the prediction takes the slower of NCCL's 47.2 and the model's 0.5 × 0.92 × 96 = 44.16
    t4, t8 = (predicted_ns(net, 16, "Simple", s) for s in (4 * GiB, 8 * GiB))
    assert t8 - t4 == pytest.approx(4 * GiB / 44.16, abs=2)


def test_more_than_two_nodes_ceiling_moves_the_choice(monkeypatch):
    # 64 DGX A100 GPUs, 64 MiB: under NCCL's N4 ceiling (8 × 17.8 = 142.4, algbw 71.2) the tree
    # loses to ring/LL128 (0.92 × 192 × 64/126 = 89.7 algbw less latency); without it the tree
    # (0.5 × 0.92 × 192 = 88.3) wins by its latency. The time is the chosen plan's own.
    size = 64 << 20
    capped = build_network(topo("dgx-a100-1024")).isolated(allreduce(64, size))
    ring = build_network(topo("dgx-a100-1024"), algorithm="ring", protocol="LL128")
    monkeypatch.setitem(nccl.PER_CH_MAX_TREE_GBPS, "A100", (math.inf,) * 3)
    monkeypatch.setitem(nccl.PER_CH_MAX_TREE_LL128_GBPS, "A100", (math.inf,) * 3)
    free = build_network(topo("dgx-a100-1024")).isolated(allreduce(64, size))
    assert free.algorithm == "tree/LL128" and capped.algorithm == "ring/LL128"
    assert capped.duration_ns == ring.isolated(allreduce(64, size)).duration_ns
    assert capped.duration_ns > free.duration_ns


def test_rccl_gpus_have_no_tree_tables():
    assert nccl.nvidia_family("MI300X") is None
    assert nccl.nvidia_family("H200-SXM-141GB") == "H100"
    assert nccl.nvidia_family("GB200") == "B200"

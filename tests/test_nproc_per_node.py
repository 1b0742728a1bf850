"""--nproc-per-node K (torchrun's name): K processes on each node of G GPUs, rank r on node
r // K, local GPU r mod K (physical GPU (r // K)·G + r mod K; sim/topology/nproc.py).

Hand-derived: on GB200 NVL72 racks (G = 72) a 128-rank job with TP 16 straddles the racks
with one process per GPU (TP group 4 = ranks 64..79 = rack 0's GPUs 64..71 and rack 1's
GPUs 0..7), and with K = 64 every TP group of 16 consecutive ranks lies in one rack (16 divides
64); rank 64 runs on rack 1's GPU 0, whose NIC is rack 1's NIC 0.
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import TOPOLOGIES

from sim.cli import main
from sim.comm import CollKind, GroupKind
from sim.network import build_network
from sim.network.base import CommRequest
from sim.parallel.placement import Placement
from sim.topology import load_topology, parse_topology
from sim.topology.cluster import Cluster
from sim.topology.domains import describe, groups_leaving_domains

NVL72 = TOPOLOGIES / "gb200-nvl72.yaml"
S = 1 << 30
GPU_BW = 18 * 50 * 0.802  # GB/s per GPU and direction inside an NVL72 rack (721.8)
STEP = 1.04  # µs per ring step (sim/network/nccl.py STEP_OVERHEAD_US)
ZERO_LAT = ("node.nvlink.latency_ns=0", "collectives={launch_overhead_ns: 0}")


def nvl72(k, nodes=2, overrides=()):
    return parse_topology(NVL72.read_text(), str(NVL72), nodes=nodes, overrides=overrides,
                          nproc_per_node=k)


def test_view_keeps_the_first_k_gpus_and_every_nic():
    t = nvl72(64)
    assert (t.gpus_per_node, t.num_gpus, t.idle_gpus_per_node) == (64, 128, 8)
    assert t.node.nics.count == 72  # the fabric's leaves are the physical cluster's
    assert t.node.nics.gpus[:64] == tuple((i,) for i in range(64))
    assert t.node.nics.gpus[64:] == ((),) * 8  # the idle GPUs' NICs serve no rank
    assert len(t.node.pcie.gpu_switch) == 64
    lines = t.describe()
    assert any(line.startswith("--nproc-per-node 64: 64 of each node's 72 GPUs used, 8 idle")
               for line in lines)


def test_rank_64_runs_on_rack_1_gpu_0():
    cl = Cluster(nvl72(64))
    # rank 64 → rank 65: both in rack 1, local GPUs 0 and 1, over rack 1's NVLink switch
    assert cl.path_names(64, 65) == [(("gpu", 1, 0), ("nvswitch", 1)),
                                     (("nvswitch", 1), ("gpu", 1, 1))]
    assert cl.nic_of(64) == 0
    # one process per GPU: rank 64 is rack 0's GPU 64
    assert Cluster(nvl72(None)).path_names(64, 65)[0] == (("gpu", 0, 64), ("nvswitch", 0))


def test_no_tp_group_spans_two_racks_with_64_per_rack():
    pl = Placement(16, 8, 1)
    assert groups_leaving_domains(pl, nvl72(None).gpus_per_node) == {"TP": 1}
    assert groups_leaving_domains(pl, nvl72(64).gpus_per_node) == {}
    assert describe(pl, nvl72(64).gpus_per_node) == ""


def _ring_ns(n):
    """Ring all-reduce of S bytes over n GPUs of one NVL72 rack, latencies zeroed but NCCL's
    (tests/test_topology_nvl72.py): 2(n−1)/n · S at 721.8 GB/s + (8.4 + 2(n−1)(3.4 + STEP)) µs."""
    return math.ceil(2 * (n - 1) / n * S / GPU_BW) + round((8.4 + 2 * (n - 1) * (3.4 + STEP))
                                                           * 1000)


def test_tp16_allreduce_of_128_ranks_stays_inside_each_rack():
    net = build_network(nvl72(64, overrides=ZERO_LAT), algorithm="ring", protocol="Simple")
    want = _ring_ns(16)
    for g in range(8):  # every TP group, rack 1's included, runs at the rack's NVLink ring time
        res = net.isolated(CommRequest(CollKind.ALLREDUCE, GroupKind.TP,
                                       tuple(range(16 * g, 16 * g + 16)), S))
        assert res.duration_ns == pytest.approx(want, abs=2), g
    # one process per GPU: the group of ranks 64..79 crosses the NICs and is slower
    straddling = build_network(nvl72(None, overrides=ZERO_LAT), algorithm="ring",
                               protocol="Simple").isolated(
        CommRequest(CollKind.ALLREDUCE, GroupKind.TP, tuple(range(64, 80)), S))
    assert straddling.duration_ns > want + 1_000_000  # 5.46 ms against 2.93 ms


def _report(tmp_path, args):
    out = tmp_path / f"r{abs(hash(tuple(args)))}.json"
    assert main([*args, "--model", "gpt2-medium", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    return rep["iteration_time_s"], rep["stages"]


@pytest.mark.parametrize("args", [
    "--topo gb200-nvl72 --nodes 2 --nproc-per-node 64 --gpus 128 --tp 16 --global-batch 64",
    "--topo gb200-nvl72 --nodes 2 --nproc-per-node 64 --gpus 128 --tp 8 --pp 2 "
    "--global-batch 64",
    # TP groups of 4 straddle the 6-GPU nodes (ranks 4..7): every rank is simulated
    "--topo dgx-h100-scalable --nodes 4 --nproc-per-node 6 --gpus 24 --tp 4 --global-batch 24",
])
def test_symmetric_equals_per_rank(tmp_path, args):
    sym = _report(tmp_path, args.split())
    full = _report(tmp_path, [*args.split(), "--per-rank"])
    assert sym == full


def test_k_equal_to_the_node_is_the_default(tmp_path):
    path = str(TOPOLOGIES / "dgx-h100-scalable.yaml")
    assert load_topology(path, nodes=2, nproc_per_node=8) == load_topology(path, nodes=2)
    args = ["--model", "gpt2-medium", "--topo", "dgx-h100-scalable", "--nodes", "2", "--tp",
            "8", "--global-batch", "16"]
    reports = []
    for extra in ([], ["--nproc-per-node", "8"]):
        out = tmp_path / f"r{len(extra)}.json"
        assert main([*args, *extra, "--json", str(out)]) == 0
        reports.append(json.loads(out.read_text()))
    reports[0].pop("wall_time_s", None)
    reports[1].pop("wall_time_s", None)
    assert reports[0] == reports[1]


@pytest.mark.parametrize("k,msg", [
    ("73", "--nproc-per-node: must be between 1 and the 72 GPUs of a GB200 NVL72 rack node"),
    ("0", "--nproc-per-node: expected a positive integer"),
])
def test_refused(k, msg, capsys):
    code = main(["--model", "gpt2-medium", "--topo", "gb200-nvl72", "--nodes", "2", "--tp", "16",
                 "--gpus", "128", "--global-batch", "64", "--nproc-per-node", k])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and msg in err[0]


def test_world_needs_ceil_world_over_k_nodes(capsys):
    # 128 ranks at 64 per rack need 2 racks: one is refused
    code = main(["--model", "gpt2-medium", "--topo", "gb200-nvl72", "--nodes", "1", "--tp", "16",
                 "--gpus", "128", "--global-batch", "64", "--nproc-per-node", "64"])
    assert code == 2
    assert "has 64 (1 nodes x 64 of 72 GPUs (--nproc-per-node 64))" in capsys.readouterr().err

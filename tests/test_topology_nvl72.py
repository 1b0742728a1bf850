"""The shipped Blackwell systems: NVL72 racks (one 72-GPU NVLink domain per node), DGX B200 and
DGX H200, checked against hand-derived closed forms.

gb200-nvl72 with its physical latencies and launch overhead set to 0 (``--set``): 72 GPUs on
one NVLink 5 switch domain, 18 links × 50 GB/s × NCCL's 0.802 (40.1 GB/s per link,
SM100_NVLINK_BW) = 721.8 GB/s per GPU and direction. 1 GB/s = 1 byte/ns. Formulas as in
tests/test_collective_alphabeta.py (NCCL's latency + step overhead + bytes / bandwidth; rings
have no pipeline ramp) and tests/test_nccl_nvls.py (NVLS).
"""

from __future__ import annotations

import math

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.errors import InputError
from sim.network import build_network
from sim.network.base import CommRequest
from sim.topology import load_topology, parse_topology

S = 1 << 30
N = 72
GPU_BW = 18 * 50 * 0.802  # 721.8 GB/s
STEP = 1.04  # µs per ring step (sim/network/nccl.py STEP_OVERHEAD_US)
ZERO_LAT = ("node.nvlink.latency_ns=0", "collectives={launch_overhead_ns: 0}")


def nvl72(*extra: str):
    path = TOPOLOGIES / "gb200-nvl72.yaml"
    return parse_topology(path.read_text(), str(path), overrides=ZERO_LAT + extra)


def alone(topo, ranks, algorithm, kind=CollKind.ALLREDUCE, size=S):
    res = build_network(topo, algorithm=algorithm, protocol="Simple").isolated(
        CommRequest(kind, GroupKind.TP, tuple(ranks), size))
    return res.duration_ns, res.algorithm


def test_shipped_systems_load_and_pass_the_consistency_checks():
    for name, gpus, gpu, hbm in (("gb200-nvl72", 72, "GB200", 192),
                                 ("gb300-nvl72", 72, "GB300", 288),
                                 ("dgx-b200", 8, "B200", 180),
                                 ("dgx-h200", 8, "H200-SXM-141GB", 141)):
        t = load_topology(str(TOPOLOGIES / f"{name}.yaml"))
        assert (t.gpus_per_node, t.gpu.name, t.gpu.hbm_GB) == (gpus, gpu, hbm)
        assert t.warnings == (), (name, t.warnings)  # sim/topology/consistency.py
        assert t.node.nvlink.gpu_bandwidth_GBps == pytest.approx(
            721.8 if gpu != "H200-SXM-141GB" else 370.8)


def test_nodes_scale_nvl72_racks():
    # a node is a rack: --nodes 8 is 8 NVL72 racks = 576 GPUs, NIC k of every rack on rail k
    t = load_topology(str(TOPOLOGIES / "gb200-nvl72.yaml"), nodes=8)
    assert (t.num_nodes, t.num_gpus, t.node.nics.count) == (8, 576, 72)


def test_ring_allreduce_in_the_72_gpu_domain():
    # ring: 2(n−1)/n · S at 721.8 GB/s; latency 8.4 + 2(n−1) · (3.4 + STEP) µs (one node: NCCL's
    # NVLink ring, no network step). No pipeline ramp: every rank sends from the first step.
    bw_ns = 2 * (N - 1) / N * S / GPU_BW
    lat = round((8.4 + 2 * (N - 1) * (3.4 + STEP)) * 1000)
    got, algo = alone(nvl72(), range(N), "ring")
    assert algo == "ring/Simple"
    assert got == pytest.approx(math.ceil(bw_ns) + lat, abs=2)
    assert got == pytest.approx(2_933_856 + 638_880, abs=2)  # ≈ 3.57 ms


def test_nvls_allreduce_in_the_72_gpu_domain():
    # NVLS on 72 GPUs: NCCL's NVLS graph has h = 32 heads (NCCL_MAX_NVLS_ARITY), so a head's
    # NVLink ports carry (1 + 1/32) · S each way, at Blackwell's NVLS factor 0.74 (NCCL
    # tuning.cc nvlsEfficiency); latency 25 µs + 2 step overheads. Ramp: each of the 16
    # channels moves S/16 = 64 MiB in loops of 32 chunks; 64 MiB < 64 · 32 · 128 KiB = 256 MiB,
    # so the chunk is 64 KiB (enqueue.cc) and a loop 2 MiB; filling scatter → reduce → gather
    # costs two loops at one channel's 721.8 · 0.74 · 32/33 / 16 GB/s.
    wire = (1 + 1 / 32) * S / 0.74
    rate = GPU_BW * 0.74 * 32 / 33 / 16
    want = math.ceil(wire / GPU_BW) + round((25 + 2 * STEP) * 1000) + round(
        2 * (32 * 64 * 1024) / rate)
    got, algo = alone(nvl72(), range(N), "nvls")
    assert algo == "nvls/Simple"
    assert want == 2_073_077 + 27_080 + 129_567
    assert got == pytest.approx(want, abs=2)
    # NVLS beats the ring in the domain (auto takes it, as NCCL does with NVLS enabled)
    assert alone(nvl72(), range(N), "auto")[1] == "nvls/Simple"
    # bus bandwidth 2(n−1)/n · S / t ≈ 950 GB/s (public nccl-tests on a GB200 NVL72 rack:
    # 681 GB/s at 1 GiB, docs/collectives.md: simrun's NVLS is ~39% optimistic there)
    assert 2 * (N - 1) / N * S / got == pytest.approx(950, rel=0.01)
    # 8 GiB: 512 MiB per channel ≥ 256 MiB, chunks of 128 KiB, loops of 4 MiB
    big = 8 * S
    want8 = math.ceil((1 + 1 / 32) * big / 0.74 / GPU_BW) + 27_080 + round(
        2 * (32 * 128 * 1024) / rate)
    assert alone(nvl72(), range(N), "nvls", size=big)[0] == pytest.approx(want8, abs=2)


def test_tp_and_ep_groups_stay_inside_the_nvlink_domain():
    # Megatron's placement (tp-cp-ep-dp-pp, TP fastest), rank r on GPU r: TP 4 × EP 18 blocks
    # of 72 ranks are whole racks, so no TP or EP group leaves its NVLink domain and their
    # collectives never reach a NIC; the pipeline's neighbours are in the other rack and do
    from sim.parallel.placement import Placement
    from sim.topology.domains import groups_leaving_domains, images_differ
    p = Placement(4, 18, 2, ep=18)
    for r in range(144):
        for kind in (GroupKind.TP, GroupKind.EP):
            assert len({g // N for g in p.group(kind, r)}) == 1, (kind, r)
    assert groups_leaving_domains(p, N) == {} and not images_differ(p, N)
    cl = build_network(nvl72("nodes=2")).cluster
    tp = p.group(GroupKind.TP, 5)
    assert all(x[0] != "nic" for u, v in cl.path_names(tp[0], tp[-1]) for x in (u, v))
    assert any(x[0] == "nic" for u, v in cl.path_names(0, 72) for x in (u, v))  # PP: rack 0 → 1
    # TP 2 × EP 8 on 128 ranks: blocks of 16, and 72 is no multiple of 16: the EP groups of
    # ranks 64-79 (TP index 0 and 1) straddle racks 0 and 1; the others stay inside
    q = Placement(2, 64, 1, ep=8)
    assert groups_leaving_domains(q, N) == {"EP": 2}
    assert images_differ(q, N)  # so the run simulates every rank (sim/scenario/steps.py)
    # on 8-GPU DGX nodes every one of the 16 EP groups spans two nodes alike: images
    assert groups_leaving_domains(q, 8) == {"EP": 16} and not images_differ(q, 8)


def test_bad_blackwell_keys_get_one_line_errors():
    path = TOPOLOGIES / "gb200-nvl72.yaml"
    with pytest.raises(InputError) as e:
        parse_topology(path.read_text().replace("nvls: true", "nvls: yes please"), str(path))
    msg = str(e.value)
    assert "gb200-nvl72.yaml" in msg and "node.nvlink.nvls" in msg and "\n" not in msg
    with pytest.raises(InputError) as e:
        parse_topology(path.read_text().replace("links_per_gpu: 18", "links_per_gpu: -18"),
                       str(path))
    assert "node.nvlink.links_per_gpu" in str(e.value) and "\n" not in str(e.value)


def test_stages_that_straddle_racks_are_said():
    # 128 ranks, PP 2: 64-rank stages on 72-GPU racks, stage 1 = GPUs 64-127 over racks 0
    # and 1; 18-rank stages (TP 2 × DP 9) tile a rack (72 = 4 · 18); 64-rank stages are whole
    # 8-GPU DGX nodes
    from sim.parallel.placement import Placement
    from sim.topology.domains import stages_straddle
    assert stages_straddle(Placement(2, 32, 2), N)
    assert not stages_straddle(Placement(2, 9, 4), N)
    assert not stages_straddle(Placement(2, 32, 2), 8)
    assert not stages_straddle(Placement(2, 32, 1), N)  # one stage: nothing to stand for


def test_straddling_stages_get_one_representative_per_rack_run():
    """TP 2 PP 2 DP 32 on 128 ranks of 72-GPU racks: stage 1 is ranks 64-127; its DP indices
    0-3 (ranks 64-71) lie in rack 0, 4-31 in rack 1: DP parts [0..3] and [4..31]. The GB200
    405B layout TP4 PP16 DP4 (stages of 16): stage 4 = ranks 64-79, DP indices 0-1 in rack 0,
    2-3 in rack 1. TP 16 DP 2 PP 4: the TP group of ranks 64-79 itself spans two racks."""
    from sim.parallel.placement import Placement
    from sim.topology.domains import straddle_dp_parts
    assert straddle_dp_parts(Placement(2, 32, 2), N) == [tuple(range(4)), tuple(range(4, 32))]
    assert straddle_dp_parts(Placement(4, 4, 16), N) == [(0, 1), (2, 3)]
    # TP 16: the TP group of ranks 64-79 spans racks 0 and 1: no DP split represents it
    assert straddle_dp_parts(Placement(16, 2, 4), N) is None


def test_straddle_run_equals_per_rank(tmp_path):
    """The straddle classes simulate 4 ranks instead of 128 and give --per-rank's time
    (the symmetric approximation gave 13.6 ms against 15.7 ms)."""
    import json

    from sim.cli import main
    args = ["--model", "gpt2-medium", "--topo", "gb200-nvl72", "--nodes", "2", "--gpus", "128",
            "--tp", "2", "--pp", "2", "--global-batch", "64", "--quiet", "--json"]
    assert main([*args, str(tmp_path / "a.json")]) == 0
    assert main([*args, str(tmp_path / "b.json"), "--per-rank"]) == 0
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["simulation"]["mode"] == "straddle" and a["simulation"]["simulated_ranks"] == 4
    assert a["iteration_time_s"] == b["iteration_time_s"]


def test_collective_says_when_the_asked_algorithm_does_not_apply(capsys):
    """NVLS runs inside one NVLink domain: over two DGX H100 nodes `--algorithm nvls` cannot
    run, auto's choice runs and a header line says so, naming it; inside one node, no line."""
    from sim.cli import main
    assert main(["collective", "--topo", "dgx-h100-1024", "--gpus", "16", "--algorithm", "nvls",
                 "--sizes", "1G:1G"]) == 0
    out = capsys.readouterr().out
    assert ("# --algorithm nvls does not apply to allreduce over these 16 GPUs: auto's choice "
            "ran instead (nvlstree; column 'algorithm')") in out
    assert main(["collective", "--topo", "dgx-h100-1024", "--gpus", "8", "--algorithm", "nvls",
                 "--sizes", "1G:1G"]) == 0
    out = capsys.readouterr().out
    assert "# --algorithm nvls does not apply" not in out and "nvls/Simple" in out

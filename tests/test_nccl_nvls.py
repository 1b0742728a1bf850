"""NVLS (NVLink SHARP) all-reduce on a tiny hand-derived case, asserted exactly.

tiny-nvlink-4 with ``nvls: true`` on its NVSwitches: 1 node, 4 GPUs, 100 GB/s of NVLink per GPU
and direction, no physical latency, no launch overhead. NVLS all-reduce of S bytes
(sim/network/plans.py): every GPU sends S + S/4 and receives S/4 + S (multimem load-reduce of
its quarter, multimem store of the result), at NCCL's NVLS efficiency 0.85 (tuning.cc:142):
wire bytes per GPU link 1.25 S / 0.85 (4 GPUs, all 4 heads: (1 + 1/4) S). Latency: NCCL's
25 µs + 2 step overheads of 1.04 µs. Ramp: each of NCCL's 16 channels moves S/16 = 6.25 MB in
loops of 4 chunks (one per head); 6.25 MB < 64 · 4 · 128 KiB = 33.6 MB, so the chunk is 64 KiB
(enqueue.cc), the loop 256 KiB; filling scatter → reduce → gather costs two loops at one
channel's 100 · 0.85 · 4/5 / 16 = 4.25 GB/s. 1 GB/s = 1 byte/ns.
"""

from __future__ import annotations

import math

import pytest
import simpy
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.errors import InputError
from sim.network import build_network
from sim.network.base import CommRequest
from sim.parallel.placement import Placement
from sim.topology import load_topology, parse_topology

S = 100_000_000
LAT = 25_000 + 2 * 1040
RAMP = round(2 * (4 * 64 * 1024) / 4.25)  # 123,362 ns
ALONE = math.ceil(1.25 * S / 0.85 / 100) + LAT + RAMP  # 1,470,589 + 27,080 + 123,362


def nvls_topology(nvls: bool = True):
    text = (TOPOLOGIES / "tiny-nvlink-4.yaml").read_text().replace(
        "link_bandwidth_GBps: 25}", f"link_bandwidth_GBps: 25, nvls: {str(nvls).lower()}}}")
    return parse_topology(text, "tiny-nvls-4.yaml")


def allreduce(size: int = S) -> CommRequest:
    return CommRequest(CollKind.ALLREDUCE, GroupKind.TP, (0, 1, 2, 3), size)


def test_nvls_alone_is_the_hand_derived_time():
    net = build_network(nvls_topology(), algorithm="nvls")
    res = net.isolated(allreduce())
    assert (res.duration_ns, res.algorithm) == (ALONE, "nvls/Simple")
    assert ALONE == 1_621_031


def test_auto_chooses_nvls_when_cheaper_and_ring_for_tiny_messages():
    net = build_network(nvls_topology())
    # ring/Simple at S: 1.5e6 + 35,040 = 1,535,040 (test_collective_alphabeta) < NVLS 1,621,031
    assert net.isolated(allreduce()).algorithm == "ring/Simple"
    # 1 GB: 62.5 MB per channel ≥ 33.6 MB, chunks of 128 KiB, loops of 512 KiB, ramp
    # 2 · 524,288 / 4.25 = 246,724; NVLS 14,705,883 + 27,080 + 246,724 = 14,979,687 beats the
    # ring's 15,000,000 + 35,040
    big = net.isolated(allreduce(10**9))
    assert (big.duration_ns, big.algorithm) == (14_979_687, "nvls/Simple")
    # 8 bytes: ring/LL 6.6 + 6 · (0.6 + 1.04) µs + 1 ns beats NVLS's 27.08 µs + 1 ns
    small = net.isolated(allreduce(8))
    assert (small.duration_ns, small.algorithm) == (16_441, "ring/LL")
    # NCCL_NVLS_ENABLE=0, or a switch without NVLS: the ring
    for off in (build_network(nvls_topology(), nvls_enable=False),
                build_network(nvls_topology(nvls=False))):
        assert off.isolated(allreduce(10**9)).algorithm.startswith("ring/")
    assert build_network(nvls_topology(nvls=False), algorithm="nvls").isolated(
        allreduce(10**9)).algorithm.startswith("ring/")  # nvls does not apply: auto


def test_nvls_timeline_two_allreduces_share_the_nvlinks_then_one_alone():
    # (time, what) log: at t=0 two NVLS all-reduces over the same 4 GPUs share every GPU's
    # links (50 GB/s each): their flows end together at ceil(2 · 1.25 S / 0.85 / 100), then each
    # pays latency and ramp. A third starts when the first ends and runs alone.
    net = build_network(nvls_topology(), algorithm="nvls")
    env = simpy.Environment()
    net.bind(env, Placement(4, 1, 1), False)
    log = []

    def go(name, delay=0, after=None):
        if after is not None:
            yield after
        yield env.timeout(delay)
        res = yield net.start(allreduce())
        log.append((env.now, name, res.algorithm))

    first = env.process(go("a"))
    env.process(go("b"))
    env.process(go("c", after=first))
    env.run()
    shared = math.ceil(2 * 1.25 * S / 0.85 / 100) + LAT + RAMP
    assert sorted(log) == [(shared, "a", "nvls/Simple"), (shared, "b", "nvls/Simple"),
                   (shared + ALONE, "c", "nvls/Simple")]
    assert shared == 3_091_619


def test_h100_nvls_allreduce_reaches_about_480_GBps_bus_bandwidth():
    # NVIDIA (nccl-tests issue #212, NCCL maintainer): 8 × H100 NVLS all-reduce peak busbw
    # ~480 GB/s (docs/calibration.md §A); 2 · (n−1)/(n+1) · 370.8 GB/s · 0.85 = 490 GB/s
    from sim.network.predict import predict_rows
    net = build_network(load_topology(str(TOPOLOGIES / "dgx-h100-1024.yaml")))
    row = predict_rows("allreduce", 8, [4 << 30], net)[0]
    assert row["algorithm"] == "nvls/Simple"
    assert row["busbw_GBps"] == pytest.approx(480, rel=0.10)


def test_nvls_must_be_true_or_false():
    text = (TOPOLOGIES / "tiny-nvlink-4.yaml").read_text().replace(
        "link_bandwidth_GBps: 25}", "link_bandwidth_GBps: 25, nvls: yes-please}")
    with pytest.raises(InputError, match="nvls"):
        parse_topology(text, "bad.yaml")


def test_nvls_chunk_follows_nccls_size_rule():
    # enqueue.cc calcCollChunking (NVLS, one node, per channel): 128 KiB, 64 KiB below
    # 64 · h · 128 KiB per channel, 32 KiB below 8 · h · 64 KiB, 16 KiB below 2 · h · 32 KiB
    from sim.network.innet import nvls_chunk_bytes
    h = 8  # 8 H100: thresholds 64 MiB, 4 MiB, 512 KiB per channel
    assert nvls_chunk_bytes(64 << 20, h) == 128 << 10
    assert nvls_chunk_bytes((64 << 20) - 1, h) == 64 << 10
    assert nvls_chunk_bytes(4 << 20, h) == 64 << 10
    assert nvls_chunk_bytes((4 << 20) - 1, h) == 32 << 10
    assert nvls_chunk_bytes(512 << 10, h) == 32 << 10
    assert nvls_chunk_bytes((512 << 10) - 1, h) == 16 << 10
    assert nvls_chunk_bytes(1, 32) == 16 << 10
    assert nvls_chunk_bytes(256 << 20, 32) == 128 << 10  # 72 GPUs, 32 heads

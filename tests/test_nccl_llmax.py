"""NCCL's single-node ring LL ceiling (llMaxBws, v2.30.7 src/graph/tuning.cc:177-182, 327),
hand-derived on one DGX A100 (shipped dgx-a100-1024: 12 NVLinks × 25 GB/s × 0.8 = 240 GB/s of
ring bus bandwidth per GPU; ring LL payload at efficiency 0.5 = 120 GB/s, capped by NCCL's
Ampere ceiling at 87.7 GB/s).

All-gather of S bytes on 8 GPUs moves S·7/8 bytes per GPU at the bus bandwidth, so the cap adds
S·7/8 · (1/87.7 − 1/120) ns (1 GB/s = 1 byte/ns) to ring/LL; at 2 MiB that is 5,632 ns. At
4 MiB ring/LL would take 50,760 + 11,264 ns > ring/LL128's 53,300, so NCCL's choice moves from
LL to LL128 there (it stayed LL up to 4 MiB without the cap).
"""

from __future__ import annotations

import math

import pytest

from sim.comm import CollKind, GroupKind
from sim.network import build_network, nccl
from sim.network.base import CommRequest
from sim.topology import load_topology

RANKS = tuple(range(8))


def allgather(size: int) -> CommRequest:
    return CommRequest(CollKind.ALLGATHER, GroupKind.TP, RANKS, size)


def extra_ns(size: int) -> float:
    return size * 7 / 8 * (1 / 87.7 - 1 / 120.0)


def test_table_by_gpu_family():
    assert nccl.ll_max_busbw("A100-SXM4-80GB") == 87.7
    assert nccl.ll_max_busbw("H100-SXM5-80GB") == 141.0
    assert nccl.ll_max_busbw("MI300X") == math.inf


def test_ll_cap_adds_the_hand_derived_time_and_moves_the_choice(monkeypatch):
    topo = load_topology("dgx-a100-1024")
    capped = build_network(topo)
    monkeypatch.setitem(nccl.LL_MAX_BUSBW_1NODE_GBPS, "A100", math.inf)
    free = build_network(topo)
    s2 = 2 << 20
    a, b = capped.isolated(allgather(s2)), free.isolated(allgather(s2))
    assert (a.algorithm, b.algorithm) == ("ring/LL", "ring/LL")
    assert a.duration_ns - b.duration_ns == pytest.approx(extra_ns(s2), abs=2)
    assert extra_ns(s2) == pytest.approx(5632, abs=1)
    s4 = 4 << 20
    a, b = capped.isolated(allgather(s4)), free.isolated(allgather(s4))
    assert b.algorithm == "ring/LL" and a.algorithm == "ring/LL128"
    ll128 = build_network(topo, protocol="LL128").isolated(allgather(s4))
    assert a.duration_ns == ll128.duration_ns
    assert b.duration_ns + extra_ns(s4) > ll128.duration_ns > b.duration_ns

"""Calibration against the public nccl-tests measurements of docs/calibration.md section A.

The model is physical (line rates × NCCL's link efficiencies, NCCL's latency constants, channel
counts, chunk sizes and the tree's pipeline ramp); one constant is calibrated (the step
overhead, on the 8-GPU 8-byte point) and nothing is fitted per case. Every point within ±10 %,
at every size, as issue 16 asks; `simrun collective` times are nccl-tests' (launch overhead hidden).
"""

from __future__ import annotations

import pytest
from conftest import TOPOLOGIES

from sim.network import build_network
from sim.network.predict import predict_rows
from sim.topology import load_topology, parse_topology

GiB = 1 << 30


def busbw(topo, gpus, size, op="allreduce", **kw):
    net = build_network(topo, **kw)
    return predict_rows(op, gpus, [size], net)[0]


def dgx_a100():
    return load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml"))


def h100():
    return load_topology(str(TOPOLOGIES / "dgx-h100-1024.yaml"))


def hgx_4nic():
    # 2 × HGX A100 with 4 HDR NICs each (one NIC per pair of GPUs)
    text = (TOPOLOGIES / "dgx-a100-512.yaml").read_text()
    text = text.replace("count: 8", "count: 4").replace(
        "switch: [0, 0, 1, 1, 2, 2, 3, 3]\n    gpus: [[0], [1], [2], [3], [4], [5], [6], [7]]",
        "switch: [0, 1, 2, 3]\n    gpus: [[0, 1], [2, 3], [4, 5], [6, 7]]")
    topo = parse_topology(text, "hgx-4nic.yaml", nodes=2)
    assert topo.node.nics.count == 4
    return topo


# Every nccl-tests point of docs/calibration.md §A: (name, topology, GPUs, size, op, network
# options, measured low, measured high, quantity). Quantity "us": time in µs, "busbw": GB/s;
# "peak": busbw as a fraction of the measured peak of the same node (232.5 GB/s). A range is
# given where the source gives one. Only the first point calibrates a constant (the step
# overhead, sim/network/nccl.py); every other point is evaluation. The §A mid-size remark
# ("16 MB reaches roughly 45 % of peak", run not named) is not a point here: the ring pipeline
# ramp that met it is not in NCCL's ring kernels; 16 MB is checked against NCCL's own tuning
# model instead (tests/test_collectives_published.py, docs/calibration.md §A2).
POINTS = [
    ("DGX A100 8 GPUs, 8 B (calibration)", dgx_a100, 8, 8, "allreduce", {}, 33.7, 33.7, "us"),
    ("DGX A100 2 GPUs, 8 B", dgx_a100, 2, 8, "allreduce", {}, 10, 10, "us"),
    ("DGX A100 8 GPUs, 4 GB", dgx_a100, 8, 4 * GiB, "allreduce", {}, 232.5, 232.5, "busbw"),
    ("DGX A100 8 GPUs, 8 GB", dgx_a100, 8, 8 * GiB, "allreduce", {}, 232.5, 232.5, "busbw"),
    ("DGX A100 8 GPUs, 16 GB", dgx_a100, 8, 16 * GiB, "allreduce", {}, 0.80, 0.95, "peak"),
    ("8 x H100 ring, 2 GB", h100, 8, 2 * GiB, "allreduce", {"algorithm": "ring"}, 365, 370,
     "busbw"),
    ("8 x H100 ring, 4 GB", h100, 8, 4 * GiB, "allreduce", {"algorithm": "ring"}, 365, 370,
     "busbw"),
    ("2 DGX A100 (8 HDR each), 4 GB", dgx_a100, 16, 4 * GiB, "allreduce", {}, 192, 192, "busbw"),
    ("4 DGX A100, 4 GB", dgx_a100, 32, 4 * GiB, "allreduce", {}, 192, 192, "busbw"),
    ("8 DGX A100, 4 GB", dgx_a100, 64, 4 * GiB, "allreduce", {}, 192, 192, "busbw"),
    ("16 DGX A100, 4 GB", dgx_a100, 128, 4 * GiB, "allreduce", {}, 192, 192, "busbw"),
    ("2 HGX A100 (4 HDR each), 1 GB", hgx_4nic, 16, GiB, "allreduce", {}, 86, 91, "busbw"),
    ("2 HGX A100 (4 HDR each), 4 GB", hgx_4nic, 16, 4 * GiB, "allreduce", {}, 86, 91, "busbw"),
    ("2 HGX A100 (4 HDR each), 8 GB", hgx_4nic, 16, 8 * GiB, "allreduce", {}, 86, 91, "busbw"),
    ("HDR NIC through NCCL (send/recv)", dgx_a100, 16, 4 * GiB, "sendrecv", {}, 24, 24, "busbw"),
    ("NDR NIC through NCCL (send/recv)", h100, 16, 4 * GiB, "sendrecv", {}, 48, 49, "busbw"),
    ("8 x H100 NVLS (auto), 4 GB", h100, 8, 4 * GiB, "allreduce", {}, 480, 480, "busbw"),
]
PEAK_A100_GBPS = 232.5  # measured peak of one DGX A100, 4-8 GB (§A)


def predicted(point) -> float:
    _, topo, gpus, size, op, kw, _, _, what = point
    row = busbw(topo(), gpus, size, op, **kw)
    if what == "us":
        return row["time_s"] * 1e6
    return row["busbw_GBps"] / (PEAK_A100_GBPS if what == "peak" else 1)


@pytest.mark.parametrize("point", POINTS, ids=[p[0] for p in POINTS])
def test_every_nccl_tests_point_within_10_percent(point):
    lo, hi = point[6], point[7]
    got = predicted(point)
    assert 0.9 * lo <= got <= 1.1 * hi, (point[0], got, lo, hi)


def test_what_nccl_runs_by_size_on_one_dgx_a100():
    # LL for small messages (latency), Simple for large ones; the ring on one node
    assert busbw(dgx_a100(), 8, 8)["algorithm"] == "ring/LL"
    for size in (GiB, 4 * GiB, 8 * GiB):
        assert busbw(dgx_a100(), 8, size)["algorithm"] == "ring/Simple"
    for nodes in (4, 8, 16):
        assert busbw(dgx_a100(), 8 * nodes, 4 * GiB)["algorithm"].startswith("ring/")


def test_step_overhead_is_what_the_calibration_point_says():
    # (33.7 − 6.6 − 14 · (0.6 + 0.3)) / 14: NCCL's ring LL base 6.6 µs, 14 steps of NCCL's
    # NVLink LL hop 0.6 µs and the topology's 0.3 µs through the NVSwitch
    from sim.network import nccl
    assert nccl.STEP_OVERHEAD_US == pytest.approx((33.7 - 6.6 - 14 * 0.9) / 14, abs=0.005)


def test_bus_bandwidth_falls_at_small_sizes():
    rows = [busbw(dgx_a100(), 8, s)["busbw_GBps"] for s in (1 << 20, 16 << 20, 256 << 20, GiB)]
    assert rows == sorted(rows)
    assert rows[1] < 0.8 * rows[-1]


def test_nvlink_vs_pcie_node_tp_allreduce_ratio_is_the_bus_bandwidth_ratio():
    # same GPUs; the NVSwitch node's bus bandwidth is 100 GB/s per GPU, the PCIe node's ring is
    # bound by its 10 GB/s socket link (one ring edge per direction crosses it)
    nv = load_topology(str(TOPOLOGIES / "tiny-nvlink-4.yaml"))
    pc = load_topology(str(TOPOLOGIES / "tiny-pcie-4.yaml"))
    assert nv.gpu == pc.gpu
    for size in (GiB, 4 * GiB):
        t_nv, t_pc = busbw(nv, 4, size)["time_s"], busbw(pc, 4, size)["time_s"]
        # within the latency terms (NCCL's per-hop latency is larger on PCIe)
        assert t_pc / t_nv == pytest.approx(100 / 10, rel=0.03)
    # the shipped 8-GPU servers: 240 GB/s NVLink vs the PCIe server's 16 GB/s CPU link
    a100 = dgx_a100()
    pcie = load_topology(str(TOPOLOGIES / "pcie-a100-8gpu-16.yaml"))
    t_nv, t_pc = busbw(a100, 8, 4 * GiB)["time_s"], busbw(pcie, 8, 4 * GiB)["time_s"]
    assert t_pc / t_nv == pytest.approx(240 / 16, rel=0.03)

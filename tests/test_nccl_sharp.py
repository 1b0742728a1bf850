"""SHARP (CollNet Direct) all-reduce on a tiny hand-derived case, asserted exactly.

tiny-2x2 with ``sharp: true`` on its fabric: 2 nodes × 2 GPUs, 100 GB/s NVLink per GPU, one
10 GB/s NIC per GPU (2 rails), no physical latency, no launch overhead. S = 1e8 bytes.
1) reduce-scatter inside each node (ring of 2): (g−1)/g · S = 5e7 at 100 GB/s = 500,000 ns;
2) GPU j of both nodes sends S/g = 5e7 up its NIC and gets the switch's sum back: 5,000,000 ns,
   NCCL's CollNet latency 2 · (min(1, g−1) · 3.7 + (g−1) · 0.4) + 31 = 39.2 µs;
3) all-gather inside each node: 500,000 ns.
The ring all-reduce moves 2(n−1)/n · S / 2 rails = 0.75 S per NIC instead of 0.5 S.
"""

from __future__ import annotations

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.errors import UsageError
from sim.network import build_network
from sim.network.base import CommRequest
from sim.topology import parse_topology

S = 100_000_000
WANT = 500_000 + (5_000_000 + round((2 * (3.7 + 0.4) + 31) * 1000)) + 500_000


def sharp_topology(sharp: bool = True):
    text = (TOPOLOGIES / "tiny-2x2.yaml").read_text().replace(
        "link_bandwidth_gbps: 80\n  levels:",
        f"link_bandwidth_gbps: 80\n  sharp: {str(sharp).lower()}\n  levels:")
    assert "sharp: " in text
    return parse_topology(text, "tiny-sharp.yaml")


def allreduce(size: int = S) -> CommRequest:
    return CommRequest(CollKind.ALLREDUCE, GroupKind.DP, (0, 1, 2, 3), size)


def test_collnet_is_the_hand_derived_time():
    net = build_network(sharp_topology(), algorithm="collnet")
    res = net.isolated(allreduce())
    assert (res.duration_ns, res.algorithm) == (WANT, "collnet/Simple")
    assert WANT == 6_039_200


def test_collnet_is_chosen_only_when_enabled_and_declared():
    # NCCL_COLLNET_ENABLE defaults to 0: the ring (7.5e6 ns of transfer alone) runs
    assert build_network(sharp_topology()).isolated(allreduce()).algorithm.startswith("ring/")
    on = build_network(sharp_topology(), collnet_enable=True)
    assert on.isolated(allreduce()).algorithm == "collnet/Simple"
    # a fabric without SHARP: never; the switch would change nothing there and is refused
    off = build_network(sharp_topology(False))
    assert not off.isolated(allreduce()).algorithm.startswith("collnet")
    with pytest.raises(UsageError, match="sharp: true"):
        build_network(sharp_topology(False), collnet_enable=True)
    # inside one node it does not apply
    assert not on.isolated(CommRequest(CollKind.ALLREDUCE, GroupKind.TP, (0, 1), S)
                           ).algorithm.startswith("collnet")

"""Contention: flows share links max-min fairly inside the SimPy loop.

Timelines are exact ``(time_ns, what)`` logs. tiny-fattree-8: 8 one-GPU nodes, one 10 GB/s NIC
each, 2 nodes per leaf; no latencies except NCCL's (send/recv Simple across nodes: 8.4 + 14 µs
= 22,400 ns; 2-rank all-reduce ring Simple across nodes: (8.4 + 2 · 14) · 1.4 µs = 50,960 ns).
"""

from __future__ import annotations

import pytest
import simpy
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.network import build_network
from sim.network.base import CommRequest
from sim.parallel.placement import Placement
from sim.topology import load_topology, parse_topology

P2P_LAT = 22_400
# 2-rank ring all-reduce across nodes, 1e8 bytes: NCCL latency + physical 50,960 ns and two step
# overheads of 1.04 µs (a ring has no pipeline ramp: sim/network/nccl.py RING_RAMP_DEPTH)
AR2_LAT = 50_960 + 2 * 1040


def run(net, placement, jobs, symmetric=False):
    """Start each (delay_ns, request) at its time; return the sorted (end_ns, ranks) log."""
    env = simpy.Environment()
    net.bind(env, placement, symmetric)
    log = []

    def go(delay, req):
        yield env.timeout(delay)
        res = yield net.start(req)
        log.append((env.now, req.ranks, res.duration_ns))

    for delay, req in jobs:
        env.process(go(delay, req))
    env.run()
    return sorted(log)


def send(a, b, size):
    return CommRequest(CollKind.SENDRECV, GroupKind.PP, (a, b), size)


def fattree(**kw):
    return build_network(load_topology(str(TOPOLOGIES / "tiny-fattree-8.yaml")), **kw)


def test_one_flow_alone_matches_isolated():
    net = fattree()
    assert run(net, Placement(1, 8, 1), [(0, send(0, 2, 10_000_000))]) == [
        (1_000_000 + P2P_LAT, (0, 2), 1_000_000 + P2P_LAT)]
    assert net.isolated(send(0, 2, 10_000_000)).duration_ns == 1_000_000 + P2P_LAT


def test_two_flows_over_one_link_each_get_half():
    # 0→2 and 1→2 share node 2's NIC down-link (10 GB/s): 5 GB/s each
    log = run(fattree(), Placement(1, 8, 1), [(0, send(0, 2, 10_000_000)),
                                              (0, send(1, 2, 10_000_000))])
    assert log == [(2_000_000 + P2P_LAT, (0, 2), 2_000_000 + P2P_LAT),
                   (2_000_000 + P2P_LAT, (1, 2), 2_000_000 + P2P_LAT)]


def test_rates_are_recomputed_when_a_flow_ends_or_starts():
    # 1e7 and 2e7 bytes into node 2: both at 5 GB/s until the first is done at 2e6 ns, then the
    # second alone at 10 GB/s for its last 1e7 bytes: done at 3e6 ns.
    log = run(fattree(), Placement(1, 8, 1), [(0, send(0, 2, 10_000_000)),
                                              (0, send(1, 2, 20_000_000))])
    assert log == [(2_000_000 + P2P_LAT, (0, 2), 2_000_000 + P2P_LAT),
                   (3_000_000 + P2P_LAT, (1, 2), 3_000_000 + P2P_LAT)]
    # a late starter: 0→2 alone for 1e6 ns (1e7 of its 2e7 bytes), then both at 5 GB/s until
    # the 5e6-byte newcomer is done at 2e6 ns, then 0→2's last 5e6 bytes alone: 2.5e6 ns.
    log = run(fattree(), Placement(1, 8, 1), [(0, send(0, 2, 20_000_000)),
                                              (1_000_000, send(1, 2, 5_000_000))])
    assert log == [(2_000_000 + P2P_LAT, (1, 2), 1_000_000 + P2P_LAT),
                   (2_500_000 + P2P_LAT, (0, 2), 2_500_000 + P2P_LAT)]


def test_opposite_directions_do_not_share():
    log = run(fattree(), Placement(1, 8, 1), [(0, send(0, 2, 10_000_000)),
                                              (0, send(2, 0, 10_000_000))])
    assert [t for t, _, _ in log] == [1_000_000 + P2P_LAT] * 2


def test_max_min_fairness_gives_leftover_capacity_to_the_unconstrained_flow():
    # A: 0→2 and B: 1→2 share node 2's down-link: 5 GB/s each. C: 1→3 shares node 1's up-link
    # with B, which uses only 5, so C gets the other 5. D: 4→6 shares nothing: 10.
    # (adaptive routing: the 20 GB/s of leaf 0's up-links carry A + B + C = 15 freely)
    net = fattree(routing="adaptive")
    env = simpy.Environment()
    net.bind(env, Placement(1, 8, 1), False)
    for req in (send(0, 2, 10**9), send(1, 2, 10**9), send(1, 3, 10**9), send(4, 6, 10**9)):
        net.start(req)
    rates = {e[3].owner.req.ranks: e[3].rate for e in net.solver.heap if e[2] == e[3].ver}
    assert rates == {(0, 2): 5.0, (1, 2): 5.0, (1, 3): 5.0, (4, 6): 10.0}


def _oversub_topology(ratio: int) -> str:
    # 8 one-GPU nodes, leaves with 4 node ports and 4/ratio up-links, two leaves
    radix = 4 + 4 // ratio
    return f"""
nodes: 8
node:
  gpus: 1
  gpu: {{name: g, peak_tflops: {{bf16: 1}}, hbm_GB: 1, hbm_GBps: 1}}
  pcie: {{bandwidth_GBps: 40}}
  nics: {{count: 1, bandwidth_gbps: 80}}
fabric:
  link_bandwidth_gbps: 80
  levels:
    - {{name: leaf, radix: {radix}, oversubscription: {ratio}}}
    - {{name: spine, radix: 2}}
collectives: {{launch_overhead_ns: 0}}
"""


@pytest.mark.parametrize("routing", ["ecmp", "adaptive"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_oversubscribed_fabric_slows_cross_leaf_dp_allreduce_by_the_ratio(routing, symmetric):
    S = 100_000_000
    iso = S // 10 + AR2_LAT  # 2-rank ring: each rank sends 2(n−1)/n · S = S at 10 GB/s
    # DP groups (s, s+4) cross the leaves (placement tp-pp-dp): the 4 flows leaving a leaf
    # share its up-links. 4:1 → one 10 GB/s up-link for 4 flows: 4× the transfer time.
    cross = Placement(1, 2, 4, order="tp-pp-dp")
    # DP groups (2s, 2s+1) stay inside a leaf (tp-dp-pp): no up-link used.
    local = Placement(1, 2, 4, order="tp-dp-pp")
    for ratio, factor in ((1, 1), (4, 4)):
        net = build_network(parse_topology(_oversub_topology(ratio), f"os{ratio}.yaml"),
                            algorithm="ring", protocol="Simple", routing=routing)
        for placement, want in ((cross, factor), (local, 1)):
            reqs = [CommRequest(CollKind.ALLREDUCE, GroupKind.DP, g, S)
                    for g in placement.groups(GroupKind.DP)]
            assert net.isolated(reqs[0]).duration_ns == iso
            got = run(net, placement, [(0, r) for r in reqs], symmetric)
            assert [t for t, _, _ in got] == [want * (S // 10) + AR2_LAT] * 4, (ratio, placement)


def test_symmetric_copies_sharing_a_nic_slow_each_other_like_per_rank():
    # 2 nodes × 2 GPUs sharing ONE 10 GB/s NIC; TP = 2, DP = 2 across nodes. The two TP ranks'
    # DP rings both go through the node's NIC: each gets 5 GB/s. Symmetric mode simulates only
    # the (tp 0) DP group and must give the same time as starting both groups per rank.
    text = (TOPOLOGIES / "tiny-2x2.yaml").read_text().replace(
        "nics: {count: 2, bandwidth_gbps: 80}", "nics: {count: 1, bandwidth_gbps: 80}")
    net = build_network(parse_topology(text, "shared-nic.yaml"), algorithm="ring",
                        protocol="Simple")
    pl = Placement(2, 2, 1)
    S = 100_000_000
    groups = pl.groups(GroupKind.DP)
    assert groups == [(0, 2), (1, 3)]
    per_rank = run(net, pl, [(0, CommRequest(CollKind.ALLREDUCE, GroupKind.DP, g, S))
                             for g in groups])
    sym = run(net, pl, [(0, CommRequest(CollKind.ALLREDUCE, GroupKind.DP, groups[0], S))],
              symmetric=True)
    want = 2 * S // 10 + AR2_LAT
    assert [t for t, _, _ in per_rank] == [want, want]
    assert sym == [per_rank[0]]
    # the isolated cost (the group alone) is half of that
    assert net.isolated(CommRequest(CollKind.ALLREDUCE, GroupKind.DP, (0, 2), S)).duration_ns \
        == S // 10 + AR2_LAT
    st = net.contention_stats()[GroupKind.DP]
    assert (st.count, st.actual_ns, st.isolated_ns) == (1, want, S // 10 + AR2_LAT)
    assert st.slowdown == pytest.approx(want / (S // 10 + AR2_LAT))


def test_stats_and_describe_report_contention():
    net = fattree()
    run(net, Placement(1, 8, 1), [(0, send(0, 2, 10_000_000)), (0, send(1, 2, 10_000_000))])
    st = net.contention_stats()[GroupKind.PP]
    assert (st.count, st.size_bytes) == (2, 20_000_000)
    assert st.actual_ns == 2 * (2_000_000 + P2P_LAT) and st.isolated_ns == 2 * (1_000_000
                                                                                + P2P_LAT)
    text = "\n".join(net.describe())
    assert "contention: PP: 2 communications" in text and "max-min" in text
    assert "chosen: PP sendrecv over 2 ranks: direct/Simple (2×)" in text

"""The AMD MI300X platform: 8 GPUs on a switchless xGMI full mesh (every pair its own link),
topologies/mi300x.yaml, checked against hand-derived closed forms.

Each link: 64 GB/s per direction × 0.75 = 48 GB/s (RCCL's GFX94X_XGMI_WIDTH). Physical
latencies and the launch overhead set to 0 (``--set``). NCCL/RCCL latency terms as in
tests/test_collective_alphabeta.py (xGMI is an NVLink-class link in RCCL: LINK_NVL).
1 GB/s = 1 byte/ns.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.errors import InputError
from sim.network import build_network
from sim.network.base import CommRequest
from sim.network.plans import build_plan
from sim.topology import load_topology, parse_topology

PATH = TOPOLOGIES / "mi300x.yaml"
ZERO = ("node.xgmi.latency_ns=0", "collectives={launch_overhead_ns: 0}")
S = 1 << 30
N = 8
LINK = 48.0
STEP = 1.04  # µs per ring step (sim/network/nccl.py STEP_OVERHEAD_US)


def topo(*extra: str, text: str | None = None):
    return parse_topology(text or PATH.read_text(), str(PATH), overrides=ZERO + extra)


def alone(t, kind, ranks, algorithm="auto", size=S):
    res = build_network(t, algorithm=algorithm, protocol="Simple").isolated(
        CommRequest(kind, GroupKind.TP, tuple(ranks), size))
    return res.duration_ns, res.algorithm


def test_mesh_loads_and_routes_every_pair_over_its_own_link():
    t = load_topology(str(PATH))
    assert t.node.intra_kind == "xgmi" and t.warnings == ()
    assert any("xGMI full mesh" in line and "48 GB/s per link" in line for line in t.describe())
    cl = build_network(t).cluster
    for a in range(N):
        for b in range(N):
            if a != b:
                names = cl.path_names(a, b)
                assert names == [(("gpu", 0, a), ("gpu", 0, b))]
                assert cl.cap[cl.link(*names[0])] == LINK


def test_alltoall_direct_uses_every_link_once():
    # every GPU sends S/8 to each of its 7 peers, each over the pair's own link, all at once:
    # (S/8) / 48 GB/s; latency 7 NVLink-class steps: 8.4 + 7 · 3.4 µs
    got, algo = alone(topo(), CollKind.ALLTOALL, range(N))
    assert algo == "direct/Simple"
    assert got == math.ceil(S / N / LINK) + round((8.4 + 7 * 3.4) * 1000)


def test_ring_allreduce_runs_seven_link_disjoint_rings():
    t = topo()
    plan = build_plan(build_network(t).cluster, CollKind.ALLREDUCE, "ring", tuple(range(N)))
    arcs = Counter(e[:2] for cf in plan.phases[0].coflows for e in cf.edges)
    # 7 rings of 8 edges: each of the 56 directed links exactly once per step
    assert len(plan.phases[0].coflows) == 7 and len(arcs) == 56 and set(arcs.values()) == {1}
    # each link carries 2(n−1)/n · S / 7 at 48 GB/s; latency 8.4 + 14 · (3.4 + STEP) µs; no
    # pipeline ramp (every rank sends from the first step)
    want = (math.ceil(2 * (N - 1) / N * S / 7 / LINK) + round((8.4 + 14 * (3.4 + STEP)) * 1000))
    got, algo = alone(t, CollKind.ALLREDUCE, range(N), algorithm="ring")
    assert algo == "ring/Simple" and got == pytest.approx(want, abs=2)
    # bus bandwidth at 1 GiB ≈ 7 links' 336 GB/s less latency (71 µs of 5.66 ms): 332
    assert 2 * (N - 1) / N * S / got == pytest.approx(332, rel=0.01)


def test_rings_across_nodes_share_no_intra_node_link():
    # 2 nodes: 8 channels (one per NIC), each walks its node from the GPU next to its NIC to
    # the other GPU on that NIC's PCIe switch; no two channels share a mesh link
    cl = build_network(topo("nodes=2")).cluster
    plan = build_plan(cl, CollKind.ALLREDUCE, "ring", tuple(range(16)))
    intra = Counter(e[:2] for cf in plan.phases[0].coflows for e in cf.edges
                    if e[0] // N == e[1] // N)
    assert len(plan.phases[0].coflows) == 8 and set(intra.values()) == {1}


@pytest.mark.parametrize("edit, field", [
    ("links_per_gpu: 7", "links_per_gpu: 6"),
    ("link_bandwidth_GBps: 64", "link_bandwidth_GBps: -64"),
])
def test_bad_amd_keys_get_one_line_errors(edit, field):
    with pytest.raises(InputError) as e:
        parse_topology(PATH.read_text().replace(edit, field), str(PATH))
    msg = str(e.value)
    assert "mi300x.yaml" in msg and f"node.xgmi.{edit.split(':')[0]}" in msg and "\n" not in msg


def test_a_node_has_a_mesh_or_an_nvswitch_not_both():
    text = PATH.read_text().replace(
        "  xgmi:", "  nvlink: {links_per_gpu: 18, link_bandwidth_GBps: 25}\n  xgmi:")
    with pytest.raises(InputError, match="node.xgmi: a node has either an NVSwitch"):
        parse_topology(text, str(PATH))


def test_graph_form_has_the_mesh_and_every_route_is_made_of_its_edges():
    from sim.topology.cluster import Cluster
    from sim.topology.graph import build_graph
    t = load_topology(str(PATH), nodes=2)
    g = build_graph(t)
    cl = Cluster(t)
    assert sum(1 for u, v in g.edges if u[0] == v[0] == "gpu") == 2 * N * (N - 1)
    for src, dst in ((0, 5), (3, 12), (15, 0), (6, 9)):
        for u, v in cl.path_names(src, dst):
            assert g.has_edge(u, v), (src, dst, u, v)

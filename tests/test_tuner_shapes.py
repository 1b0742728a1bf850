"""Requests of one shape (sim/network/shapes.py) share the tuner's choice: every shared choice
equals the one worked out for the request itself, on uniform clusters of every node kind,
routing and interconnect; the sharing is off where a cluster is not uniform."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind
from sim.faults import Faults
from sim.network import build_network
from sim.network import tuner as tuner_mod
from sim.topology import load_topology

KINDS = (CollKind.ALLREDUCE, CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.BROADCAST,
         CollKind.SENDRECV)
SIZES = (1 << 10, 200_000, 1 << 22, 3 << 27)
CASES = [("dgx-a100-1024.yaml", 16, None), ("dgx-h100-scalable.yaml", 32, "ecmp"),
         ("dgx-h100-scalable.yaml", 32, "adaptive"), ("dgx-h100-rail-only.yaml", None, None),
         ("pcie-a100-8gpu-16.yaml", None, None), ("mi300x.yaml", None, None),
         ("gb200-nvl72.yaml", None, None), ("tiny-pcie-4.yaml", None, None)]


def requests(gpn: int, gpus: int) -> list[tuple[CollKind, tuple[int, ...], int]]:
    """Groups inside nodes (the same local indices on several nodes), groups across nodes
    and send/recv pairs within and across nodes, at several sizes."""
    rng = random.Random(5)
    nodes = gpus // gpn
    out = []
    for _ in range(6):
        local = tuple(sorted(rng.sample(range(gpn), rng.randint(2, gpn))))
        for n in rng.sample(range(nodes), min(3, nodes)):
            for kind in KINDS[:4]:
                out.append((kind, tuple(n * gpn + i for i in local), rng.choice(SIZES)))
    for _ in range(6):  # across nodes: the same local GPUs on 2-4 nodes, in several places
        local = tuple(sorted(rng.sample(range(gpn), rng.randint(1, min(gpn, 3)))))
        span = rng.randint(2, min(4, nodes)) if nodes > 1 else 1
        for _ in range(3):
            first = rng.sample(range(nodes), span)
            for kind in KINDS[:4]:
                ranks = tuple(n * gpn + i for n in first for i in local)
                out.append((kind, ranks, rng.choice(SIZES)))
    for _ in range(40):
        a, b = rng.sample(range(gpus), 2)
        out.append((CollKind.SENDRECV, (a, b), rng.choice(SIZES)))
        out.append((CollKind.SENDRECV, (a, (a + gpn * rng.randint(1, 3)) % gpus),
                    rng.choice(SIZES)))
    return out


@pytest.mark.parametrize("pinned", [None, frozenset({0, 1})], ids=["per-rank", "symmetric"])
@pytest.mark.parametrize("name,nodes,routing", CASES)
def test_shared_choices_equal_own_choices(monkeypatch, name, nodes, routing, pinned):
    """Every rank simulated, or symmetric simulation with nodes 0 and 1 simulated (plans
    reduced to a representative's links)."""
    topo = load_topology(str(TOPOLOGIES / name), nodes=nodes)
    reqs = requests(topo.gpus_per_node, topo.num_gpus)
    shared = build_network(topo, routing=routing).tuner
    shared.pin(pinned, pinned is not None)
    got = [shared.choose(k, r, s) for k, r, s in reqs]
    assert len(shared.alike) < len(reqs)  # some requests did share a choice
    monkeypatch.setattr(tuner_mod, "choose_alike", lambda _t, k, r, s, choose: choose(k, r, s))
    own = build_network(topo, routing=routing).tuner
    own.pin(pinned, pinned is not None)
    for (kind, ranks, size), (plan, proto, ns) in zip(reqs, got, strict=True):
        p2, proto2, ns2 = own.choose(kind, ranks, size)
        assert (plan.algorithm, plan.ranks, proto, ns) == (p2.algorithm, p2.ranks, proto2, ns2)
        assert plan.ranks == ranks


@pytest.mark.parametrize("faults", [Faults(degraded={("nvlink", 9): 0.5}),
                                    Faults(failed_nics=frozenset({(2, 1)}))])
def test_no_sharing_on_a_perturbed_cluster(faults):
    """A degraded NVLink of node 1 or a failed NIC of node 2: nodes differ, nothing is
    shared (and node 1's all-reduce is slower than node 0's)."""
    topo = replace(load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml"), nodes=4),
                   faults=faults)
    tuner = build_network(topo).tuner
    times = [tuner.choose(CollKind.ALLREDUCE, tuple(range(8 * n, 8 * n + 8)), 1 << 26)[2]
             for n in range(4)]
    assert tuner.alike == {}
    if faults.degraded:
        assert times[1] > times[0] == times[2]


@pytest.mark.parametrize("name,nodes,routing", CASES)
def test_bandwidths_keyed_by_node_shape_equal_own(monkeypatch, name, nodes, routing):
    """The ring and tree bandwidths the tuner keys by a group's local indices (one entry for
    the same group in every node) equal those worked out for each group."""
    topo = load_topology(str(TOPOLOGIES / name), nodes=nodes)
    groups = sorted({r for k, r, _ in requests(topo.gpus_per_node, topo.num_gpus)
                     if k is not CollKind.SENDRECV})
    shared = build_network(topo, routing=routing).tuner
    got = [(shared.ring_busbw_GBps(g), shared.tree_busbw_GBps(g)) for g in groups]
    monkeypatch.setattr(tuner_mod, "node_shape", lambda _t, _r: None)
    own = build_network(topo, routing=routing).tuner
    assert got == [(own.ring_busbw_GBps(g), own.tree_busbw_GBps(g)) for g in groups]
    if topo.num_gpus > topo.gpus_per_node:  # several nodes: some groups shared an entry
        assert len(shared._memo) < len(own._memo)  # noqa: SLF001

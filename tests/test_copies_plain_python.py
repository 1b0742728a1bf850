"""The plain-Python paths of symmetric copies and bulk route counting (small stages, few
routes: no numpy) give exactly what the numpy paths give (large stages, many routes)."""

from __future__ import annotations

import random

import pytest
from conftest import TOPOLOGIES

from sim.comm import CollKind, GroupKind
from sim.network import symmetry
from sim.parallel.placement import EXPERT_KINDS, Placement
from sim.parallel.rank_classes import RankClasses
from sim.topology import cluster as cluster_mod
from sim.topology import load_topology
from sim.topology.cluster import Cluster

PLACEMENTS = [Placement(8, 8, 16), Placement(4, 16, 4, ep=4), Placement(8, 4, 2, ep=4, etp=2),
              Placement(2, 8, 2, cp=2), Placement(4, 8, 2, order="dp-tp-pp"),
              Placement(8, 16, 2, ep=8, etp=1)]
GROUPS = [GroupKind.TP, GroupKind.DP, GroupKind.EP, GroupKind.CP, GroupKind.DP_EP,
          GroupKind.ETP]


def requests(pl: Placement):
    """(kind, group, ranks) of collectives of several ranks' groups and of stage-to-stage
    sends (pipeline neighbours, and a pair that is no copyable send)."""
    rng = random.Random(3)
    out = []
    for r in rng.sample(range(pl.world_size), 6):
        for g in GROUPS:
            if g in EXPERT_KINDS or g is GroupKind.CP or pl.cp == 1:
                out.append((CollKind.ALLREDUCE, g, pl.group(g, r)))
        c = pl.coord(r)
        if pl.pp > 1:
            nxt = pl.rank(c.tp, c.dp, (c.pp + 1) % pl.pp)
            out.append((CollKind.SENDRECV, GroupKind.PP, (r, nxt)))
            out.append((CollKind.SENDRECV, GroupKind.PP, (r, (nxt + 1) % pl.world_size)))
    return out


def both(monkeypatch, fn):
    """``fn()`` with every stage small (plain Python), then with every stage large (numpy)."""
    monkeypatch.setattr(symmetry, "SMALL_STAGE", 1 << 30)
    small = fn()
    monkeypatch.setattr(symmetry, "SMALL_STAGE", 0)
    return small, fn()


@pytest.mark.parametrize("pl", PLACEMENTS, ids=lambda p: f"tp{p.tp}dp{p.dp}pp{p.pp}ep{p.ep}")
def test_copies_plain_python_equal_numpy(monkeypatch, pl):
    reqs = requests(pl)
    small, large = both(monkeypatch, lambda: [symmetry.copies(pl, k, g, r) for k, g, r in reqs])
    assert small == large
    assert any(len(c) > 1 for c in small)  # the requests do have copies


@pytest.mark.parametrize("pl", PLACEMENTS, ids=lambda p: f"tp{p.tp}dp{p.dp}pp{p.pp}ep{p.ep}")
@pytest.mark.parametrize("topo_name", ["dgx-a100-1024.yaml", "dgx-h100-scalable.yaml"])
def test_local_copies_plain_python_equal_numpy(monkeypatch, pl, topo_name):
    topo = load_topology(str(TOPOLOGIES / topo_name), nodes=pl.world_size // 8)
    cl = Cluster(topo)
    classes = [None, RankClasses.symmetric(pl), RankClasses.isolating(pl, [1], [0, 3]),
               RankClasses.per_rank(pl)]
    cases = []
    for kind, group, ranks in requests(pl):
        links = {link for a in ranks for b in ranks if a != b for link in cl.path(a, b)}
        scopes = symmetry.link_scopes(cl, links)
        cases += [(kind, group, ranks, scopes, c) for c in classes]

    def run():
        return [symmetry.local_copies(pl, k, g, r, cl, s, c) for k, g, r, s, c in cases]

    small, large = both(monkeypatch, run)
    assert small == large
    kept = [len(c) for c in small]
    assert min(kept) == 1  # requests without copies near the representative's links
    if pl.world_size >= 512:  # several leaves: copies on the representative's leaf are kept
        assert max(kept) > 1


@pytest.mark.parametrize("routing", ["dmodk", "ecmp", "adaptive"])
def test_route_by_route_count_equals_bulk_count(monkeypatch, routing):
    topo = load_topology(str(TOPOLOGIES / "dgx-h100-scalable.yaml"), nodes=256)
    cl = Cluster(topo, routing)
    rng = random.Random(11)
    src = [rng.randrange(topo.num_gpus) for _ in range(300)]
    dst = [rng.randrange(topo.num_gpus) for _ in range(300)]
    every = sorted({n for s, d in zip(src, dst, strict=True) for n in cl.fabric_names(s, d)})
    wanted = {name: i for i, name in enumerate(every)}
    monkeypatch.setattr(cluster_mod, "BULK_ROUTES", 1 << 30)
    one_by_one = cl.count_fabric_links(src, dst, 0, wanted)
    monkeypatch.setattr(cluster_mod, "BULK_ROUTES", 0)
    bulk = cl.count_fabric_links(src, dst, 0, wanted)
    assert one_by_one == bulk
    assert list(one_by_one) == list(bulk)  # same keys in the same order (load order)
    assert sum(one_by_one.values()) > 300

"""End to end: the 1024-GPU seed (TP 8 × PP 16 × DP 8) on dgx-a100-1024 vs its 4:1
oversubscribed variant (32 node ports and 8 up-links per leaf).

Physics first: with Megatron's default placement (tp-dp-pp) a stage's 8 DP replicas are 8
consecutive nodes, which sit under one 32-node leaf on every rail, so the DP rings never use a
leaf up-link and oversubscription cannot slow them — the model must show *no* change. With the
DP dimension outermost (tp-pp-dp) every DP ring spans all four leaves of its rail and the 16
stages' rings share the leaves' up-links; with static ECMP hashing (`--routing ecmp`) their
flows collide on the up-links, which the oversubscribed fabric has 2.5× fewer of: exposed DP
communication grows, and the report says so (its achieved-vs-isolated contention line). The
fabric's default D-mod-K routing gives the rings' leaf-crossing flows distinct up-links on the
non-blocking tree.
"""

from __future__ import annotations

import json

import pytest
from conftest import SEED_1024, TOPOLOGIES

from sim.cli import main as simrun

pytestmark = pytest.mark.slow


def run(tmp_path, topo: str, *extra: str) -> dict:
    out = tmp_path / f"{topo}{'-'.join(extra)}.json"
    assert simrun(["--workload", str(SEED_1024), "--topo", str(TOPOLOGIES / f"{topo}.yaml"),
                   "--quiet", "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def exposed_dp_s(rep: dict) -> float:
    return sum(s["exposed_comm_s"]["DP"] for s in rep["stages"]) / len(rep["stages"])


def dp_contention(rep: dict) -> float:
    (line,) = [a for a in rep["assumptions"] if a.startswith("contention: DP:")]
    return float(line.rsplit("× ", 1)[1].rstrip(")"))


def test_dp_rings_under_one_leaf_are_not_affected(tmp_path):
    # --row-placement all keeps the embedding_grads all-reduce in each stage's TP group: the
    # default puts it in Megatron's embedding group (stage 0 with stage 15, across leaves), whose
    # flows share the first and last stages' NIC links with their DP rings and would mix a
    # second effect into this one
    base = run(tmp_path, "dgx-a100-1024", "--row-placement", "all")
    over = run(tmp_path, "dgx-a100-1024-oversub4", "--row-placement", "all")
    assert exposed_dp_s(over) == pytest.approx(exposed_dp_s(base), abs=1e-6)
    assert dp_contention(base) == dp_contention(over) == 1.0


def test_cross_leaf_dp_exposed_comm_grows_on_the_oversubscribed_fabric(tmp_path):
    base = run(tmp_path, "dgx-a100-1024", "--placement", "tp-pp-dp", "--routing", "ecmp")
    over = run(tmp_path, "dgx-a100-1024-oversub4", "--placement", "tp-pp-dp", "--routing", "ecmp")
    assert exposed_dp_s(over) > 1.1 * exposed_dp_s(base)
    assert over["iteration_time_s"] > base["iteration_time_s"]
    assert dp_contention(over) > dp_contention(base) > 1.0
    # the report states the slowdown in words, for the DP group
    assert any(a.startswith("contention: DP:") and "isolated" in a for a in over["assumptions"])


def test_cross_leaf_dp_rings_do_not_collide_under_dmodk(tmp_path):
    ecmp = run(tmp_path, "dgx-a100-1024", "--placement", "tp-pp-dp", "--routing", "ecmp")
    dmodk = run(tmp_path, "dgx-a100-1024", "--placement", "tp-pp-dp")
    assert dp_contention(dmodk) == 1.0 < dp_contention(ecmp)
    assert exposed_dp_s(dmodk) < exposed_dp_s(ecmp)

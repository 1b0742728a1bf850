"""MoE token dispatch across nodes: Megatron-Core's flex dispatcher (DeepEP) sends a token once
per destination node and runs hierarchically (NVLink inside a node, RDMA between); the
shared-expert width flag; how many nodes an EP group spans."""

import itertools
import json
import math
from dataclasses import replace

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind
from sim.errors import UsageError
from sim.models.features.moe import distinct_nodes
from sim.models.flops import model_flops_per_iteration
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import load_model
from sim.parallel.config import Training
from sim.scenario.model_run import ep_nodes, with_training_overrides
from sim.scenario.options import NetworkOptions
from sim.scenario.steps import dispatcher_network
from sim.topology import load_topology

MODELS = ROOT / "workloads/models"


@pytest.mark.parametrize("experts, k, nodes", [(8, 2, 2), (8, 3, 4), (12, 4, 3), (16, 2, 8)])
def test_distinct_nodes_equals_enumeration(experts, k, nodes):
    # every top-k expert set equally likely; experts in equal contiguous blocks per node
    per = experts // nodes
    sets = list(itertools.combinations(range(experts), k))
    mean = sum(len({e // per for e in s}) for s in sets) / len(sets)
    assert distinct_nodes(experts, k, nodes) == pytest.approx(mean, rel=1e-12)
    assert distinct_nodes(experts, k, 1) == 1.0


def _dispatch_sizes(model, **kw):
    par = make_par(global_batch=kw.pop("dp", 16), dp=16, flash_attention=True, **kw)
    plan = build_model_plan(model, par)
    return [r.fwd_comm.size_bytes for st in plan.stages for rows in st.chunks for r in rows
            if r.fwd_comm is not None and r.fwd_comm.kind is CollKind.ALLTOALL]


def test_flex_dispatch_carries_one_copy_per_destination_node():
    m = load_model(MODELS / "deepseek-v3-like.yaml")
    n, h = 4096, 7168  # tokens of one sequence (tp 1), hidden
    flat = _dispatch_sizes(m, ep=16)
    assert set(flat) == {n * 8 * h * 2}  # top-8 copies, bf16
    # flex over 2 nodes: 1.993 node copies per token
    flex = _dispatch_sizes(m, ep=16, moe_token_dispatcher="flex", ep_nodes=2)
    assert set(flex) == {math.ceil(n * distinct_nodes(256, 8, 2)) * h * 2}
    assert len(flex) == len(flat)
    # inside one node DeepEP sends a token once per destination rank (deep_ep Buffer.dispatch:
    # is_token_in_rank): 16 ranks of 16 experts each miss a token with probability
    # Π_{i<8} (240 − i)/(256 − i), so 16 · (1 − that) = 6.523 of its 8 copies travel
    one_node = _dispatch_sizes(m, ep=16, moe_token_dispatcher="flex", ep_nodes=1)
    miss = math.prod((240 - i) / (256 - i) for i in range(8))
    assert set(one_node) == {math.ceil(n * 16 * (1 - miss)) * h * 2} == {383057920}
    assert len(one_node) == len(flat)
    # one expert per rank: every copy goes to a different rank, as with the alltoall dispatcher
    m16 = replace(m, moe=replace(m.moe, experts=16))
    solo = _dispatch_sizes(m16, ep=16, moe_token_dispatcher="flex", ep_nodes=1)
    assert set(solo) == set(_dispatch_sizes(m16, ep=16)) == {n * 8 * h * 2}
    # a load factor scales the busiest GPU's copies either way
    hot = _dispatch_sizes(m, ep=16, moe_token_dispatcher="flex", ep_nodes=2,
                          moe_load_imbalance=1.5)
    assert set(hot) == {math.ceil(n * distinct_nodes(256, 8, 2) * 1.5) * h * 2}


def test_mixtral_flex_across_two_nodes():
    m = load_model(MODELS / "mixtral-8x22b.yaml")  # 8 experts, top-2
    sizes = _dispatch_sizes(m, ep=8, moe_token_dispatcher="flex", ep_nodes=2, pp=8,
                            recompute="full")
    # top-2 of 8 experts, 4 per node: 1 + 3/7·... = 2·(1 − C(4,2)/C(8,2)) = 11/7 node copies
    assert set(sizes) == {math.ceil(4096 * 11 / 7) * 6144 * 2}


@pytest.mark.parametrize("tp, dp, ep, order, nodes", [
    (1, 32, 16, "tp-dp-pp", 2),  # 16 consecutive ranks on 8-GPU nodes
    (1, 32, 8, "tp-dp-pp", 1),
    (8, 4, 2, "tp-dp-pp", 2),  # EP ranks 0 and 8
    (1, 32, 4, "dp-tp-pp", 1),
    (1, 8, 8, "pp-dp-tp", 8),  # dp stride = pp = 8: one EP rank per node
])
def test_ep_nodes_from_placement(tp, dp, ep, order, nodes):
    topo = load_topology(str(ROOT / "topologies/dgx-h100-scalable.yaml"), nodes=8)
    pp = 64 // (tp * dp)
    par = make_par(tp=tp, dp=dp, pp=pp, ep=ep, global_batch=dp)
    assert ep_nodes(par, topo, order) == nodes


def test_dispatcher_network_options():
    par = make_par(dp=16, ep=16, global_batch=16, moe_token_dispatcher="flex")
    got = dispatcher_network(NetworkOptions(), par).algorithm
    assert got == "alltoall=hierarchical"
    got = dispatcher_network(NetworkOptions(algorithm="allreduce=tree"), par).algorithm
    assert got == "allreduce=tree,alltoall=hierarchical"
    mine = NetworkOptions(algorithm="alltoall=direct")  # the user's choice wins
    assert dispatcher_network(mine, par) is mine
    got = dispatcher_network(NetworkOptions(algorithm="ring"), par).algorithm
    assert "alltoall=hierarchical" in got and "allreduce=ring" in got
    par = make_par(dp=16, ep=16, global_batch=16)
    assert dispatcher_network(NetworkOptions(), par).algorithm is None
    assert dispatcher_network(NetworkOptions(), None).algorithm is None  # a workload file


def test_shared_expert_intermediate_size_changes_params_and_flops():
    m = load_model(MODELS / "deepseek-v3-like.yaml")
    wide = with_training_overrides(m, Training(moe_shared_expert_intermediate_size=4096))
    assert wide.moe.shared_ffn_hidden == 4096 and m.moe.shared_ffn_hidden == 2048
    # SwiGLU MLP: 6·h·f FLOPs per token forward, ×3 with backward, on the 58 MoE layers
    extra = 3 * 4096 * (61 - 3) * 6 * 7168 * (4096 - 2048)
    assert model_flops_per_iteration(wide, 1) - model_flops_per_iteration(m, 1) == extra


def test_dispatcher_options_refused_where_they_do_not_apply():
    dense = load_model(MODELS / "gpt2-medium.yaml")
    with pytest.raises(UsageError) as e:
        build_model_plan(dense, make_par(moe_token_dispatcher="flex"))
    assert e.value.field == "moe_token_dispatcher"
    with pytest.raises(UsageError) as e:
        build_model_plan(dense, make_par(moe_shared_expert_intermediate_size=64))
    assert e.value.field == "moe_shared_expert_intermediate_size"


def test_flex_end_to_end_runs_hierarchical_and_cuts_ep_time(tmp_path):
    # moe-gpt-small, EP 4 over the 2 nodes × 2 GPUs of tiny-2x2
    out = {}
    for d in ("alltoall", "flex"):
        path = tmp_path / f"{d}.json"
        rc = main(["--model", str(MODELS / "moe-gpt-small.yaml"), "--topo",
                   str(ROOT / "topologies/tiny-2x2.yaml"), "--tp", "1", "--pp", "1",
                   "--ep", "4", "--global-batch", "4", "--moe-token-dispatcher-type", d,
                   "--json", str(path), "--quiet"])
        assert rc == 0
        out[d] = json.loads(path.read_text())
    chosen = [a for a in out["flex"]["assumptions"] if a.startswith("chosen: EP alltoall")]
    assert chosen and "hierarchical" in chosen[0]
    chosen = [a for a in out["alltoall"]["assumptions"] if a.startswith("chosen: EP alltoall")]
    assert chosen and "direct" in chosen[0]
    assert any("--moe-token-dispatcher-type flex" in a for a in out["flex"]["assumptions"])

    def ep(rep):
        return rep["stages"][0]["exposed_comm_s"]["EP"]
    assert 0 < ep(out["flex"]) < ep(out["alltoall"])

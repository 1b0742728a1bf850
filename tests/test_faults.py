"""Non-uniform clusters: slow GPUs against hand calculations, hybrid simulation against
per-rank simulation, and failed NICs that reroute exactly the affected flows."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import SEED_1024, TOPOLOGIES, uniform_program

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.faults import Faults, parse_link, parse_nic, parse_slow, simulation_plan
from sim.network import build_network
from sim.network.simple import AlphaBetaNetwork, FreeNetwork
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.topology import load_topology

F, B = 10, 20  # ns per microbatch and stage; a GPU slowed 1.5x takes 15 and 30


def run_slow(p: int, m: int, stage: int) -> int:
    pl = Placement(1, 1, p)
    res = simulate(uniform_program(p, m, F, B), FreeNetwork(), placement=pl,
                   classes=RankClasses.per_rank(pl), compute_scale={stage: 1.5})
    return res.iteration_ns


@pytest.mark.parametrize("p,m", [(4, 8), (2, 5), (8, 16)])
def test_slow_last_stage_lengthens_1f1b_by_m_times_the_extra_work(p, m):
    # The last stage runs F_i B_i back to back once F0 arrives, and its inputs are always
    # ready (the other stages are faster): T = (p-1)f + M(f'+b') + (p-1)b.
    f2, b2 = 1.5 * F, 1.5 * B
    assert run_slow(p, m, p - 1) == (p - 1) * F + m * (f2 + b2) + (p - 1) * B
    assert run_slow(p, m, p - 1) - (m + p - 1) * (F + B) == m * 0.5 * (F + B)


@pytest.mark.parametrize("p,m", [(4, 8), (3, 6), (8, 16)])
def test_slow_first_stage_in_1f1b(p, m):
    # Stage 0 finishes F0 at f'; the gradient of microbatch 0 returns after the round trip
    # through the p-1 fast stages, (p-1)(f+b); from then on stage 0 is never idle: M
    # backwards and the M-p forwards it has not yet run. (Needs M >= p and f' <= (p-1)(f+b).)
    f2, b2 = 1.5 * F, 1.5 * B
    assert run_slow(p, m, 0) == f2 + (p - 1) * (F + B) + m * b2 + (m - p) * f2


def tp_dp_program(p: int, m: int, tp_bytes: int, dp_bytes: int) -> PipelineProgram:
    tp = Comm(CollKind.ALLREDUCE, GroupKind.TP, tp_bytes)
    dp = Comm(CollKind.ALLREDUCE, GroupKind.DP, dp_bytes, blocking=False)
    lay = Layer("block", Phase(1000, tp), Phase(1000, tp), Phase(1000, dp))
    return PipelineProgram(tp=4, pp=p, dp=4, ep=1, vpp=1, microbatches=m, pp_bytes=64,
                           stages=[StageProgram(s, [(lay, lay)]) for s in range(p)],
                           schedule="1f1b")


@pytest.mark.parametrize("slow_rank", [0, 1, 5, 22, 31])
def test_hybrid_simulation_equals_per_rank_with_a_slow_gpu(slow_rank):
    prog = tp_dp_program(2, 4, 4000, 8000)
    pl = Placement(4, 4, 2)
    topo = load_topology(str(TOPOLOGIES / "tiny-2x2.yaml"))
    faults = Faults(slow_gpus={slow_rank: 1.5})
    net = AlphaBetaNetwork(50, {GroupKind.TP: 4.0, GroupKind.DP: 2.0, GroupKind.PP: 1.0})
    classes, scale, _ = simulation_plan(faults, topo, pl)
    hybrid = simulate(prog, net, placement=pl, classes=classes, compute_scale=scale)
    per_rank = simulate(prog, net, placement=pl, classes=RankClasses.per_rank(pl),
                        compute_scale={slow_rank: 1.5})
    assert hybrid.iteration_ns == per_rank.iteration_ns
    assert (len(hybrid.ranks), len(per_rank.ranks)) == (8, 32)  # 2 stages x 2 tp x 2 dp classes
    healthy = simulate(prog, net, placement=pl)
    assert hybrid.iteration_ns > healthy.iteration_ns
    # the critical path runs through the slow GPU's tensor-parallel group
    slow_group = set(pl.group(GroupKind.TP, slow_rank))
    on_path = {seg.rank for seg in hybrid.critical_path if seg.kind == "work"}
    assert on_path & slow_group


def test_fault_specs_parse_and_reject():
    assert parse_slow("17:1.5") == (17, 1.5)
    assert parse_nic("3.2") == (3, 2)
    assert parse_link("nic:3.2:0.5") == (("nic", 3, 2), 0.5)
    assert parse_link("nvlink:9:0.25") == (("nvlink", 9), 0.25)
    assert parse_link("uplinks:1.4:0.5") == (("uplinks", 1, 4), 0.5)
    for bad, fn in (("17", parse_slow), ("x:1.5", parse_slow), ("17:0", parse_slow),
                    ("3", parse_nic), ("nic:3.2:1.5", parse_link), ("wifi:1:0.5", parse_link)):
        with pytest.raises(UsageError):
            fn(bad)


def dgx(nodes: int = 4, **faults):
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-512.yaml"), nodes=nodes)
    return dataclasses.replace(topo, faults=Faults(**faults))


def test_failed_nic_reroutes_only_its_flows():
    healthy, broken = build_network(dgx()), build_network(dgx(failed_nics=frozenset({(1, 2)})))
    # GPU 10 = node 1, GPU 2: its traffic to node 2 now leaves through NIC 3 (same PCIe switch)
    names = [broken.cluster.names[i] for i in broken.cluster.path(10, 18)]
    assert (("nic", 1, 3), ("sw", 1, broken.cluster.leaf_of(1, 3), 0)) in names
    assert not any(("nic", 1, 2) in pair for pair in names)
    # flows that never touch node 1's NIC 2 keep their routes
    for src, dst in ((0, 8), (3, 19), (11, 27), (9, 25), (16, 24)):
        a = [healthy.cluster.names[i] for i in healthy.cluster.path(src, dst)]
        b = [broken.cluster.names[i] for i in broken.cluster.path(src, dst)]
        assert a == b


def dp_rings_program(size: int) -> PipelineProgram:
    """TP 8 inside each node, DP over 4 nodes: every TP rank's DP ring runs on its own rail."""
    dp = Comm(CollKind.ALLREDUCE, GroupKind.DP, size, blocking=False)
    lay = Layer("grad", weight_grad=Phase(1, dp))
    return PipelineProgram(tp=8, pp=1, dp=4, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [(lay,)])], schedule="1f1b")


def end_times(net) -> dict[int, int]:
    """Per-rank finish times (ns) of the DP-ring program of 1 GiB, every rank simulated."""
    pl = Placement(8, 4, 1)
    res = simulate(dp_rings_program(1 << 30), net, placement=pl,
                   classes=RankClasses.per_rank(pl))
    return {s.rank: s.end_ns for s in res.ranks}


def test_failed_nic_slows_exactly_the_rings_that_share_the_substitute():
    prog, pl = dp_rings_program(1 << 30), Placement(8, 4, 1)
    ok = end_times(build_network(dgx()))
    broken_net = build_network(dgx(failed_nics=frozenset({(1, 2)})))
    bad = end_times(broken_net)
    for r in range(32):
        tp = r % 8
        if tp in (2, 3):  # rail 2's ring now shares node 1's NIC 3 with rail 3's ring
            assert bad[r] / ok[r] == pytest.approx(2.0, rel=0.01)
        else:
            assert bad[r] == ok[r]
    # the report names the link that made them slower: the substitute NIC 3 of node 1
    worst = next(x for x in broken_net.describe() if x.startswith("contended link:"))
    assert "nic 1.3" in worst and "failed NIC" in worst
    # the hybrid simulation of the same fault gives the same times
    topo = dgx(failed_nics=frozenset({(1, 2)}))
    classes, scale, _ = simulation_plan(topo.faults, topo, pl)
    hy = simulate(prog, build_network(topo), placement=pl, classes=classes)
    assert max(s.end_ns for s in hy.ranks) == max(bad.values())


def test_degraded_nic_halves_its_flows():
    ok = end_times(build_network(dgx()))
    bad = end_times(build_network(dgx(degraded={("nic", 2, 5): 0.5})))
    for r in range(32):
        if r % 8 == 5:
            assert bad[r] / ok[r] == pytest.approx(2.0, rel=0.01)
        else:
            assert bad[r] == ok[r]


def test_cli_reports_faults_baseline_and_critical_path(tmp_path):
    out = tmp_path / "r.json"
    assert main(["--workload", str(SEED_1024), "--topo",
                 str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--slow-gpu", "300:1.5", "--quiet",
                 "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["simulation"]["mode"] == "hybrid"
    assert rep["faults"] == ["slow GPU 300: compute × 1.5"]
    assert rep["fault_slowdown_s"] == pytest.approx(
        rep["iteration_time_s"] - rep["healthy_iteration_time_s"])
    assert rep["fault_slowdown_s"] > 0
    # GPU 300 = TP rank 4 of stage 4, DP replica 5: the critical path's most work is there
    top = rep["critical_path"]["ranks"][0]
    assert (top["rank"], top["stage"]) == (300, 4)


def test_healthy_comparison_takes_the_fault_free_symmetry(tmp_path):
    """A TP 16 group that straddles two GB200 racks makes the fault-free run simulate every
    rank (its copies are not its images); the healthy run beside a --fail-nic run takes the
    same decision, so it equals the fault-free run to the ns (it had run one representative
    per stage and failed on a copy with no NVLS plan)."""
    import json

    from sim.cli import main
    base = ["--model", "gpt2-medium", "--topo", "gb200-nvl72", "--nodes", "2", "--gpus", "128",
            "--tp", "16", "--global-batch", "64", "--quiet"]
    assert main([*base, "--json", str(tmp_path / "a.json")]) == 0
    assert main([*base, "--fail-nic", "0.1", "--json", str(tmp_path / "b.json")]) == 0
    plain = json.loads((tmp_path / "a.json").read_text())
    faulty = json.loads((tmp_path / "b.json").read_text())
    assert faulty["healthy_iteration_time_s"] == plain["iteration_time_s"]
    assert faulty["iteration_time_s"] > plain["iteration_time_s"]

"""The lower bound of best-first sweeps (sim/sweep/bound.py, sim/sweep/best.py): a hand-worked
compute-only timeline; per stage, the replayed compute equals the compute and optimizer time the
engine reports; the bound is at most the simulated iteration time on every schedule and with
the options that change what runs; and a best-first sweep's top K equal the exhaustive sweep's.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import TOPOLOGIES, WORKLOADS

from sim.models import load_model
from sim.parallel.layout import Layout
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.scenario import SimulationOptions, steps
from sim.scenario.model_run import fit_model, model_run_of
from sim.sweep import SweepPoint as Point
from sim.sweep import Training
from sim.sweep.best import BestFirst, pruned_row
from sim.sweep.bound import lower_bound_ns, replay
from sim.topology import load_topology

MODEL = load_model(str(WORKLOADS / "models" / "gpt2-medium.yaml"))
TOPO = load_topology(str(TOPOLOGIES / "tiny-fattree-8.yaml"))
NVLINK = load_topology(str(TOPOLOGIES / "tiny-nvlink-4.yaml"))


def _stage(i: int, fwd: int, ig: int, wg: int, optimizer: int = 0) -> StageProgram:
    lay = Layer(f"l{i}", forward=Phase(fwd), input_grad=Phase(ig), weight_grad=Phase(wg))
    tail = (Task("opt", TaskKind.OPTIMIZER, optimizer),) if optimizer else ()
    return StageProgram(i, [(lay,)], epilogue=tail)


def test_hand_worked_1f1b_timeline():
    """1F1B, 2 stages, 2 microbatches; forward 10, backward 20 + 5 ns per stage; stage 1's
    optimizer 7 ns. Stage 0: F0 [0,10] F1 [10,20]; stage 1: F0 [10,20] B0 [20,45] F1 [45,55]
    B1 [55,80] then its optimizer [80,87]; stage 0: B0 waits for stage 1's B0 (45) [45,70],
    B1 waits for 80: [80,105]. End 105; compute 70 and 77."""
    lay = Layout(tp=1, pp=2, dp=1, microbatches=2, schedule="1f1b")
    prog = PipelineProgram.of(lay, pp_bytes=0, stages=[_stage(0, 10, 20, 5),
                                                        _stage(1, 10, 20, 5, optimizer=7)])
    assert replay(prog) == (105, [70, 77])


def test_hand_worked_zero_bubble_split_backward():
    """ZB-H1 splits the backward: stage 0's input-gradient pass needs only stage 1's
    input-gradient pass (20 ns), not its weight-gradient pass (5 ns)."""
    lay = Layout(tp=1, pp=2, dp=1, microbatches=2, schedule="zb-h1")
    prog = PipelineProgram.of(lay, pp_bytes=0, stages=[_stage(0, 10, 20, 5),
                                                        _stage(1, 10, 20, 5)])
    end, work = replay(prog)
    assert work == [70, 70]
    # stage 1: F0 [10,20] I0 [20,40] → stage 0's I0 from 40: shorter than 1F1B's 105
    full = replay(replace(prog, schedule="1f1b"))[0]
    assert end < full
    assert end >= 2 * 10 + 2 * 25 + 10  # stage 1 starts after stage 0's first forward


CASES = [  # (layout, global batch, training options)
    (Point(1, 2, 4), 64, {}),
    (Point(1, 2, 4, vpp=2), 64, {}),
    (Point(2, 4, 1, schedule="zb-h1"), 32, {}),
    (Point(2, 2, 2, schedule="zb-h2"), 32, {}),
    (Point(1, 4, 2, vpp=2, schedule="zb-v"), 64, {}),
    (Point(1, 2, 4, vpp=2, schedule="dualpipe"), 64, {}),
    (Point(2, 2, 2, schedule="gpipe"), 32, {"recompute": "full"}),
    (Point(1, 1, 8), 64, {"recompute": "selective"}),
    (Point(2, 2, 2), 32, {"sequence_parallel": True, "tp_comm_overlap": True}),
    (Point(1, 2, 4), 64, {"defer_embedding_wgrad_compute": True}),
    (Point(1, 2, 4, vpp=2), 64, {"distributed_optimizer": True, "overlap_param_gather": True}),
    (Point(2, 2, 2, micro_batch=2, schedule="zb-h1"), 64, {"recompute": "selective"}),
]


def _program(lay, gb, opts, topo=TOPO):
    par = lay.config(Training(global_batch=gb, **opts))
    return model_run_of(fit_model(MODEL, par, topo), topo)


@pytest.mark.parametrize(("lay", "gb", "opts"), CASES, ids=lambda x: getattr(x, "key", None))
def test_bound_below_the_simulation_and_compute_equal_the_engine(lay, gb, opts):
    run = _program(lay, gb, opts)
    end, work = replay(run.program)
    # with the blocking collectives' bytes over the GPU's link capacity (sim/sweep/comm_bound)
    bound = lower_bound_ns(run.program, TOPO)
    assert bound >= end
    if lay.tp > 1 and lay.schedule != "dualpipe":  # blocking TP collectives: a tighter bound
        assert bound > end
    for sim in (SimulationOptions(), SimulationOptions(host_dispatch_ns=4000)):
        res = steps.run(steps.prepare(run.program, TOPO, model_run=run, simulation=sim)).result
        assert bound <= res.iteration_ns
        for st in res.ranks:  # what the engine counts as this stage's compute
            assert work[st.stage] == st.compute_ns + st.optimizer_ns, st.stage


def test_no_bound_with_faults():
    run = _program(Point(1, 2, 4), 64, {})
    slow = replace(TOPO, faults=replace(TOPO.faults, slow_gpus={0: 2.0}))
    assert not slow.faults.empty
    assert lower_bound_ns(run.program, slow) is None


def _fits(key, bound, used=1e9):
    return {"layout": key, "status": "fits", "bound_ns": bound, "memory_per_gpu_bytes": used,
            "memory_capacity_bytes": 80e9}


def _ok(key, t, used=1e9):
    return {"layout": key, "status": "ok", "iteration_time_s": t, "memory_per_gpu_bytes": used,
            "memory_capacity_bytes": 80e9}


def test_stop_rule_and_shortest_prefix():
    """Candidates by bound a 1 s, b 2 s, c 3 s, d 5 s; simulated a 4 s, b 2.5 s, c 3.5 s: the
    2nd best (3.5 s, c) beats d's bound 5 s after three candidates, not after two (2nd best
    4 s ≥ c's bound 3 s). A candidate within the headroom ranks after all the others."""
    fits = {"a": _fits("a", 1e9), "b": _fits("b", 2e9), "c": _fits("c", 3e9),
            "d": _fits("d", 5e9), "e": _fits("e", 0, used=79e9)}
    best = BestFirst(fits, 2, int(2.5e9))
    assert best.order == ["a", "b", "c", "d", "e"]
    rows = {"a": _ok("a", 4.0), "b": _ok("b", 2.5)}
    assert not best.stop_before(rows, 2)
    rows["c"] = _ok("c", 3.5)
    assert best.stop_before(rows, 3)
    rows["d"] = _ok("d", 6.0)  # simulated anyway (it was running): pruned in the outputs
    lays = {k: Point(1, 1, 1, variant=(("x", k),)) for k in fits}
    out, n = best.final(rows, lays)
    assert n == 2 and out["d"]["status"] == out["e"]["status"] == "pruned"
    assert out["d"]["lower_bound_s"] == 5.0 and out["d"]["pruned_by"] == "c"
    assert "ranked after" in out["e"]["reason"] and "5.0000 s >" in out["d"]["reason"]
    assert {k: out[k] for k in "abc"} == {k: rows[k] for k in "abc"}


def test_pruned_row_keeps_the_memory():
    row = pruned_row(Point(1, 2, 4), _fits("x", 2_500_000_000), _ok("y", 2.0), 1)
    assert row["status"] == "pruned" and row["memory_per_gpu_bytes"] == 1e9
    assert row["reason"] == ("lower bound 2.5000 s > the iteration time of the 1st best: "
                             "2.0000 s (y; --best 1)")


SPACE = ["--model", str(WORKLOADS / "models" / "gpt2-medium.yaml"),
         "--topo", str(TOPOLOGIES / "tiny-nvlink-4.yaml"), "--global-batch", "32",
         "--tp", "1,2,4", "--pp", "1,2,4", "--micro-batch", "1,2,4",
         "--recompute", "none,full", "--no-plot", "--no-progress", "--quiet", "--workers", "1"]


def test_best_first_top_k_equals_the_exhaustive_sweep(tmp_path):
    from sim.cli.sweep import main

    assert main([*SPACE, "--out", str(tmp_path / "all")]) == 0
    assert main([*SPACE, "--out", str(tmp_path / "best"), "--best", "3"]) == 0
    full = json.loads((tmp_path / "all" / "results.json").read_text())
    best = json.loads((tmp_path / "best" / "results.json").read_text())
    ranked = [r for r in full["rows"] if r["status"] == "ok"]
    assert [r for r in best["rows"] if r["status"] == "ok"][:3] == ranked[:3]
    pruned = [r for r in best["rows"] if r["status"] == "pruned"]
    assert best["pruned"] == len(pruned) > 0 and best["best_k"] == 3
    times = {r["layout"]: r["iteration_time_s"] for r in ranked}
    for r in pruned:  # each bound below its simulated time, above the 3rd best
        assert ranked[2]["iteration_time_s"] < r["lower_bound_s"] <= times[r["layout"]]
    assert {r["layout"] for r in best["rows"]} == {r["layout"] for r in full["rows"]}


def test_best_first_outputs_do_not_depend_on_the_workers(tmp_path):
    """Two workers may finish layouts past the proving prefix: the outputs are the same."""
    from sim.cli.sweep import main

    base = [a for a in SPACE if a not in ("--workers", "1")]
    assert main([*base, "--workers", "1", "--out", str(tmp_path / "one"), "--best", "2"]) == 0
    assert main([*base, "--workers", "2", "--out", str(tmp_path / "two"), "--best", "2"]) == 0
    for name in ("results.csv", "results.json"):
        one = (tmp_path / "one" / name).read_text()
        assert one == (tmp_path / "two" / name).read_text().replace(
            str(tmp_path / "two"), str(tmp_path / "one"))


def test_best_first_resumed_equals_uninterrupted(tmp_path):
    """Two layouts now (--limit 2), the rest on --resume: the rows simulated first take part
    in the proof, and the outputs equal an uninterrupted best-first sweep's."""
    from sim.cli.sweep import main

    out = str(tmp_path / "r")
    assert main([*SPACE, "--out", out, "--best", "3", "--limit", "2"]) == 0
    first = json.loads((tmp_path / "r" / "results.json").read_text())
    assert not first["complete"] and first["ok"] == 2 and first["pruned"] == 0
    assert main([*SPACE, "--out", out, "--best", "3", "--resume"]) == 0
    assert main([*SPACE, "--out", str(tmp_path / "u"), "--best", "3"]) == 0
    assert (tmp_path / "r" / "results.csv").read_text() == (
        tmp_path / "u" / "results.csv").read_text()


SHIPPED = ["dgx-a100-1024", "dgx-h100-1024", "dgx-b200", "gb200-nvl72", "mi300x",
           "pcie-a100-8gpu-16", "dgx-h100-rail-only", "dgx-h100-spectrumx-1024"]


@pytest.mark.parametrize("name", SHIPPED)
def test_comm_bound_below_every_algorithm_and_protocol(name):
    """The collective part of the bound (sim/sweep/comm_bound.py: bytes a member must move
    over the sum of a GPU's link capacities) is at most the isolated time of every algorithm
    and protocol the tuner costs, for groups inside a node, across nodes and on one rail."""
    from sim.comm import CollKind, Comm, GroupKind
    from sim.errors import UsageError
    from sim.network import build_network
    from sim.sweep.comm_bound import comm_bound, moved_bytes

    topo = load_topology(str(TOPOLOGIES / f"{name}.yaml"), nodes=2)
    try:  # in-network reduction (SHARP) as a candidate where the fabric has it
        tuner = build_network(topo, collnet_enable=True).tuner
    except UsageError:
        tuner = build_network(topo).tuner
    g = topo.gpus_per_node
    groups = [tuple(range(2)), tuple(range(min(4, g))), tuple(range(g)), tuple(range(2 * g)),
              (0, g)]
    kinds = (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLREDUCE, CollKind.ALLTOALL)
    checked = 0
    for ranks in groups:
        bound = comm_bound(topo, {GroupKind.TP: len(ranks)})
        assert bound is not None
        for kind in kinds:
            for size in (1 << 20, 64 << 20, 1 << 30):
                lb = bound(Comm(kind, GroupKind.TP, size))
                assert lb > 0 and lb == int(moved_bytes(kind, size, len(ranks)) //
                                            gpu_cap(topo))
                for algo in tuner.candidates(kind, ranks):
                    plan = tuner.plan(kind, algo, ranks)
                    if plan is None:
                        continue
                    for proto in plan.protocols:
                        assert tuner.alone_ns(plan, proto, size) >= lb, (kind, algo, proto)
                        checked += 1
    assert checked > 100


def gpu_cap(topo) -> float:
    from sim.sweep.comm_bound import gpu_link_capacity

    return gpu_link_capacity(topo)


def test_gpu_link_capacity_by_hand():
    """The shipped files' numbers: DGX H100 18 NVLinks × 25 GB/s × 0.824 (NCCL's 20.6 GB/s per
    link) = 370.8 GB/s plus PCIe Gen5 64 × 0.75 = 48 → 418.8; MI300X 7 xGMI links × 48 GB/s +
    48 → 384; DGX A100 12 × 25 × 0.8 = 240 + Gen4 32 × 0.75 = 24 → 264."""
    from sim.sweep.comm_bound import gpu_link_capacity

    for name, cap in (("dgx-h100-1024", 418.8), ("mi300x", 384.0), ("dgx-a100-1024", 264.0)):
        topo = load_topology(str(TOPOLOGIES / f"{name}.yaml"))
        assert gpu_link_capacity(topo) == pytest.approx(cap)

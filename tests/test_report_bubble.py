"""bubble_fraction is pipeline bubble / pipeline busy time (the ideal formula's quantity);
idle_fraction is all idle time over the iteration (docs/report-schema.md)."""

import json

import pytest
from conftest import ROOT, uniform_program

from sim.cli import main
from sim.comm import GroupKind
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork, FreeNetwork
from sim.program.pipeline import Task, TaskKind
from sim.report import build_report


def test_hand_derived_p2_m2_bubble_and_busy():
    # The worked example of tests/test_engine_pipeline.py (f = 10, b = 20, 5 ns transfers).
    # Pipeline span 0..100 (stage 0's last backward ends at 100). Stage 0 waits 20..45 and
    # 70..75 for stage 1 (30 ns); busy = 100 - 30 = 70 (60 compute + 10 PP), bubble 30.
    # Stage 1 waits 0..10; its schedule ends at 75: busy = 75 - 10 = 65, bubble 100 - 65 = 35.
    prog = uniform_program(2, 2, 10, 20, pp_bytes=5)
    rep = build_report(simulate(prog, AlphaBetaNetwork(0, {GroupKind.PP: 1.0})))
    s0, s1 = rep["stages"]
    ns = [round(s[k] * 1e9) for s in (s0, s1) for k in ("pipeline_bubble_s", "pipeline_busy_s")]
    assert ns == [30, 70, 35, 65]
    assert s0["bubble_fraction"] == 30 / 70 and s1["bubble_fraction"] == 35 / 65
    assert rep["bubble_fraction"] == pytest.approx((30 / 70 + 35 / 65) / 2, rel=1e-15)
    assert (s0["idle_fraction"], s1["idle_fraction"]) == (30 / 100, 35 / 100)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 16), (4, 1)])
def test_optimizer_after_the_pipeline_leaves_the_bubble_fraction_ideal(p, m):
    # A 500 ns optimizer step after the schedule is not pipeline work: the bubble fraction
    # stays (p-1)/M exactly, while the idle fraction is bubble / iteration.
    f, b, opt = 100, 200, 500
    prog = uniform_program(p, m, f, b)
    for st in prog.stages:
        st.epilogue = (Task("optimizer", TaskKind.OPTIMIZER, opt),)
    res = simulate(prog, FreeNetwork())
    rep = build_report(res)
    assert res.iteration_ns == (m + p - 1) * (f + b) + opt
    assert rep["bubble_fraction"] == pytest.approx((p - 1) / m, rel=1e-12)
    assert rep["idle_fraction"] == pytest.approx((p - 1) * (f + b) / res.iteration_ns, rel=1e-12)


def _run(tmp_path, workload, topo):
    out = tmp_path / "r.json"
    assert main(["--workload", str(ROOT / workload), "--topo", str(ROOT / topo), "--json",
                 str(out), "--quiet"]) == 0
    return json.loads(out.read_text())


def test_1024_gpu_example_bubble_at_least_ideal(tmp_path):
    rep = _run(tmp_path, "workloads/aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt",
               "topologies/dgx-a100-1024.yaml")
    assert rep["ideal_bubble_fraction"] == 15 / 16
    # unequal stages (embedding first, loss last) only add bubble to the ideal
    assert rep["ideal_bubble_fraction"] <= rep["bubble_fraction"] < 1.05 * 15 / 16
    assert 0 < rep["idle_fraction"] < 1


def test_512_gpu_example_one_microbatch(tmp_path):
    # ga = 1: M = 1, p = 8, so the ideal (p-1)/M is 7 (a bubble seven times the work); the
    # share of the iteration spent idle is the fraction below 1.
    rep = _run(tmp_path, "workloads/aicb-gpt13b-tp8-pp8-512gpu.txt",
               "topologies/dgx-a100-512.yaml")
    assert rep["microbatches"] == 1 and rep["ideal_bubble_fraction"] == 7.0
    assert rep["bubble_fraction"] == pytest.approx(7.0, rel=2e-3)
    assert 0.5 < rep["idle_fraction"] < 1


def test_embedding_group_is_first_and_last_stage():
    from sim.parallel.placement import Placement
    pl = Placement(tp=2, dp=2, pp=4)
    for r in range(pl.world_size):
        c = pl.coord(r)
        if c.pp in (0, 3):
            assert pl.group(GroupKind.EMB, r) == (pl.rank(c.tp, c.dp, 0), pl.rank(c.tp, c.dp, 3))
    assert len(pl.groups(GroupKind.EMB)) == 4  # one per (tp, dp) position


def test_aicb_embedding_grads_runs_in_the_embedding_group():
    # The shipped 1024-GPU file's embedding_grads row (ALLREDUCE of 134217728 bytes, no group
    # suffix) runs on stages 0 and 15 only, in the EMB group, never in TP.
    from sim.workload.registry import read_workload
    from sim.workload.stages import LayoutOptions, build_program
    wl = read_workload(ROOT / "workloads/aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt")
    prog = build_program(wl, LayoutOptions())
    for st in prog.stages:
        emb = [t for t in st.epilogue if t.label.startswith("embedding_grads") and t.comm]
        if st.stage in (0, 15):
            assert [(t.comm.kind.value, t.comm.group, t.comm.size_bytes) for t in emb] == [
                ("ALLREDUCE", GroupKind.EMB, 134217728)]
        else:
            assert emb == []


def test_embedding_all_reduce_pairs_first_and_last_stage_hand_derived():
    # p = 2, M = 1, f = 10, b = 20, free pipeline transfers; each stage ends with a 100-byte
    # all-reduce in EMB at 1 GB/s, alpha 0: 2(n-1)/n * S/B = 100 ns. Stage 1: waits 0..10, F
    # 10..20, B 20..40; stage 0: F 0..10, waits 10..40, B 40..60. The all-reduce starts when
    # stage 0 arrives at 60 and ends at 160; stage 1 idles 40..60 waiting for it.
    from sim.comm import CollKind, Comm
    prog = uniform_program(2, 1, 10, 20)
    for st in prog.stages:
        st.epilogue = (Task("embedding_grads", TaskKind.GRAD_SYNC, 0,
                            Comm(CollKind.ALLREDUCE, GroupKind.EMB, 100, True)),)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.EMB: 1.0}), record_spans=True)
    assert res.iteration_ns == 160
    s0, s1 = res.ranks
    assert (s0.exposed_comm_ns[GroupKind.EMB], s0.bubble_ns) == (100, 30)
    assert (s1.exposed_comm_ns[GroupKind.EMB], s1.bubble_ns) == (100, 10 + 20)
    log = sorted((s.start_ns, s.end_ns, s.rank, s.stream, s.kind) for s in res.spans
                 if s.kind in ("bubble", "comm"))
    assert log == [(0, 10, 1, "compute", "bubble"), (10, 40, 0, "compute", "bubble"),
                   (40, 60, 1, "compute", "bubble"), (60, 160, 0, "EMB", "comm"),
                   (60, 160, 1, "EMB", "comm")]

"""Every figure knows every process group (CP, EP, ETP, EMB, ...): a hand-built iteration whose
blocking collectives run in one group, drawn as timeline, breakdown and trace, for each
:class:`~sim.comm.GroupKind`; and the ``--breakdown-plot`` reproducer with CP > 1."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import uniform_program
from PIL import Image
from test_trace_export import hand_case

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.report import build_report
from sim.viz.breakdown import breakdown_series, plot_breakdown
from sim.viz.timeline import COLORS, LEGEND, plot_timeline
from sim.viz.trace import build_trace


def group_program(g: GroupKind) -> PipelineProgram:
    """One stage, M = 2, layers a, b of 10 ns per phase; each forward / input-grad phase ends
    with a blocking all-reduce of 4 bytes in group ``g``, each weight-grad with a non-blocking
    DP all-reduce of 8 bytes (α = 0, 1 byte/ns, 2 ranks: 4 and 8 ns). As the TP case of
    tests/test_trace_export.py: compute 120 ns, exposed ``g`` 8 × 4 = 32 ns, DP 8, optimizer 5,
    iteration 165 ns (DP 4 ranks in the expert-DP and CP cases: 12 ns, 169)."""
    blk = Comm(CollKind.ALLREDUCE, g, 4)
    dp = Comm(CollKind.ALLREDUCE, GroupKind.DP, 8, blocking=False)
    a = Layer("a", Phase(10, blk), Phase(10, blk), Phase(10, dp))
    b = Layer("b", Phase(10, blk), Phase(10, blk), Phase(10, dp))
    opt = Task("optimizer", TaskKind.OPTIMIZER, compute_ns=5, wait_async=True)
    st = StageProgram(0, [(a, b)], epilogue=(opt,))
    # CP and ETP are reported only when the layout has them (CP > 1, ETP ≠ TP); the expert
    # group has 2 ranks with EP 2, the expert-DP group 2 ranks with DP 4, EP 2, the expert-TP
    # group 2 with ETP 2 of TP 4
    dp = 4 if g in (GroupKind.CP, GroupKind.DP_EP) else 2
    return PipelineProgram(tp=4 if g is GroupKind.ETP else 2, pp=1, dp=dp,
                           ep=2 if g in (GroupKind.EP, GroupKind.DP_EP) else 1, vpp=1,
                           microbatches=2, pp_bytes=0, stages=[st], schedule="1f1b",
                           cp=2 if g is GroupKind.CP else 1,
                           etp=2 if g is GroupKind.ETP else None)


def test_every_group_has_a_colour_and_a_legend_entry():
    legend = {k for k, _ in LEGEND}
    for g in GroupKind:
        assert g.value in COLORS, g
        assert g.value in legend, g
    # distinct colours: a figure never shows two kinds in one colour
    assert len(set(COLORS.values())) == len(COLORS)


# PP: pipeline transfers (next test); EMB: the first and last stage, PP ≥ 2 (the test after)
COLLECTIVE_GROUPS = [g for g in GroupKind if g not in (GroupKind.PP, GroupKind.EMB)]


@pytest.mark.parametrize("g", COLLECTIVE_GROUPS, ids=lambda g: g.value)
def test_each_plot_draws_each_group(g, tmp_path):
    net = AlphaBetaNetwork(0, dict.fromkeys(GroupKind, 1.0))
    res = simulate(group_program(g), net, record_spans=True)
    # the last DP all-reduce (8 bytes) is exposed: 2(n-1)/n · 8 ns on n ranks, 8 ns on 2,
    # 12 ns on 4 (the expert-DP case, DP 4; CP 2: gradients are reduced over DP × CP, as
    # Megatron-Core's data-parallel-with-context-parallel group)
    dp_ns = 12 if g in (GroupKind.DP_EP, GroupKind.CP) else 8
    assert res.iteration_ns == 120 + 5 + 32 + dp_ns
    rep = build_report(res)
    want = {"compute": 120e-6, "optimizer": 5e-6}
    if g is GroupKind.DP:
        want["exposed DP comm"] = 40e-6
    else:
        want |= {f"exposed {g.value} comm": 32e-6, "exposed DP comm": dp_ns * 1e-6}
    stages, series = plot_breakdown(rep, tmp_path / "b.png")
    assert stages == [0]
    got = {s.name: s.values_ms[0] for s in series}
    assert got == pytest.approx(want, rel=1e-12)
    assert (stages, series) == breakdown_series(rep)
    assert Image.open(tmp_path / "b.png").size == (1200, 560)
    tl = plot_timeline(res, tmp_path / "t.png", report=rep)
    kinds = {b.kind for b in tl.boxes}
    assert g.value in kinds  # its wire-lane box, in its own colour
    doc = build_trace(res)
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert f"{g.value} comm" in threads
    assert any(e.get("args", {}).get("group") == g.value and e.get("ph") == "X"
               for e in doc["traceEvents"])


def test_breakdown_plot_with_context_parallelism_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "bd.png"
    rc = main(["--model", "llama3-8b", "--topo", "dgx-h100-scalable", "--nodes", "2",
               "--tp", "2", "--pp", "2", "--cp", "2", "--global-batch", "16",
               "--sequence-parallel", "--distributed-optimizer", "--breakdown-plot", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert Image.open(out).size == (1200, 560)


def test_each_plot_draws_pipeline_transfers(tmp_path):
    # docs/engine.md worked example (p = 2, M = 2, f = 10, b = 20 ns, transfers 5 ns):
    # exposed PP 10 ns on stage 0 (45-50, 75-80) and 5 ns on stage 1 (10-15)
    res = hand_case()
    rep = build_report(res)
    stages, series = plot_breakdown(rep, tmp_path / "b.png")
    got = {s.name: s.values_ms for s in series}
    assert got["exposed PP comm"] == pytest.approx((10e-6, 5e-6), rel=1e-12)
    tl = plot_timeline(res, tmp_path / "t.png", report=rep)
    assert "PP" in {b.kind for b in tl.boxes}


def test_each_plot_draws_the_embedding_group(tmp_path):
    # two stages (f = 10, b = 20 ns, transfers 5 ns) whose epilogue all-reduces the tied
    # embedding's gradient (4 bytes, 2 ranks: 4 ns) in the first-and-last-stage group
    prog = uniform_program(2, 2, 10, 20, pp_bytes=5)
    emb = Task("embedding_grads", TaskKind.COMPUTE, compute_ns=0,
               comm=Comm(CollKind.ALLREDUCE, GroupKind.EMB, 4))
    prog = replace(prog, stages=[replace(st, epilogue=(emb, *st.epilogue))
                                 for st in prog.stages])
    res = simulate(prog, AlphaBetaNetwork(0, dict.fromkeys(GroupKind, 1.0)), record_spans=True)
    rep = build_report(res)
    stages, series = plot_breakdown(rep, tmp_path / "b.png")
    got = {s.name: s.values_ms for s in series}
    assert got["exposed EMB comm"] == pytest.approx(
        tuple(s["exposed_comm_s"]["EMB"] * 1e3 for s in rep["stages"]), rel=1e-12)
    assert min(got["exposed EMB comm"]) >= 4e-6  # at least the all-reduce itself
    tl = plot_timeline(res, tmp_path / "t.png", report=rep)
    assert "EMB" in {b.kind for b in tl.boxes}



def test_chunk_tints_keep_their_hue_and_stay_apart_from_idle():
    import colorsys

    from sim.viz.boxes import Box
    from sim.viz.mpl import hex_rgb
    from sim.viz.timeline import OP_KINDS, _color

    idle = hex_rgb(COLORS["bubble"])
    for kind in OP_KINDS:
        for vpp in (2, 5, 8):
            for chunk in range(vpp):
                c = _color(Box(0, "compute", 0, 1, kind, 0, chunk), vpp)
                sat = colorsys.rgb_to_hsv(*c)[1]
                # clearly a colour (the idle grey's saturation is 0; the old 55% blend of the
                # weight-grad green came to 0.21)
                assert sat >= 0.25, (kind, vpp, chunk, sat)
                assert sum((a - b) ** 2 for a, b in zip(c, idle, strict=True)) ** 0.5 > 0.3


def test_sweep_heatmap_has_a_colour_bar(tmp_path, monkeypatch):
    import sim.viz.breakdown as bd

    drawn = []
    real = bd.render

    def spy(draw, *a, **kw):
        drawn.append(real(draw, *a, **kw))
        return drawn[-1]

    monkeypatch.setattr(bd, "render", spy)
    rows = [{"layout": "a", "tp": 1, "pp": 1, "iteration_time_s": 1.0},
            {"layout": "b", "tp": 2, "pp": 1, "iteration_time_s": 2.0}]
    bd.plot_sweep_heatmap(rows, tmp_path / "h.png")
    (cbar,) = drawn
    assert cbar is not None and cbar.ax.get_ylabel() == "iteration time (ms)"
    lo, hi = cbar.mappable.get_clim()
    assert (lo, hi) == (1000.0, 2000.0)  # the cells' range, ms

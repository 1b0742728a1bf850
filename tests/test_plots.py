"""Timeline, breakdown and sweep figures: the data behind them, and headless rendering."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, SEED_512, SEED_1024, TOPOLOGIES, uniform_program
from PIL import Image
from test_trace_export import hand_case, tp_dp_case

from sim.cli import main
from sim.comm import GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.network.simple import AlphaBetaNetwork
from sim.report import build_report
from sim.viz.boxes import Box, timeline_boxes
from sim.viz.breakdown import (
    breakdown_series,
    plot_breakdown,
    plot_sweep,
    plot_sweep_heatmap,
    sweep_grid,
    sweep_ranking,
)
from sim.viz.mpl import hex_rgb
from sim.viz.timeline import (
    BOTTOM_PX,
    COLORS,
    COMPUTE_FRAC,
    LEFT_PX,
    RIGHT_PX,
    ROW_PX,
    TOP_PX,
    figure_size,
    label_plan,
    plot_timeline,
)
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program

C, M = "compute", "comm"


def test_boxes_of_the_hand_worked_case():
    # docs/engine.md worked example, row = stage
    boxes = timeline_boxes(hand_case(), [0, 1])
    assert boxes == [
        Box(0, C, 0, 10, "forward", 0, 0), Box(0, C, 10, 20, "forward", 1, 0),
        Box(0, C, 20, 45, "bubble"), Box(0, C, 45, 50, "exposed_PP"),
        Box(0, C, 50, 70, "backward", 0, 0), Box(0, C, 70, 75, "bubble"),
        Box(0, C, 75, 80, "exposed_PP"), Box(0, C, 80, 100, "backward", 1, 0),
        Box(0, M, 10, 15, "PP"), Box(0, M, 20, 25, "PP"),
        Box(1, C, 0, 10, "bubble"), Box(1, C, 10, 15, "exposed_PP"),
        Box(1, C, 15, 25, "forward", 0, 0), Box(1, C, 25, 45, "backward", 0, 0),
        Box(1, C, 45, 55, "forward", 1, 0), Box(1, C, 55, 75, "backward", 1, 0),
        Box(1, C, 75, 100, "bubble"),
        Box(1, M, 45, 50, "PP"), Box(1, M, 75, 80, "PP"),
    ]


def test_boxes_merge_layers_and_blocking_tp_into_one_op():
    # derivation in test_trace_export.tp_dp_program
    boxes = timeline_boxes(tp_dp_case(), [0])
    assert [b for b in boxes if b.lane == C] == [
        Box(0, C, 0, 28, "forward", 0, 0), Box(0, C, 28, 76, "backward", 0, 0),
        Box(0, C, 76, 104, "forward", 1, 0), Box(0, C, 104, 152, "backward", 1, 0),
        Box(0, C, 152, 160, "exposed_DP"), Box(0, C, 160, 165, "optimizer")]
    comm = [(b.start_ns, b.end_ns, b.kind) for b in boxes if b.lane == M]
    assert comm == [(10, 14, "TP"), (24, 28, "TP"), (38, 42, "TP"), (62, 66, "TP"),
                    (86, 90, "TP"), (100, 104, "TP"), (114, 118, "TP"), (128, 136, "DP"),
                    (138, 142, "TP"), (152, 160, "DP")]


def seed_result(path, **layout):
    prog = build_program(read_workload(path), LayoutOptions(**layout))
    net = AlphaBetaNetwork(1000, {g: 200.0 if g is GroupKind.TP else 12.5 for g in GroupKind})
    return simulate(prog, net, record_spans=True)


@pytest.fixture(scope="module")
def seed_1f1b():
    return seed_result(SEED_1024)


@pytest.fixture(scope="module")
def seed_interleaved():
    return seed_result(SEED_512, microbatches=8)


def assert_compute_lane_tiles(boxes, rows, iteration_ns):
    for row in range(rows):
        lane = [b for b in boxes if b.row == row and b.lane == C]
        assert lane[0].start_ns == 0 and lane[-1].end_ns == iteration_ns
        for a, b in zip(lane, lane[1:], strict=False):
            assert a.end_ns == b.start_ns, (a, b)


@pytest.mark.parametrize("which", ["seed_1f1b", "seed_interleaved"])
def test_seed_boxes_tile_the_iteration_one_op_per_microbatch_and_chunk(which, request):
    res = request.getfixturevalue(which)
    prog = res.program
    ranks = [st.rank for st in res.stage_stats()]
    boxes = timeline_boxes(res, ranks)
    assert_compute_lane_tiles(boxes, prog.pp, res.iteration_ns)
    for row in range(prog.pp):
        ops = sorted((b.kind, b.microbatch, b.chunk) for b in boxes
                     if b.row == row and b.kind in ("forward", "backward"))
        assert ops == sorted((k, m, c) for k in ("forward", "backward")
                             for m in range(prog.microbatches) for c in range(prog.vpp))


def test_every_op_is_labelled_for_16_stages_by_16_microbatches(seed_1f1b):
    res = seed_1f1b
    boxes = timeline_boxes(res, [st.rank for st in res.stage_stats()])
    w, _ = figure_size(16)
    labels = label_plan(boxes, res.iteration_ns, w - LEFT_PX - RIGHT_PX, with_chunk=False)
    assert len(labels) == 16 * 32
    assert all(lab.size_pt >= 6 for lab in labels)
    assert sorted(lab.text for lab in labels if lab.row == 5) == sorted(
        str(m) for m in range(16) for _ in "FB")


def test_small_interleaved_case_labels_microbatch_and_chunk():
    res = seed_result(SEED_512, microbatches=8, pp=4, vpp=2)
    boxes = timeline_boxes(res, [st.rank for st in res.stage_stats()])
    labels = label_plan(boxes, res.iteration_ns, 1600 - LEFT_PX - RIGHT_PX, with_chunk=True)
    assert sorted(lab.text for lab in labels if lab.row == 0) == sorted(
        f"{m}.{c}" for m in range(8) for c in range(2) for _ in "FB")


def _pixel(img, row, t_ns, iteration_ns, lane_y=0.3):
    w, _ = img.size
    x = LEFT_PX + t_ns / iteration_ns * (w - LEFT_PX - RIGHT_PX)
    y = TOP_PX + (row + 0.08 + COMPUTE_FRAC * lane_y) * ROW_PX
    return img.getpixel((round(x), round(y)))[:3]


def _rgb255(hex_color):
    return tuple(round(c * 255) for c in hex_rgb(hex_color))


@pytest.mark.parametrize("which,rows", [("seed_1f1b", 16), ("seed_interleaved", 8)])
def test_timeline_png_has_the_expected_size_and_draws_the_boxes(which, rows, request, tmp_path):
    res = request.getfixturevalue(which)
    out = tmp_path / "t.png"
    info = plot_timeline(res, out, report=build_report(res, workload="w.txt"))
    img = Image.open(out).convert("RGB")
    assert img.size == figure_size(rows) == (1600, TOP_PX + BOTTOM_PX + ROW_PX * rows)
    assert (info.width_px, info.height_px) == img.size
    assert len(img.getcolors(1 << 20)) > 50  # not blank
    # the pixel a quarter into the widest forward / backward / bubble box has that colour
    for kind in ("forward", "backward", "bubble"):
        b = max((b for b in info.boxes if b.kind == kind and b.chunk <= 0),
                key=lambda b: (b.duration_ns, -b.row))
        if kind == "bubble":
            # hatched light grey: the mean over a patch lies between the hatch lines
            # (160, 160, 160) and the fill (230, 230, 230) — not white, not coloured
            w, _ = img.size
            x0 = LEFT_PX + (b.start_ns + b.duration_ns / 4) / res.iteration_ns * (
                w - LEFT_PX - RIGHT_PX)
            y0 = TOP_PX + (b.row + 0.08 + COMPUTE_FRAC * 0.3) * ROW_PX
            patch = [img.getpixel((round(x0) + i, round(y0) + j)) for i in range(12)
                     for j in range(8)]
            mean = [sum(p[k] for p in patch) / len(patch) for k in range(3)]
            assert all(165 < m < 232 for m in mean) and max(mean) - min(mean) < 3, mean
            continue
        px = _pixel(img, b.row, b.start_ns + b.duration_ns / 4, res.iteration_ns, 0.15)
        want = _rgb255(COLORS[kind])
        assert max(abs(p - q) for p, q in zip(px, want, strict=True)) <= 2, (kind, px)


def test_interleaved_chunks_get_distinct_shades(seed_interleaved, tmp_path):
    from sim.viz.timeline import _color

    res = seed_interleaved
    boxes = timeline_boxes(res, [st.rank for st in res.stage_stats()])
    shades = {_color(b, res.program.vpp) for b in boxes if b.kind == "forward"}
    assert len(shades) == res.program.vpp == 8


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_figures_are_byte_identical_across_runs(fmt, tmp_path):
    res = hand_case()
    rep = build_report(res)
    for name in ("a", "b"):
        plot_timeline(res, tmp_path / f"{name}.{fmt}", report=rep)
        plot_breakdown(rep, tmp_path / f"bd{name}.{fmt}")
    for stem in ("", "bd"):
        a = (tmp_path / f"{stem}a.{fmt}").read_bytes()
        assert len(a) > 1000 and a == (tmp_path / f"{stem}b.{fmt}").read_bytes()


def test_breakdown_series_are_the_report_breakdown():
    res = tp_dp_case()
    rep = build_report(res)
    stages, series = breakdown_series(rep)
    assert stages == [0]
    got = {s.name: s.values_ms for s in series}
    # compute 120, optimizer 5, exposed TP 32, DP 8 ns; no bubble → series left out
    assert list(got) == ["compute", "optimizer", "exposed TP comm", "exposed DP comm"]
    for name, ns in (("compute", 120), ("optimizer", 5), ("exposed TP comm", 32),
                     ("exposed DP comm", 8)):
        assert got[name] == pytest.approx((ns * 1e-6,), rel=1e-12)


def test_breakdown_plot_stacks_to_the_iteration(seed_1f1b, tmp_path):
    rep = build_report(seed_1f1b)
    stages, series = plot_breakdown(rep, tmp_path / "b.png")
    assert stages == list(range(16))
    for i in range(16):
        assert sum(s.values_ms[i] for s in series) == pytest.approx(
            rep["iteration_time_s"] * 1e3, rel=1e-9)
    assert Image.open(tmp_path / "b.png").size == (1200, 560)


SWEEP = [
    {"layout": "TP8 PP16", "tp": 8, "pp": 16, "iteration_time_s": 15.2, "mfu": 0.41},
    {"layout": "TP4 PP16", "tp": 4, "pp": 16, "iteration_time_s": 17.0, "mfu": 0.37},
    {"layout": "TP8 PP8", "tp": 8, "pp": 8, "iteration_time_s": 14.1, "mfu": 0.44},
    {"layout": "TP8 PP8 v2", "tp": 8, "pp": 8, "iteration_time_s": 13.0, "mfu": 0.48},
    {"layout": "TP2 PP8", "tp": 2, "pp": 8, "feasible": False, "reason": "out of memory"},
]


def test_sweep_ranking_and_grid():
    ranked, bad = sweep_ranking(SWEEP)
    assert ranked == [("TP8 PP8 v2", 13.0), ("TP8 PP8", 14.1), ("TP8 PP16", 15.2),
                      ("TP4 PP16", 17.0)]
    assert bad == [("TP2 PP8", "out of memory")]
    assert [k for k, _ in sweep_ranking(SWEEP, "mfu")[0]] == [k for k, _ in ranked]
    xs, ys, grid = sweep_grid(SWEEP, "tp", "pp")
    assert xs == [2, 4, 8] and ys == [8, 16]
    assert grid == [[None, None, 13.0], [None, 17.0, 15.2]]
    with pytest.raises(ValueError, match="metric"):
        sweep_ranking(SWEEP, "tokens")


def test_sweep_figures_render(tmp_path):
    ranked, _ = plot_sweep(SWEEP, tmp_path / "s.png")
    assert len(ranked) == 4
    assert Image.open(tmp_path / "s.png").size == (1000, 140 + 22 * 4)
    plot_sweep_heatmap(SWEEP, tmp_path / "h.svg", metric="mfu")
    assert (tmp_path / "h.svg").read_text().startswith("<?xml")


def test_unknown_image_suffix_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--plot"):
        plot_timeline(hand_case(), tmp_path / "t.jpg")
    assert not (tmp_path / "t.jpg").exists()


def test_plot_needs_spans():
    res = simulate(uniform_program(2, 2, 10, 20), AlphaBetaNetwork(0, {GroupKind.PP: 1.0}))
    with pytest.raises(ValueError, match="record_spans"):
        plot_timeline(res, "unused.png")


def test_matplotlib_is_not_imported_at_start_up():
    code = ("import sys, sim.cli, sim.viz.outputs, sim.viz.trace, sim.viz.boxes; "
            "sim.cli.build_parser(); print('matplotlib' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_cli_writes_plots_and_trace(tmp_path):
    paths = {k: tmp_path / n for k, n in (("plot", "t.png"), ("bd", "b.svg"),
                                          ("trace", "t.json.gz"), ("json", "r.json"))}
    # the gallery's small interleaved case (4 stages × 2 chunks: half the CPU of the seed's 8 × 8)
    assert main(["--workload", str(SEED_512), "--topo", str(TOPOLOGIES / "dgx-a100-512.yaml"),
                 "--pp", "4", "--vpp", "2", "--microbatches", "8", "--quiet",
                 "--plot", str(paths["plot"]), "--breakdown-plot", str(paths["bd"]),
                 "--trace", str(paths["trace"]), "--json", str(paths["json"])]) == 0
    assert Image.open(paths["plot"]).size == figure_size(4)
    assert paths["bd"].read_bytes().startswith(b"<?xml")
    assert paths["trace"].read_bytes()[:2] == b"\x1f\x8b"  # gzip
    assert json.loads(paths["json"].read_text())["virtual_pipeline_size"] == 2


@pytest.mark.parametrize("extra,needle", [
    (["--plot", "t.bmp"], "--plot"),
    (["--breakdown-plot", "b"], "--breakdown-plot"),
    (["--trace", "t.json", "--trace-ranks", "1"], "--per-rank"),
    (["--trace", "t.json", "--trace-ranks", "a,b"], "--trace-ranks"),
])
def test_cli_rejects_bad_plot_flags_before_simulating(extra, needle, tmp_path, capsys):
    assert main(["--workload", str(SEED_1024), "--topo",
                 str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


@pytest.mark.parametrize("extra,spans", [([], False), (["--breakdown-plot", "b.png"], False),
                                         (["--plot", "t.png"], True),
                                         (["--trace", "t.json"], True)])
def test_spans_are_recorded_only_for_a_trace_or_timeline(extra, spans, tmp_path, monkeypatch):
    import sim.engine

    seen = []
    real = sim.engine.simulate

    def spy(*a, **kw):
        seen.append(kw.get("record_spans", False))
        return real(*a, **kw)

    monkeypatch.setattr(sim.engine, "simulate", spy)
    monkeypatch.chdir(tmp_path)
    assert main(["--workload", str(ROOT / "workloads" / "optable-gpt2-large-block.tsv"),
                 "--topo", str(TOPOLOGIES / "tiny-nvlink-4.yaml"), "--gpus", "4", "--quiet",
                 *extra]) == 0
    assert seen == [spans]
    if extra:
        assert (tmp_path / extra[1]).stat().st_size > 0


def test_timeline_rows_name_rank_and_stage(tmp_path, monkeypatch):
    """A fault run simulates rank 300 and its stage's representative 260 individually: both
    rows are stage 4, and their labels must tell them apart."""
    import matplotlib.axes

    labels = []
    real = matplotlib.axes.Axes.set_yticklabels

    def spy(self, ticklabels, *a, **kw):
        labels.extend(ticklabels)
        return real(self, ticklabels, *a, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_yticklabels", spy)
    assert main(["--workload", str(SEED_1024), "--topo", str(TOPOLOGIES / "dgx-a100-1024.yaml"),
                 "--slow-gpu", "300:1.5", "--trace-ranks", "300,260,4", "--quiet",
                 "--plot", str(tmp_path / "t.png")]) == 0
    assert sorted(labels) == ["stage 0 · rank 4", "stage 4 · rank 260", "stage 4 · rank 300"]

"""docs/images/ are what scripts/doc_figures.py draws (byte-identical: figures are
deterministic), and the windowed timeline shows only its window."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import ROOT, SEED_1024, TOPOLOGIES
from PIL import Image

from sim.cli import main
from sim.viz.boxes import Box
from sim.viz.timeline import clip_boxes, plot_window


def test_doc_figures_are_the_scripts_output(tmp_path):
    spec = importlib.util.spec_from_file_location("doc_figures",
                                                  ROOT / "scripts" / "doc_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path)]) == 0
    for name in ("timeline-window.png", "sweep-heatmap.png"):
        got, committed = tmp_path / name, ROOT / "docs" / "images" / name
        assert got.read_bytes() == committed.read_bytes(), name
        assert Image.open(got).size[0] > 500


def test_plot_window_and_microbatches():
    boxes = [Box(0, "compute", 0, 10, "forward", 0, 0), Box(0, "compute", 10, 30, "forward", 1, 0),
             Box(0, "compute", 30, 60, "backward", 0, 0), Box(0, "compute", 60, 100, "bubble")]
    assert plot_window(boxes, 100) == (0, 100)
    assert plot_window(boxes, 100, microbatches=1) == (0, 60)  # F0 at 0 … B0 ends at 60
    assert plot_window(boxes, 100, window_ms=(0.0, 1.0)) == (0, 100)  # clipped to the end
    assert clip_boxes(boxes, 5, 40) == [Box(0, "compute", 5, 10, "forward", 0, 0),
                                        Box(0, "compute", 10, 30, "forward", 1, 0),
                                        Box(0, "compute", 30, 40, "backward", 0, 0)]


@pytest.mark.parametrize(("extra", "needle"), [
    (["--plot-window", "0:100"], "--plot-window: chooses what the --plot timeline shows"),
    (["--plot", "t.png", "--plot-window", "5:1"], "expected START:END in ms"),
    (["--plot", "t.png", "--plot-window", "0:1", "--plot-microbatches", "2"], "not both"),
])
def test_plot_window_flags_are_checked_before_simulating(extra, needle, tmp_path, capsys,
                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["--workload", str(SEED_1024), "--topo", str(TOPOLOGIES / "dgx-a100-1024.yaml"),
               *extra])
    assert rc == 2 and needle in capsys.readouterr().err

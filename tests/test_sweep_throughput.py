"""Sweep throughput (run with ``python -m pytest -m benchmark``; deselected by default: wall
time depends on the machine's load). benchmarks/sweep.py --quick: the 256-H100 Llama 3 70B
sweep's small space; its top layouts must equal their full simulation (every microbatch)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import ROOT

pytestmark = pytest.mark.benchmark


def test_quick_sweep_reports_layouts_per_second_and_top_equals_full(tmp_path):
    spec = importlib.util.spec_from_file_location("sweep_bench", ROOT / "benchmarks" / "sweep.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "b.json"
    assert bench.main(["--quick", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["valid_layouts"] == 8 and res["layouts_per_s"] > 0
    assert res["top_equal_full"] and len(res["top"]) == 5

"""Speed and memory goals (run with ``python -m pytest -m benchmark``; not part of the unit
tests because wall time depends on the machine). See benchmarks/run.py and docs/scale.md."""

import importlib.util

import pytest
from conftest import ROOT


@pytest.mark.benchmark
def test_scale_and_speed_goals():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks" / "run.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--repeat", "5"]) == 0, "a goal was missed (see the table above)"

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


@pytest.mark.benchmark
def test_validate_run_time_goal():
    """Issue 33: the whole ``simrun validate`` in <= 2 minutes on 2 cores, as a wall-time ratio
    to the reference process measured in the same run (benchmarks/validate.py)."""
    spec = importlib.util.spec_from_file_location("vbench", ROOT / "benchmarks" / "validate.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--repeat", "3"]) == 0, "validate took longer than its goal (see above)"

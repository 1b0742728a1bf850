"""Shared test helpers: paths and small synthetic programs."""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

import pytest

from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "workloads"
TOPOLOGIES = ROOT / "topologies"
SEED_1024 = WORKLOADS / "aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt"
SEED_512 = WORKLOADS / "aicb-gpt13b-tp8-pp8-512gpu.txt"
SEED_OPTABLE = WORKLOADS / "optable-gpt2-large-block.tsv"


# Where PYTHONDONTWRITEBYTECODE is set, pytest also keeps no cache of the test modules it
# rewrites for its assertion messages, so every run (every xdist worker) parses and rewrites all
# of them again: about half of the 10 s of collection. Let the test process write its
# ``__pycache__`` (ignored by git), as Python does by default.
sys.dont_write_bytecode = False


def pytest_configure(config):
    """Compile ``sim/`` to bytecode once (the controller, before any xdist worker starts). Where
    PYTHONDONTWRITEBYTECODE is set (the 2-core reference machine sets it) Python writes no
    ``.pyc``, so every ``simrun`` subprocess of the tests compiled every module it imports again
    (about 0.3 s of CPU each); ``compileall`` writes them whatever the variable says, and only
    where a source changed. ``__pycache__/`` is ignored by git."""
    if not hasattr(config, "workerinput"):
        compileall.compile_dir(ROOT / "sim", quiet=2)


def pytest_collection_modifyitems(items):
    """The modules with a test marked ``slow`` first (in their order, each module whole, so a
    module-scoped fixture is built once): with ``-n`` (pytest-xdist, ``--dist worksteal``) the
    long tests start at once instead of ending the run on one worker while the others idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable


def uniform_program(p: int, m: int, f_ns: int, b_ns: int, *, v: int = 1, schedule: str = "1f1b",
                    pp_bytes: int = 0, layers_per_chunk: int = 1) -> PipelineProgram:
    """p identical stages; per microbatch and stage: forward f_ns, backward b_ns (split equally
    into input-grad and weight-grad), spread evenly over v chunks × layers_per_chunk layers."""
    n = v * layers_per_chunk
    assert f_ns % n == 0 and b_ns % (2 * n) == 0
    lay = Layer("layer", Phase(f_ns // n), Phase(b_ns // (2 * n)), Phase(b_ns // (2 * n)))
    stages = [StageProgram(s, [tuple([lay] * layers_per_chunk) for _ in range(v)])
              for s in range(p)]
    return PipelineProgram(tp=1, pp=p, dp=1, ep=1, vpp=v, microbatches=m, pp_bytes=pp_bytes,
                           stages=stages, schedule=schedule)


@pytest.fixture
def root() -> Path:
    return ROOT


def run_json(argv, tmp_path, name):
    """``simrun ARGV --quiet --json tmp_path/NAME.json``: exit 0, and the report it wrote."""
    import json

    from sim.cli import main

    out = tmp_path / f"{name}.json"
    assert main([*argv, "--quiet", "--json", str(out)]) == 0
    return json.loads(out.read_text())

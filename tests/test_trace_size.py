"""Trace size guard (sim/viz/trace_size.py): the estimate made from the program before
simulating, the refusal over 200 MB without --force, and bounded memory with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from conftest import ROOT, SEED_512, SEED_1024, TOPOLOGIES, WORKLOADS

import sim.engine
from sim.cli import main
from sim.parallel.config import Training
from sim.parallel.layout import LayoutRequest
from sim.scenario.model_run import model_run
from sim.topology import load_topology
from sim.viz.trace_size import LIMIT_BYTES, estimate_trace_bytes, stage_events
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program

ALL_1024 = ["--workload", str(SEED_1024), "--topo", str(TOPOLOGIES / "dgx-a100-1024.yaml"),
            "--per-rank", "--trace-ranks", "all"]


def events_in(path) -> int:
    return sum(1 for line in open(path, encoding="utf-8") if '"ph":"X"' in line)


def _aicb(seed, microbatches=None):
    return build_program(read_workload(seed), LayoutOptions(microbatches=microbatches))


def _gpt2_model():
    topo = load_topology(TOPOLOGIES / "tiny-2x2.yaml")
    return model_run(str(WORKLOADS / "models" / "gpt2-medium.yaml"), LayoutRequest(tp=2, pp=2),
                     Training(global_batch=8), topo).program


CASES = {
    "aicb-1024": (["--workload", str(SEED_1024), "--topo",
                   str(TOPOLOGIES / "dgx-a100-1024.yaml")], lambda: _aicb(SEED_1024)),
    "aicb-512-interleaved": (["--workload", str(SEED_512), "--topo",
                              str(TOPOLOGIES / "dgx-a100-512.yaml"), "--microbatches", "8"],
                             lambda: _aicb(SEED_512, 8)),
    # a generated model: DP gradient reductions issued once, in the last microbatch's backward
    "model": (["--model", str(WORKLOADS / "models" / "gpt2-medium.yaml"), "--topo",
               str(TOPOLOGIES / "tiny-2x2.yaml"), "--tp", "2", "--pp", "2", "--global-batch",
               "8"], _gpt2_model),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_estimate_is_within_5_percent_of_the_written_trace(case, tmp_path):
    args, program = CASES[case]
    out = tmp_path / "t.json"
    assert main([*args, "--trace", str(out), "--quiet"]) == 0
    prog = program()
    assert sum(stage_events(prog, st) for st in prog.stages) == pytest.approx(
        events_in(out), rel=0.05)
    est = estimate_trace_bytes(prog, Counter(range(prog.pp)))
    assert est == pytest.approx(os.path.getsize(out), rel=0.05)


def test_all_1024_ranks_are_refused_without_force_before_simulating(capsys, monkeypatch):
    def never(*a, **k):
        raise AssertionError("simulated although the trace is refused")

    monkeypatch.setattr(sim.engine, "simulate", never)
    rc = main([*ALL_1024, "--trace", "t.json"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    # every stage has 64 ranks: 64 × the estimate of one rank per stage
    mb = 64 * estimate_trace_bytes(_aicb(SEED_1024), Counter(range(16))) / 1e6
    assert f"--trace: the trace of 1024 ranks would be about {mb:,.0f} MB (over 200 MB)" in err[0]
    assert mb * 1e6 > LIMIT_BYTES and "--force" in err[0]
    assert not os.path.exists("t.json")


def test_small_traces_need_no_force(tmp_path, capsys):
    assert main(["--workload", str(SEED_512), "--topo", str(TOPOLOGIES / "dgx-a100-512.yaml"),
                 "--trace", str(tmp_path / "t.json"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


# Measures the peak resident memory of a separate process (its own RUSAGE_CHILDREN, so no
# earlier child of the test process counts). Takes 1-3 minutes on the 2-core machine
# (simulating all 1024 ranks, then writing about 600 MB): a benchmark, run with -m benchmark.
PEAK = """
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
print(rc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, repr(rc.stderr))
"""


@pytest.mark.benchmark
def test_all_1024_ranks_with_force_stay_under_1_GB(tmp_path):
    out = tmp_path / "all.json"
    got = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "sim.cli",
                          *ALL_1024, "--trace", str(out), "--force", "--quiet"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout.split(" ", 2)
    rc, peak_kib, err = int(got[0]), int(got[1]), got[2]
    assert rc == 0
    assert "warning: --trace: the trace of 1024 ranks would be about" in err
    assert peak_kib * 1024 < 1e9, f"peak RSS {peak_kib / 1024:.0f} MiB"
    size = out.stat().st_size
    assert size > LIMIT_BYTES
    prog = _aicb(SEED_1024)
    assert 64 * estimate_trace_bytes(prog, Counter(range(16))) == pytest.approx(size, rel=0.05)
    with open(out, encoding="utf-8") as f:  # valid JSON, every rank a process of its own
        doc = json.load(f)
    assert doc["otherData"]["ranks_shown"] == "0-1023"

"""Trace size guard and streaming writer (sim/viz/trace_size.py, sim/viz/trace.py)."""

from __future__ import annotations

import gzip
import os
from collections import Counter

import pytest
from conftest import SEED_512, SEED_1024, TOPOLOGIES

from sim.cli import main
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork
from sim.viz.trace import build_trace, trace_chunks, trace_text, write_trace
from sim.viz.trace_size import BYTES_PER_EVENT, estimate_trace_bytes, stage_events
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program


def events_in(path) -> int:
    return sum(1 for line in open(path, encoding="utf-8") if '"ph":"X"' in line)


@pytest.mark.parametrize("seed,topo", [(SEED_1024, "dgx-a100-1024"), (SEED_512, "dgx-a100-512")])
def test_the_estimate_is_within_5_percent_of_the_written_trace(seed, topo, tmp_path):
    out = tmp_path / "t.json"
    assert main(["--workload", str(seed), "--topo", topo, "--trace", str(out), "--quiet"]) == 0
    prog = build_program(read_workload(seed), LayoutOptions())
    assert sum(stage_events(prog, st) for st in prog.stages) == pytest.approx(
        events_in(out), rel=0.05)
    est = estimate_trace_bytes(prog, Counter(range(prog.pp)))
    assert est == pytest.approx(os.path.getsize(out), rel=0.10)
    assert 200 <= BYTES_PER_EVENT <= 300


def test_all_1024_ranks_are_refused_without_force_before_simulating(capsys, monkeypatch):
    import sim.engine

    def never(*a, **k):
        raise AssertionError("simulated although the trace is refused")

    monkeypatch.setattr(sim.engine, "simulate", never)
    rc = main(["--workload", str(SEED_1024), "--topo", str(TOPOLOGIES / "dgx-a100-1024.yaml"),
               "--per-rank", "--trace-ranks", "all", "--trace", "t.json"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "--trace: the trace of 1024 ranks would be about 626 MB" in err[0]
    assert "--force" in err[0]


def _result():
    """Four stages with TP and DP collectives, every rank simulated (a small per-rank run)."""
    prog = build_program(read_workload(SEED_512), LayoutOptions(tp=2, pp=2, all_gpus=8,
                                                                microbatches=4))
    from sim.comm import GroupKind

    return simulate(prog, AlphaBetaNetwork(1000, {g: 100.0 for g in GroupKind}), per_rank=True,
                    record_spans=True)


@pytest.mark.parametrize("ranks", ["stage-reps", "all", "0-2,5"])
def test_streamed_text_is_the_in_memory_text(ranks, tmp_path):
    res = _result()
    whole = trace_text(build_trace(res, ranks=ranks, gpus_per_node=8))
    assert "".join(trace_chunks(res, ranks=ranks, gpus_per_node=8)) == whole
    write_trace(tmp_path / "t.json.gz", trace_chunks(res, ranks=ranks, gpus_per_node=8))
    assert gzip.decompress((tmp_path / "t.json.gz").read_bytes()).decode() == whole
    again = tmp_path / "u.json.gz"
    write_trace(again, trace_chunks(res, ranks=ranks, gpus_per_node=8))
    assert again.read_bytes() == (tmp_path / "t.json.gz").read_bytes()

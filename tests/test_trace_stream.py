"""The trace is written streaming, rank by rank (sim/viz/trace.py), byte-identical to the
in-memory text."""

from __future__ import annotations

import gzip

import pytest
from conftest import SEED_512

from sim.comm import GroupKind
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork
from sim.viz.trace import build_trace, trace_chunks, trace_text, write_trace
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program


def _result():
    """Two stages of TP 2 with DP 2, every rank simulated (a small per-rank run)."""
    prog = build_program(read_workload(SEED_512), LayoutOptions(tp=2, pp=2, all_gpus=8,
                                                                microbatches=4))
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

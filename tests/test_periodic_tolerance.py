"""The periodic shortcut within a tolerance (``simrun validate``): a pipeline that repeats itself
only up to ns-scale jitter of contended transfers, extrapolated from short runs, against the
full simulation of every microbatch."""

from __future__ import annotations

import pytest
from conftest import TOPOLOGIES, WORKLOADS

from sim.engine.periodic import VALIDATE_TOLERANCE, extrapolate_counts
from sim.validation.cases import load_cases, run_case


def test_counts_within_a_slack_extend_by_their_mean_step():
    a, b, c = {"x": 5, "y": 1}, {"x": 8, "y": 1}, {"x": 12, "y": 1}
    assert extrapolate_counts([a, b, c], 10) is None  # steps 3 then 4: not exactly periodic
    assert extrapolate_counts([a, b, c], 10, slack=0) is None
    # within a slack of 1: c + (n − 2)·(c − a) / 2 = 12 + 8 · 7 / 2 = 40 (y: 1 + 0)
    assert extrapolate_counts([a, b, c], 10, slack=1) == {"x": 40, "y": 1}
    # equal steps: the same as the exact continuation, a + n·d = 5 + 10 · 3 = 35
    assert extrapolate_counts([a, b, {"x": 11, "y": 1}], 10, slack=1) == {"x": 35, "y": 1}
    assert extrapolate_counts([a, b, {"x": 14, "y": 1}], 10, slack=1) is None  # 3 vs 6


@pytest.mark.slow
def test_a_quasi_periodic_case_within_its_tolerance(tmp_path):
    """Llama 3.1 405B's dimensions with 14 layers (14 + embedding + loss = 16 layers over
    PP 4 × VPP 4 chunks, as the shipped 405B cases split 126 + 2), TP 2 PP 4 CP 4 DP 4 (128 GPUs) on
    GB200 NVL72 racks, FP8, TP communication overlap: its TP collectives share NVLink with the
    pipeline and data-parallel transfers, and no two short runs step exactly alike. The full
    simulation (192 microbatches) against the extrapolation from 8, 12 and 16 microbatches.
    (The layout was 30 layers, CP 2, DP 8 until GB300's compute became H100's transferred
    kernel table, sim/models/compute_transfer.py, then on GB300 racks until the transfer used
    the achievable matmul rates: with those times each of these runs on GB300 is exactly
    periodic.)"""
    spec = (WORKLOADS / "models" / "llama3-405b.yaml").read_text()
    assert "\nlayers: 126\n" in spec
    model = tmp_path / "llama3-405b-14.yaml"
    model.write_text(spec.replace("\nlayers: 126\n", "\nlayers: 14\n"))
    v = tmp_path / "v.yaml"
    v.write_text(
        f"topology: {TOPOLOGIES / 'gb200-nvl72.yaml'}\n"
        "cases:\n"
        f"  - {{name: q, model: {model}, tp: 2, pp: 4, cp: 4, dp: 4, vpp: 4,\n"
        "     account_for_embedding_in_pipeline_split: true,\n"
        "     account_for_loss_in_pipeline_split: true, global_batch: 768, micro_batch: 1,\n"
        "     sequence_parallel: true, distributed_optimizer: true, dtype: fp8,\n"
        "     tp_comm_overlap: true, measured_s: 1.0}\n")
    _, (case,) = load_cases(v)
    exact = run_case(case, tolerance=0.0)
    assert exact["simulated"] == "in full"  # not periodic to the ns: the full run
    full = run_case(case, tolerance=None)
    assert full["predicted_s"] == exact["predicted_s"]
    row = run_case(case)  # validate's default
    assert row["simulated"] == (f"extrapolated within {VALIDATE_TOLERANCE:g} of a period from "
                                "8, 12, 16 microbatches")
    rel = (row["predicted_s"] - full["predicted_s"]) / full["predicted_s"]
    assert abs(rel) < 2.5e-3, rel  # measured: −0.008% (VALIDATE_TOLERANCE)
    assert rel != 0.0  # an approximation, not the full run in disguise
    for g in ("TP", "PP", "DP"):
        assert abs(row["exposed_comm_s"][g] - full["exposed_comm_s"][g]) < \
            2.5e-3 * full["predicted_s"], g

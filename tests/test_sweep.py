"""``simrun sweep``: enumeration, ranking, outputs, interruption + resume, error rows."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import TOPOLOGIES, WORKLOADS

from sim.cli import main
from sim.errors import UsageError
from sim.models import load_model
from sim.sweep import Space, SweepContext, Training, enumerate_layouts, run_tasks
from sim.sweep import SweepPoint as Layout
from sim.sweep.store import ResultStore
from sim.topology import load_topology

TOPO = str(TOPOLOGIES / "dgx-a100-1024.yaml")
GPT175 = str(WORKLOADS / "models" / "gpt3-175b.yaml")
GPT22 = str(WORKLOADS / "models" / "gpt-22b.yaml")
# GPT-3 175B on all 1024 A100s of the topology: TP 8 x PP {2..32} x VPP {1,2,3} x micro batch
# {1,2}; 30 combinations, 2 invalid (96 layers cannot be split into 32·2 chunks), 28 valid.
SWEEP_175 = ["sweep", "--model", GPT175, "--topo", TOPO, "--gpus", "1024", "--tp", "8",
             "--pp", "2,4,8,16,32", "--vpp", "1,2,3", "--micro-batch", "1,2",
             "--global-batch", "512", "--sequence-parallel", "--recompute", "selective",
             "--distributed-optimizer", "--workers", "2", "--no-progress"]
# Interruption and resume are the same code whatever a layout costs: GPT-2 medium on 8 GPUs,
# TP {1,2} x PP {1,2,4} x VPP {1,2} x micro batch {1,2}, 20 valid layouts of a fraction of a
# second each (the 175B layouts above take 0.5-2.3 s each; test_sweep_of_175b_… checks the
# plots). The uninterrupted and the interrupted run in this process, the resumed one on two
# worker processes (results arrive in any order), so its outputs also equal the in-process ones.
SWEEP_SMALL = ["sweep", "--model", str(WORKLOADS / "models" / "gpt2-medium.yaml"), "--topo",
               str(TOPOLOGIES / "tiny-fattree-8.yaml"), "--gpus", "8", "--tp", "1,2",
               "--pp", "1,2,4", "--vpp", "1,2", "--micro-batch", "1,2", "--global-batch", "16",
               "--no-progress", "--no-plot"]


@pytest.fixture(scope="module")
def full_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "full"
    assert main([*SWEEP_175, "--out", str(out)]) == 0
    return out


def test_enumeration_obeys_megatrons_constraints():
    model = load_model(GPT175)
    lays, skipped = enumerate_layouts(model, Space(gpus=1024, vpp=(1, 2, 3, 4)),
                                      Training(global_batch=512), gpus_per_node=8)
    assert lays and lays == sorted(lays, key=lambda x: x.key)
    assert {x.tp for x in lays} == {1, 2, 4, 8}  # default TP: powers of two up to a node
    for x in lays:
        assert x.tp * x.pp * x.dp == 1024
        assert 96 % (x.pp * x.vpp) == 0 and 96 % x.tp == 0
        assert 512 % (x.micro_batch * x.dp) == 0
        if x.vpp > 1:
            m = 512 // x.dp
            assert x.pp >= 2 and m >= x.pp and (m % x.pp == 0 or m % x.pp >= x.pp)
    keys = {x.key for x in lays}
    assert "tp8-pp32-dp4-vpp2-mb1" not in keys  # 32·2 chunks do not divide 96 layers
    reasons = dict(skipped)
    assert "cannot be split evenly" in reasons["tp8-pp32-dp4-vpp2-mb1"]
    assert "interleaved schedule needs ≥ 2 pipeline stages" in reasons["tp8-pp1-dp128-vpp2-mb1"]
    assert Layout(8, 8, 16, 3, 1).key == "tp8-pp8-dp16-vpp3-mb1"


@pytest.mark.slow
def test_sweep_of_175b_on_1024_gpus_completes_and_ranks(full_sweep, capsys):
    data = json.loads((full_sweep / "results.json").read_text())
    rows = data["rows"]
    assert data["complete"] and data["layouts"] == len(rows) == 28 >= 20
    assert data["ok"] + data["infeasible"] + data["errors"] == 28 and data["errors"] == 0
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) >= 20
    # ranked by iteration time, 1 = fastest; infeasible ones after, with a reason, not simulated
    times = [r["iteration_time_s"] for r in ok]
    assert times == sorted(times) and [r["rank"] for r in ok] == list(range(1, len(ok) + 1))
    assert data["best"] == ok[0]["layout"]
    for r in rows[len(ok):]:
        assert r["status"] == "infeasible" and r["rank"] is None
        assert r["iteration_time_s"] is None and "exceeds the 80.0 GB" in r["reason"]
        assert r["memory_per_gpu_bytes"] > r["memory_capacity_bytes"] == 80 * 10**9
    # PP 2 puts 48 layers of 175B on a GPU: 11 B parameters → 22 GB weights + 44 GB fp32 grads
    assert {r["layout"].split("-dp")[0] for r in rows[len(ok):]} == {"tp8-pp2"}
    for r in ok:
        n, it = 512 * 2048, r["iteration_time_s"]
        assert r["tokens_per_s"] == pytest.approx(n / it, rel=1e-12)
        assert r["mfu"] == pytest.approx(r["tflops_per_gpu"] / 312, rel=1e-12)
        assert r["microbatches"] == 512 // (r["micro_batch"] * r["dp"])
        assert 0 <= r["bubble_fraction"] < 1 and r["memory_per_gpu_bytes"] <= 80 * 10**9
        assert r["exposed_TP_s"] > 0 and r["exposed_DP_s"] > 0 and r["exposed_EP_s"] == 0
    # more microbatches in flight per chunk → more bubble: VPP 3 beats VPP 1 at every PP
    by_key = {r["layout"]: r for r in ok}
    for pp, dp in ((4, 32), (8, 16), (16, 8)):
        v1, v3 = by_key[f"tp8-pp{pp}-dp{dp}-vpp1-mb1"], by_key[f"tp8-pp{pp}-dp{dp}-vpp3-mb1"]
        assert v3["bubble_fraction"] < v1["bubble_fraction"]
    # CSV: same rows, same order, units in the headers
    with open(full_sweep / "results.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [t["layout"] for t in table] == [r["layout"] for r in rows]
    assert {"iteration_time_s", "tokens_per_s", "memory_per_gpu_bytes", "exposed_TP_s"} <= set(
        table[0])
    for name in ("ranking.png", "heatmap.png"):
        assert (full_sweep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_row_matches_a_direct_model_run(full_sweep, tmp_path):
    rows = json.loads((full_sweep / "results.json").read_text())["rows"]
    r = next(x for x in rows if x["layout"] == "tp8-pp8-dp16-vpp3-mb1")
    out = tmp_path / "r.json"
    assert main(["--model", GPT175, "--topo", TOPO, "--tp", "8", "--pp", "8", "--vpp", "3",
                 "--global-batch", "512", "--sequence-parallel", "--recompute", "selective",
                 "--distributed-optimizer", "--json", str(out), "--quiet"]) == 0
    rep = json.loads(out.read_text())
    assert rep["iteration_time_s"] == r["iteration_time_s"] and rep["mfu"] == r["mfu"]
    assert rep["memory"]["peak_bytes"]["total_bytes"] == r["memory_per_gpu_bytes"]


def test_interrupted_sweep_resumes_without_redoing_layouts(tmp_path, capsys):
    whole = tmp_path / "whole"
    assert main([*SWEEP_SMALL, "--out", str(whole), "--workers", "1"]) == 0
    assert json.loads((whole / "results.json").read_text())["layouts"] == 20
    out = tmp_path / "resumed"
    # "interrupt" after 7 layouts, and a torn line as a kill in the middle of a write leaves
    assert main([*SWEEP_SMALL, "--out", str(out), "--limit", "7", "--workers", "1"]) == 0
    assert json.loads((out / "results.json").read_text())["complete"] is False
    first = (out / "results.jsonl").read_text().splitlines()
    assert len(first) == 7
    with open(out / "results.jsonl", "a") as fh:
        fh.write('{"layout": "tp2-pp4-dp1-vpp2-mb')
    capsys.readouterr()
    # without --resume the earlier results are protected
    assert main([*SWEEP_SMALL, "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main([*SWEEP_SMALL, "--out", str(out), "--resume", "--workers", "2"]) == 0
    err = capsys.readouterr().err
    assert "7 already done, 13 to run" in err and "local process pool (2 workers)" in err
    lines = (out / "results.jsonl").read_text().splitlines()
    assert lines[:7] == first  # kept as they were (their wall-clock elapsed_s included)
    keys = [json.loads(x)["layout"] for x in lines]
    assert len(keys) == 20 == len(set(keys))  # every layout exactly once: none recomputed
    # the final outputs equal the uninterrupted run's, byte for byte
    for name in ("results.csv", "results.json"):
        assert (out / name).read_bytes() == (whole / name).read_bytes()
    # resuming a finished sweep runs nothing
    assert main([*SWEEP_SMALL, "--out", str(out), "--resume"]) == 0
    assert "20 already done, 0 to run" in capsys.readouterr().err


def test_resume_refuses_other_settings(tmp_path, capsys):
    out = tmp_path / "other"
    assert main([*SWEEP_SMALL, "--out", str(out), "--limit", "1", "--workers", "1"]) == 0
    args = [a if a != "16" else "32" for a in SWEEP_SMALL]
    assert main([*args, "--out", str(out), "--resume"]) == 2
    assert "differs in: training" in capsys.readouterr().err


def test_a_failing_layout_is_recorded_and_the_sweep_goes_on(tmp_path):
    """A real failure: the context's topology has 8 GPUs, so layouts needing 16 fail."""
    model = load_model(GPT22)
    topo = load_topology(TOPO, nodes=1)
    ctx = SweepContext(model, topo, Training(global_batch=8, recompute="full"))
    rows = []
    lays = [Layout(8, 1, 1, 1, 1), Layout(8, 2, 1, 1, 1), Layout(4, 2, 1, 1, 1)]
    backend = run_tasks(ctx, lays, rows.append, workers=1)
    assert backend.startswith("in-process")
    by = {r["layout"]: r for r in rows}
    assert by["tp8-pp1-dp1-vpp1-mb1"]["status"] == "ok"
    assert by["tp4-pp2-dp1-vpp1-mb1"]["status"] == "ok"
    bad = by["tp8-pp2-dp1-vpp1-mb1"]
    assert bad["status"] == "error" and "needs 16 GPUs" in bad["reason"]
    # and through the store: the error row is on disk and counts as done when resuming
    store = ResultStore(tmp_path / "s")
    assert store.open({"x": 1}, resume=False) == {}
    for r in rows:
        store.append(r)
    store.close()
    done = ResultStore(tmp_path / "s").open({"x": 1}, resume=True)
    assert done["tp8-pp2-dp1-vpp1-mb1"]["status"] == "error" and len(done) == 3
    with pytest.raises(UsageError, match="differs in: x"):
        ResultStore(tmp_path / "s").open({"x": 2}, resume=True)


def test_local_process_pool_equals_in_process(tmp_path):
    base = ["sweep", "--model", GPT22, "--topo", TOPO, "--nodes", "2", "--tp", "4,8", "--pp",
            "1,2", "--global-batch", "16", "--recompute", "full", "--no-plot", "--no-progress",
            "--quiet"]
    assert main([*base, "--out", str(tmp_path / "a"), "--workers", "1"]) == 0
    assert main([*base, "--out", str(tmp_path / "b"), "--workers", "2"]) == 0
    a = json.loads((tmp_path / "a" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "results.json").read_text())
    assert a == b and a["ok"] >= 3


def test_topology_and_model_by_shipped_name_as_in_a_run(tmp_path):
    # `simrun sweep --topo NAME` takes a shipped topology's name like `simrun --topo NAME`; the
    # settings record the same file digest as with its path
    base = ["sweep", "--nodes", "2", "--tp", "8", "--pp", "1", "--global-batch", "16",
            "--recompute", "full", "--no-plot", "--no-progress", "--quiet", "--workers", "1"]
    assert main([*base, "--model", GPT22, "--topo", TOPO, "--out", str(tmp_path / "a")]) == 0
    assert main([*base, "--model", "gpt-22b", "--topo", "dgx-a100-1024",
                 "--out", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "results.json").read_text())
    assert a["settings"]["topology"] == b["settings"]["topology"]
    assert a["rows"] == b["rows"] and a["ok"] == 1

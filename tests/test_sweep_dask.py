"""The distributed path of ``simrun sweep``: a real local Dask cluster (scheduler + 2 worker
processes on 127.0.0.1), not a mock. The results must equal the in-process run's."""

from __future__ import annotations

import json

import pytest
from conftest import TOPOLOGIES, WORKLOADS

from sim.cli import main

distributed = pytest.importorskip("distributed")

TOPO = str(TOPOLOGIES / "dgx-a100-1024.yaml")
GPT22 = str(WORKLOADS / "models" / "gpt-22b.yaml")
# 22B on 16 GPUs: TP {2,4,8} x PP {1,2,4}: 8 valid layouts (TP 2 x PP 1 x DP 8: 3 infeasible)
SWEEP = ["sweep", "--model", GPT22, "--topo", TOPO, "--nodes", "2", "--tp", "2,4,8", "--pp",
         "1,2,4", "--global-batch", "16", "--sequence-parallel", "--recompute", "selective",
         "--no-plot", "--no-progress", "--quiet"]


@pytest.mark.slow
def test_sweep_on_a_real_local_dask_cluster(tmp_path, capsys):
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        with distributed.Client(cluster) as probe:
            workers = sorted(probe.scheduler_info()["workers"])
            assert len(workers) == 2  # two separate worker processes
        rc = main([*SWEEP, "--out", str(tmp_path / "dask"), "--scheduler",
                   cluster.scheduler_address])
        err = capsys.readouterr().err
        assert rc == 0
        assert f"on Dask cluster at {cluster.scheduler_address} (2 workers)" in err
        # the scheduler ran one simulation task per layout the memory check did not decide
        # (its transition log names them: the 5 feasible ones; the 3 that do not fit are
        # decided by the early pass, never simulated) and released them all afterwards
        with distributed.Client(cluster) as probe:
            keys = probe.run_on_scheduler(lambda dask_scheduler: sorted(
                {str(t[0]).rsplit("-tp", 1)[1] for t in dask_scheduler.transition_log
                 if str(t[0]).startswith("simrun-sweep-") and t[2] == "memory"}))
            assert len(keys) == 5
            assert probe.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) == 0
    assert main([*SWEEP, "--out", str(tmp_path / "local"), "--workers", "1"]) == 0
    a = json.loads((tmp_path / "dask" / "results.json").read_text())
    b = json.loads((tmp_path / "local" / "results.json").read_text())
    assert a == b
    assert a["layouts"] == 8 and a["ok"] == 5 and a["infeasible"] == 3
    assert (tmp_path / "dask" / "results.csv").read_bytes() == (
        tmp_path / "local" / "results.csv").read_bytes()


def test_unreachable_scheduler_is_a_usage_error(tmp_path, capsys):
    rc = main([*SWEEP, "--out", str(tmp_path / "x"), "--scheduler", "tcp://127.0.0.1:9",
               "--scheduler-timeout", "1"])
    assert rc == 2 and "cannot connect to the Dask scheduler" in capsys.readouterr().err

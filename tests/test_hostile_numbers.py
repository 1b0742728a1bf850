"""Reproducers of the second hostile campaign (issue 31) for numbers on the command line: each
was an internal error or a hang, and is now one line with exit 2 naming the flag, before any
work (real subprocesses, under a 2 GB address-space limit and a 20 s timeout)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
from hostile_support import ROOT

AICB = ["--workload", str(ROOT / "workloads" / "aicb-gpt13b-tp8-pp8-512gpu.txt"), "--topo",
        "dgx-a100-512"]


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


CASES = [
    ([*AICB, "--compute-scale", "1e308"], "--compute-scale", "from 0.001 to 1000"),
    ([*AICB, "--compute-scale", "1e-300"], "--compute-scale", "from 0.001 to 1000"),
    ([*AICB, "--degrade-link", "nic:0.0:1e-300"], "--degrade-link", "[1e-06, 1]"),
    ([*AICB, "--degrade-link", "nic:0.0:nan"], "--degrade-link", "must be a number"),
    ([*AICB, "--slow-gpu", "3:1e-300"], "--slow-gpu", "[0.001, 1000]"),
    ([*AICB, "--jitter", "0.1", "--samples", "9223372036854775807"], "--samples",
     "from 1 to 1000"),
    # refusals that did not name their flag ("failed NIC: …", "degraded link: …")
    ([*AICB, "--fail-nic", "999.0"], "--fail-nic", "not in the cluster"),
    ([*AICB, "--degrade-link", "nic:999.0:0.5"], "--degrade-link", "not in the cluster"),
    ([*AICB, "--degrade-link", "nvlink:9999:0.5"], "--degrade-link", "no NVLink port"),
    ([*AICB, "--slow-gpu", "99999:2"], "--slow-gpu", "not in the cluster"),
    (["collective", "--topo", "dgx-h100-scalable", "--nodes", "8192", "--op", "alltoall",
      "--gpus", "65536", "--sizes", "1G:1G"], "--gpus", "at most 4194304"),
]


@pytest.mark.parametrize("args,flag,words", CASES, ids=[" ".join(c[0][-2:]) for c in CASES])
def test_numeric_edges_are_one_line_before_any_work(args, flag, words):
    p = subprocess.run([sys.executable, "-m", "sim.cli", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=20, preexec_fn=_limited)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and words in lines[0], p.stderr
    assert "internal error" not in p.stderr

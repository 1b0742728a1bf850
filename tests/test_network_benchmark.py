"""Speed goals of the network model (run with ``pytest -m benchmark``; deselected by default).

- The whole ``simrun`` on the 1024-GPU seed, Python start-up included, in about a second.
- Symmetric mode: the work per communication does not grow with the cluster (the same
  per-stage program on 16 and on 128 DGX nodes costs about the same per started collective).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import ROOT, SEED_1024, TOPOLOGIES
from test_network_symmetry import program

from sim.engine import simulate
from sim.network import build_network
from sim.placement import Placement
from sim.topology import load_topology

pytestmark = pytest.mark.benchmark


def test_simrun_1024_gpu_seed_in_about_a_second():
    best = min(_wall([sys.executable, "-m", "sim.cli", "--workload", str(SEED_1024), "--topo",
                      str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--quiet"]) for _ in range(3))
    assert best < 1.5, best


def _wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t


def test_per_communication_cost_does_not_grow_with_gpus():
    # the same groups (TP 8, DP 4) on 16 and on 128 DGX nodes (4 vs 32 pipeline stages):
    # the time per started communication stays flat while the GPU count grows 8×
    per_op = {}
    for nodes, pp in ((16, 4), (128, 32)):
        topo = load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml"), nodes=nodes)
        prog = program(tp=8, dp=4, pp=pp, m=32)
        net = build_network(topo)
        pl = Placement(8, 4, pp)
        simulate(prog, net, placement=pl)  # first run: per-class set-up (routes, copies)
        t = time.perf_counter()
        simulate(prog, net, placement=pl)
        per_op[nodes] = (time.perf_counter() - t) / net.ops_started
    assert per_op[128] < 2 * per_op[16], per_op

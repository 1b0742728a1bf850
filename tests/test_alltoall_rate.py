"""The inter-node all-to-all rate against what NVIDIA states for it (docs/validation.md,
"Host launch cost and the all-to-all rate").

NCCL's all-to-all cannot aggregate a node's NICs: each GPU's inter-node traffic leaves through
its own NIC, so "the performance you should see is the performance of a single NIC"
(NVIDIA/nccl-tests issue #267, S. Jeaugey, 2024-11-19), 48-49 GB/s for an NDR ConnectX-7
(same thread, 2025-01-23; 46-48 GB/s in nccl-tests#290). On N nodes of g GPUs (n = N·g ranks)
each rank sends (n − g)/n of its buffer S across nodes, so the time is S·(n − g)/(n·B) and
the algorithm bandwidth S/t = B·n/(n − g); nccl-tests' bus bandwidth is that × (n − 1)/n
(nccl-tests#130: "on 2 nodes ... BusBW = 2x network bandwidth per GPU", N/(N − 1)× in general).
"""

from __future__ import annotations

import re

import pytest
from conftest import TOPOLOGIES

from sim.cli import main as simrun

NIC_GBPS = 48.0  # NDR 400 Gb/s, NVIDIA's figure (nccl-tests#267, #290)


@pytest.mark.parametrize("nodes", [2, 4])
def test_alltoall_across_dgx_h100_nodes_runs_at_one_nic_per_gpu(nodes, capsys):
    g = 8
    n = nodes * g
    topo = str(TOPOLOGIES / "dgx-h100-1024.yaml")
    assert simrun(["collective", "--topo", topo, "--op", "alltoall", "--gpus", str(n),
                   "--sizes", "1G"]) == 0
    row = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("1073741824")]
    assert len(row) == 1
    _size, _t, algbw, busbw = (float(x) for x in re.split(r"\s+", row[0].strip())[:4])
    want_alg = NIC_GBPS * n / (n - g)          # 96 GB/s on 2 nodes, 64 on 4
    assert want_alg * 0.95 <= algbw <= want_alg  # the NIC is the ceiling; latency costs < 5%
    assert busbw == pytest.approx(algbw * (n - 1) / n, abs=0.01)

"""Processes per node (torchrun ``--nproc-per-node``, SLURM ``--ntasks-per-node``): a job that
runs K processes on each node of G GPUs uses only the node's first K GPUs.

The job's view of the cluster is a topology whose nodes have K GPUs: GPUs 0..K−1 of each
physical node, with their own PCIe switches, NICs and NVLink (or xGMI) ports unchanged. Every
model reads ranks through that view, so rank ``r`` runs on node ``r // K``, local GPU
``r % K``, i.e. physical GPU ``(r // K)·G + r % K``: this module is the one place where the
rank → GPU map departs from rank ``r`` on GPU ``r``. Real jobs do this on GB200/GB300 NVL72
racks (a node here is the 72-GPU rack, docs/hardware.md) to launch 64 of the 72 GPUs so that
power-of-two TP, CP and EP groups never straddle two racks.

What the view keeps: every NIC of the node (the fabric's leaves and ports are those of the
physical cluster; rails are the NICs of the GPUs a group uses, and a NIC whose GPUs are all
idle carries nothing), the NVLink per-GPU rate and NVLS (NVLink SHARP reduces over any subset
of the domain's GPUs). An xGMI full mesh of K GPUs keeps one link per pair (K − 1 per GPU used).
Fault indices (``--slow-gpu``, ``nvlink:GPU``) count the GPUs the job uses: ``node·K + i``.
"""

from __future__ import annotations

import dataclasses

from sim.errors import UsageError
from sim.topology.spec import Topology


def with_nproc_per_node(topo: Topology, k: int | None) -> Topology:
    """``topo`` as a job of ``k`` processes per node sees it (``None`` or ``k`` = the node's
    GPUs: ``topo`` itself). :class:`UsageError` (field ``nproc_per_node``) when ``k`` < 1 or
    ``k`` exceeds the node's GPUs."""
    g = topo.node.gpus
    if k is None or k == g:
        return topo
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= g:
        raise UsageError(f"must be between 1 and the {g} GPUs of a {topo.node.name} node "
                         f"({topo.path}), got {k}", field="nproc_per_node")
    node = topo.node
    pcie = dataclasses.replace(node.pcie, gpu_switch=node.pcie.gpu_switch[:k])
    nics = node.nics
    if nics.count:
        nics = dataclasses.replace(nics, gpus=tuple(tuple(i for i in gs if i < k)
                                                    for gs in nics.gpus))
    xgmi = node.xgmi
    if xgmi is not None:
        xgmi = dataclasses.replace(xgmi, links_per_gpu=k - 1) if k > 1 else None
    view = dataclasses.replace(node, gpus=k, pcie=pcie, nics=nics, xgmi=xgmi)
    return dataclasses.replace(topo, node=view, idle_gpus_per_node=g - k)

"""In-network reduction: NVLS (NVLink SHARP in a node's NVSwitches) and SHARP / CollNet (in
the fabric's switches), NCCL's ``NVLS`` and ``CollNetDirect`` all-reduce algorithms.

A topology declares them: ``node.nvlink.nvls: true`` (NVSwitch gen3, H100 and newer) and
``fabric.sharp: true`` (InfiniBand switches with SHARP, e.g. Quantum). ``auto`` takes them when
they are cheaper; NCCL's switches (``--nccl-nvls-enable``, ``--nccl-collnet-enable``,
``--nccl-algo``) turn them off or on as in NCCL (NVLS on by default where supported, CollNet off
by default: NCCL_COLLNET_ENABLE=0).

- ``nvls`` (AllReduce inside one node): each GPU reduces its 1/n of the buffer with a multimem
  load-reduce (the switch reads the n GPUs' S/n and adds them) and multicasts the result with a
  multimem store: every GPU sends S + S/n and receives S/n + S. As flows: one coflow over the
  ranks in a cycle whose edges carry ``(n+1)/n · S`` (every GPU's up- and down-link loaded
  once). Payload efficiency 0.85 (NCCL's nvlsEfficiency, Hopper); latency NCCL's 25 µs + two
  step overheads + twice the path through the switch.
- ``collnet`` (AllReduce over N ≥ 2 nodes with g ranks each): reduce-scatter inside each node
  (a ring, (g−1)/g · S per GPU), then GPU j of every node sends its S/g up to the fabric, whose
  switches add the N contributions and send the sum back: S/g up and S/g down per NIC (as flows:
  a cycle over the N GPUs j, each edge S/g, which loads every NIC once each way; between leaves
  its edges stand for the aggregation tree's up-links), then all-gather inside each node.
  Latency NCCL's (tuning.cc:418-421): 2 · (min(1, g−1) · 3.7 + (g−1) · 0.4) + 31 µs (14 with one
  GPU per node) + the physical latency of the paths.
"""

from __future__ import annotations

from sim.comm import CollKind
from sim.network import nccl
from sim.network.plans import Coflow, Plan, PlanPhase, _Lat, build_plan, node_groups
from sim.topology.cluster import Cluster


def nvls_plan(cl: Cluster, ranks: tuple[int, ...]) -> Plan | None:
    """NVLink SHARP all-reduce (module docstring); None unless the ranks share one node whose
    NVSwitches declare ``nvls``."""
    nv = cl.topo.node.nvlink
    if nv is None or not nv.nvls or len(ranks) < 2 or len(node_groups(cl, ranks)) > 1:
        return None
    n = len(ranks)
    cf = Coflow(tuple((ranks[i], ranks[(i + 1) % n], -1) for i in range(n)), (n + 1) / n, 0)

    def latency(cfs) -> dict[str, int]:
        lat = _Lat(cl, "nvlink")
        for c in cfs:
            lat.add(c.edges, c.channel)
        # two steps (load-reduce, multicast store), each with the calibrated step overhead
        return {"Simple": round((nccl.NVLS_LAT_US + 2 * nccl.STEP_OVERHEAD_US) * 1000)
                + 2 * lat.intra_ns}

    return Plan(CollKind.ALLREDUCE, "nvls", ranks, (PlanPhase((cf,), latency),))


def collnet_plan(cl: Cluster, ranks: tuple[int, ...]) -> Plan | None:
    """SHARP / CollNet Direct all-reduce (module docstring); None unless the fabric declares
    ``sharp`` and the ranks span N ≥ 2 nodes with the same number on each."""
    f = cl.topo.fabric
    nodes = node_groups(cl, ranks)
    n_nodes, g = len(nodes), len(nodes[0])
    if f is None or not f.sharp or n_nodes < 2 or any(len(x) != g for x in nodes):
        return None

    def phys(cfs) -> tuple[int, int]:
        lat = _Lat(cl, "nvlink")
        for c in cfs:
            lat.add(c.edges, c.channel)
        return lat.intra_ns, lat.inter_ns

    def intra() -> PlanPhase:
        cfs = tuple(Coflow(tuple((s[j], s[(j + 1) % g], -1) for j in range(g)), (g - 1) / g, 0)
                    for s in nodes)
        return PlanPhase(cfs, lambda c: {"Simple": (g - 1) * phys(c)[0]})

    cfs = []
    for j in range(g):
        col = [x[j] for x in nodes]
        cfs.append(Coflow(tuple((col[i], col[(i + 1) % n_nodes], cl.nic_of(col[i]))
                                for i in range(n_nodes)), 1 / g, j))
    intra_hw = nccl.COLLNET_HW_LAT_US["nvlink" if cl.topo.node.nvlink else "pci"]
    net_hw = nccl.COLLNET_HW_LAT_US["net"] if g > 1 else nccl.HW_LAT_US[("tree", "net")]["Simple"]
    nccl_us = 2 * (min(1, g - 1) * intra_hw + (g - 1) * nccl.COLLNET_ARITY_US) + net_hw
    inter = PlanPhase(tuple(cfs), lambda c: {"Simple": round(nccl_us * 1000) + 2 * phys(c)[1]})
    phases = (intra(), inter, intra()) if g > 1 else (inter,)
    return Plan(CollKind.ALLREDUCE, "collnet", ranks, phases)


def build(cl: Cluster, kind: CollKind, algorithm: str, ranks: tuple[int, ...]) -> Plan | None:
    """:func:`~sim.network.plans.build_plan`, with the in-network algorithms."""
    if algorithm == "nvls":
        return nvls_plan(cl, ranks) if kind is CollKind.ALLREDUCE else None
    if algorithm == "collnet":
        return collnet_plan(cl, ranks) if kind is CollKind.ALLREDUCE else None
    return build_plan(cl, kind, algorithm, ranks)

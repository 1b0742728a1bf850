"""The assumptions of the flow network model (:mod:`sim.network.flow`), as report lines."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from sim.assumption import Assumption, departs, key_of
from sim.comm import GroupKind
from sim.network import nccl
from sim.network.driver import FlowDriver
from sim.network.tuner import Tuner
from sim.topology.cluster import Cluster


def describe_network(tuner: Tuner, driver: FlowDriver, symmetric: bool,
                     fusable: Mapping[GroupKind, bool]) -> list[str]:
    """Report lines: the model, its configuration (``tuner``), what the run did (``driver``:
    chosen algorithms, contention) and which group kinds were costed in isolation."""
    cl = tuner.cluster
    out = _model_lines(tuner)
    if symmetric:
        out += _symmetric_lines(cl)
    if tuner.class_plans_used:
        out.append("all-to-all: transfers with the same local GPUs, fabric level and alike "
                   "nodes costed as one class flow each (exact when a link all of a class's "
                   "transfers cross limits it)" + (
                       f"; {driver.solver.inexact} fill(s) limited a class by a link only some "
                       "of its transfers cross: approximate there (--per-rank is exact)"
                       if driver.solver.inexact else ""))
    for g in sorted(fusable, key=lambda g: g.value):
        if fusable[g]:
            out.append(Assumption(f"{g.value} collectives never share links with other "
                                  "traffic: costed in isolation and merged with compute",
                                  f"isolated:{g.value}"))
    out += _run_lines(cl, driver)
    return out


def _model_lines(tuner: Tuner) -> list[str]:
    cl = tuner.cluster
    topo = cl.topo
    out = [f"network: flow-level model of {topo.name}: collectives become ring/tree/"
           "point-to-point coflows on the cluster graph; links shared max-min fairly, rates "
           "recomputed whenever a flow starts or ends"]
    out += [Assumption("  " + line, key_of(line), departs=departs(line), explains={},
                       detail=True) for line in topo.describe()]
    algos = sorted(set(tuner.algorithm.values()))
    if algos == ["auto"]:
        nv = topo.node.nvlink
        nvls = " / NVLS in one node, NVLSTree across nodes" if nv is not None and nv.nvls \
            and tuner.nvls_enable else ""
        out.append("collective algorithm: auto — least predicted time over NCCL's algorithms "
                   f"(all-reduce: ring / double binary tree{nvls}; all-gather, reduce-scatter, "
                   "broadcast: ring; all-to-all, send/recv: direct) × protocols LL / LL128 / "
                   "Simple, as NCCL's tuner does (hierarchical only when asked for)")
    else:
        fixed = ", ".join(f"{k.value.lower()} {v}" for k, v in tuner.algorithm.items())
        out.append(f"collective algorithm: {fixed} (auto where a fixed choice does not apply)")
    out.append(f"protocol: {tuner.protocol}")
    if cl.tree is not None:
        out.append(routing_line(cl))
    e = nccl.EFFICIENCY
    out.append("latency: NCCL 2.30 tuning model (base + per-step hop latency by protocol and "
               "link type; multi-node ring/Simple all-reduce × 1.4, Ampere and newer) + the "
               "physical latency of each step's path from the topology + "
               f"{tuner.launch_ns / 1000:g} µs launch overhead per collective + "
               f"{nccl.STEP_OVERHEAD_US:g} µs step overhead per ring/tree step (calibrated on "
               "the 8-GPU DGX A100 8-byte all-reduce)")
    out.append("by message size (NCCL 2.30 enqueue.cc): ring/tree run on the channels NCCL "
               "uses at that size (fewer for small messages: less bandwidth); the tree and "
               "the broadcast chain pay the pipeline ramp, (min(hops, 8) − 1) chunk times of "
               "NCCL's chunk size (rings: none, every rank sends from the first step)")
    for name, got in (("NCCL_ALGO", tuner.nccl_algo), ("NCCL_PROTO", tuner.nccl_proto)):
        if got is not None:
            out.append(f"{name} (--{name.lower().replace('_', '-')}): auto chooses among "
                       + "; ".join(f"{k.value.lower()}: {', '.join(sorted(v))}"
                                   for k, v in got.items()))
    f = tuner.cluster.topo.fabric
    if f is not None and f.sharp:
        out.append("SHARP (CollNet) all-reduce across nodes: "
                   + ("a candidate of auto (NCCL_COLLNET_ENABLE=1)" if tuner.collnet_enable
                      else "off (NCCL_COLLNET_ENABLE=0, NCCL's default; --nccl-collnet-enable 1)"))
    nv = tuner.cluster.topo.node.nvlink
    if nv is not None and nv.nvls:
        out.append("NVLS (NVLink SHARP) all-reduce inside a node: "
                   + (f"a candidate of auto (NCCL_NVLS_ENABLE=1; efficiency "
                      f"{tuner.nvls_efficiency:g}, latency 25 µs)" if tuner.nvls_enable
                      else "off (--nccl-nvls-enable 0)"))
    out.append(f"protocol payload efficiency: ring LL {e['ring']['LL']:g}, LL128 "
               f"{e['ring']['LL128']:g}, Simple {e['ring']['Simple']:g}; tree LL 1/3.8, LL128 "
               f"{e['tree']['LL128']:g}, Simple {e['tree']['Simple']:g}")
    out.append("rings: one channel per NIC (rail) used by the group, crossing each node once "
               "(PXN over NVLink to the NIC's GPU); hierarchical phases end with a barrier")
    return out


_ROUTING_WORDS = {
    "dmodk": "D-mod-K — the InfiniBand subnet manager's fat-tree routing tables (OpenSM "
             "ftree): each flow's up-link fixed by its destination NIC's port index, "
             "collision-free for shift patterns",
    "adaptive": "adaptive (InfiniBand adaptive routing) — the switches pick the least loaded "
                "up-link per packet: traffic spread evenly over all parallel up-links",
    "ecmp": "static ECMP — each flow (NCCL channel × queue pair) hashed (CRC-32 of "
            "'src>dst#channel') onto one of the equal-cost paths; hash collisions share links",
    "spray": "packet spraying (Spectrum-X RoCE adaptive routing) — packets spread evenly over "
             "all parallel up-links, reordered by the receiving NIC",
}


def routing_line(cl: Cluster) -> str:
    """The report line that says how the fabric routes and where the choice comes from."""
    f = cl.topo.fabric
    assert f is not None
    where = (f"the topology's fabric.routing, {f.transport}" if cl.routing == f.routing else
             f"--routing, overriding the topology's {f.routing}")
    qps = (f"; {f.qps_per_connection} queue pair(s) per connection "
           "(NCCL_IB_QPS_PER_CONNECTION)" if cl.routing == "ecmp" else "")
    return f"routing: {_ROUTING_WORDS[cl.routing]} ({where}){qps}"


def _symmetric_lines(cl: Cluster) -> list[str]:
    out = ["symmetric simulation: each simulated rank stands for its class; the identical "
           "copies of each communication load the representatives' links with multiplicities "
           "(copies elsewhere use equivalent, untracked links"
           + ("; static-routing collisions among copies on links no representative uses are "
              "not seen — use --per-rank or adaptive routing to check)"
              if not cl.spreading else ")")]
    uneven = uneven_fabric(cl)
    if uneven:
        out.append(f"the fabric is not uniform ({uneven}): copies in partially filled "
                   "sub-trees take other paths than their representative, so symmetric "
                   "simulation is approximate here (--per-rank is exact)")
    return out


def _run_lines(cl: Cluster, driver: FlowDriver) -> list[str]:
    out = []
    for (kind, group, n, algo), cnt in sorted(driver.chosen.items(),
                                              key=lambda kv: (kv[0][1].value, kv[0][0].value,
                                                              kv[0][3])):
        out.append(Assumption(f"chosen: {group.value} {kind.value.lower()} over {n} ranks: "
                              f"{algo} ({cnt}×)", f"chosen:{group.value}"))
    for g, st in sorted(driver.stats.items(), key=lambda kv: kv[0].value):
        out.append(f"contention: {g.value}: {st.count} communications, achieved "
                   f"{st.actual_ns / 1e6:.3f} ms vs {st.isolated_ns / 1e6:.3f} ms isolated "
                   f"(× {st.slowdown:.3f})")
    worst = sorted(driver.link_delay.items(), key=lambda kv: (-kv[1][0], kv[0]))[:3]
    for link, (ns, n) in worst:
        out.append(f"contended link: {link_name(cl, link)} limited {n} communication(s) that "
                   f"took {ns / 1e6:.3f} ms longer than alone" + _fault_mark(cl, link))
    return out


def uneven_fabric(cl: Cluster) -> str:
    """Why copies of a rank may not be equivalent: fabric sub-trees holding different numbers
    of nodes (e.g. a last, partially filled leaf); empty if every level is evenly filled."""
    topo = cl.topo
    if topo.fabric is None or not cl.nics:
        return ""
    leaves = [cl.leaf_of(n, 0) for n in range(topo.num_nodes)]
    assert cl.tree is not None
    spans = cl.tree.spans
    for level in range(1, len(spans)):
        counts = Counter(leaf // spans[level] for leaf in leaves)
        if len(set(counts.values())) > 1:
            name = topo.fabric.levels[level - 1].name
            sizes = sorted(set(counts.values()), reverse=True)
            return f"{name} sub-trees hold {' or '.join(map(str, sizes))} nodes"
    return ""


def link_name(cl: Cluster, link: int) -> str:
    """A link as ``u -> v`` with readable device names (e.g. ``nic 37.2 -> leaf 14``)."""
    def dev(x: tuple) -> str:
        kind = x[0]
        if kind in ("gpu", "nic", "pcie", "cpu"):
            return f"{kind} {x[1]}.{x[2]}"
        if kind == "nvswitch":
            return f"nvswitch {x[1]}"
        if kind == "sw":
            name = cl.topo.fabric.levels[x[1] - 1].name
            return f"{name} {x[2]}.{x[3]}" if x[1] > 1 else f"{name} {x[2]}"
        return f"{kind} {'.'.join(map(str, x[1:]))}"
    u, v = cl.names[link]
    return f"{dev(u)} -> {dev(v)}"


def _fault_mark(cl: Cluster, link: int) -> str:
    u, v = cl.names[link]
    if cl.degradation(u, v) != 1.0:
        return " (a degraded link)"
    subs = cl.failed_nic_substitutes
    for x in (u, v):
        if x[0] == "nic" and any(sub == x[2] and node == x[1]
                                 for (node, _), sub in subs.items()):
            return " (it carries a failed NIC's traffic)"
    return ""

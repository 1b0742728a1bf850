"""Read and validate topology YAML files (schema: docs/topology.md).

Every problem is an :class:`~sim.errors.InputError` naming the file, the line and the dotted key
(e.g. ``topologies/x.yaml:12: node.nics.bandwidth_gbps: must be > 0, got 0``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sim.errors import InputError
from sim.files.catalog import resolve
from sim.files.inputs import read_text, show
from sim.files.yaml_load import load_yaml_with_lines
from sim.topology.consistency import physical_warnings
from sim.topology.fault_section import read_faults
from sim.topology.gpu import GpuSpec
from sim.topology.nproc import with_nproc_per_node
from sim.topology.overrides import Override, apply_overrides, parse_override
from sim.topology.sections import Reader, Section
from sim.topology.spec import (
    ALGORITHMS,
    PROTOCOLS,
    ROUTINGS_FOR,
    CollectiveSpec,
    FabricLevel,
    FabricSpec,
    NicSpec,
    NodeSpec,
    NvlinkSpec,
    PcieSpec,
    Topology,
)

if TYPE_CHECKING:  # the xGMI mesh's code loads with a topology that has one
    from sim.topology.mesh import XgmiSpec

_OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")
_LEVEL_NAMES = ("leaf", "spine", "core")
# Upper bounds that keep loading and network building finite (far above any real machine).
MAX_NODES = 1_000_000
MAX_PER_NODE = 1024  # GPUs, PCIe switches, sockets, NICs, NVLinks per node
MAX_RADIX = 65536
MAX_QPS = 128  # NCCL_IB_QPS_PER_CONNECTION (NCCL v2.30.7 allows up to NCCL_IB_MAX_QPS = 128,
# src/transport/net_ib/common.h:172)
def _blocks(n: int, parts: int) -> tuple[int, ...]:
    """Item i → block i·parts // n (contiguous, balanced)."""
    return tuple(i * parts // n for i in range(n))


def _uneven(count: int, what: str, gpus: int, key: str) -> str:
    """The refusal of a default (equal contiguous blocks) that ``count`` does not divide."""
    return (f"{count} {what} for {gpus} GPUs (node.gpus): the default gives each the same "
            f"number of consecutive GPUs, which needs {count} to divide {gpus}; list which GPUs "
            f"share one in {key}")


def _gpu(s: Section) -> GpuSpec:
    name = s.str("name")
    pk = s.sub("peak_tflops")
    assert pk is not None
    peaks = {}
    for k in pk.data:
        if not isinstance(k, str):
            s.r.fail(pk.path + (k,), f"dtype names must be strings, got {show(k)}")
        peaks[k] = pk.rate(k)
    if not peaks:
        s.r.fail(pk.path, "needs at least one dtype (e.g. bf16: 312)")
    pk.done()
    eff = None
    if s.has("compute_efficiency"):  # a GPU the catalogue does not know: its GEMM efficiency
        eff = s.num("compute_efficiency", maximum=1.0)
    spec = GpuSpec(name=name, peak_tflops=peaks, hbm_GB=s.num("hbm_GB"),
                   hbm_GBps=s.rate("hbm_GBps"), compute_efficiency=eff)
    s.done()
    return spec


def _node(s: Section) -> NodeSpec:
    gpus = s.int("gpus", maximum=MAX_PER_NODE)
    gs = s.sub("gpu")
    assert gs is not None
    gpu = _gpu(gs)
    name = s.str("name", default=gpu.name + " node")
    nv = s.sub("nvlink", required=False)
    nvlink = None
    if nv is not None:
        nvlink = NvlinkSpec(links_per_gpu=nv.int("links_per_gpu", maximum=MAX_PER_NODE),
                            link_bandwidth_GBps=nv.rate("link_bandwidth_GBps"),
                            efficiency=nv.eff(), latency_ns=nv.ns("latency_ns"),
                            nvls=nv.bool("nvls", False))
        nv.done()
    xgmi = _xgmi(s, gpus, nvlink is not None)
    ps = s.sub("pcie")
    assert ps is not None
    switches = ps.int("switches", 1, maximum=MAX_PER_NODE)
    sockets = ps.int("sockets", 1, maximum=MAX_PER_NODE)
    if gpus % switches and not ps.has("gpu_switch"):
        ps.r.fail(ps.path + ("switches",), _uneven(switches, "PCIe switches", gpus,
                                                   "node.pcie.gpu_switch"))
    gpu_switch = ps.int_list("gpu_switch", gpus, switches, _blocks(gpus, switches))
    switch_socket = ps.int_list("switch_socket", switches, sockets, _blocks(switches, sockets))
    if sockets > 1:
        cpu_bw = ps.rate("cpu_link_bandwidth_GBps")
    else:
        cpu_bw = ps.rate("cpu_link_bandwidth_GBps", default=1.0)
    pcie = PcieSpec(switches=switches, sockets=sockets, gpu_switch=gpu_switch,
                    switch_socket=switch_socket, bandwidth_GBps=ps.rate("bandwidth_GBps"),
                    efficiency=ps.eff(), latency_ns=ps.ns("latency_ns"),
                    cpu_link_bandwidth_GBps=cpu_bw,
                    cpu_link_efficiency=ps.eff("cpu_link_efficiency"),
                    cpu_link_latency_ns=ps.ns("cpu_link_latency_ns"))
    ps.done()
    ns = s.sub("nics")
    assert ns is not None
    nics = _nics(ns, gpus, switches)
    ns.done()
    s.done()
    return NodeSpec(name=name, gpus=gpus, gpu=gpu, pcie=pcie, nics=nics, nvlink=nvlink,
                    xgmi=xgmi)


MAX_MESH_GPUS = 16  # a switchless full mesh: each GPU has a link to every other (8 on MI300X)


def _xgmi(s: Section, gpus: int, has_nvlink: bool) -> XgmiSpec | None:
    """The optional ``node.xgmi`` section: a full mesh, one link per GPU pair."""
    xs = s.sub("xgmi", required=False)
    if xs is None:
        return None
    if has_nvlink:
        s.r.fail(xs.path, "a node has either an NVSwitch (nvlink) or an xGMI mesh, not both")
    if not 2 <= gpus <= MAX_MESH_GPUS:
        s.r.fail(xs.path, f"an xGMI full mesh joins 2 to {MAX_MESH_GPUS} GPUs, got {gpus}")
    from sim.topology.mesh import XgmiSpec  # only a topology with a mesh loads its code

    links = xs.int("links_per_gpu", maximum=MAX_PER_NODE)
    if links != gpus - 1:
        xs.r.fail(xs.path + ("links_per_gpu",),
                  f"a full mesh of {gpus} GPUs has {gpus - 1} links per GPU (one to each "
                  f"peer), got {links}")
    spec = XgmiSpec(links_per_gpu=links, link_bandwidth_GBps=xs.rate("link_bandwidth_GBps"),
                    efficiency=xs.eff(), latency_ns=xs.ns("latency_ns"))
    xs.done()
    return spec


def _nics(ns: Section, gpus: int, switches: int) -> NicSpec:
    """The ``node.nics`` section: count, bandwidth and which PCIe switch and GPUs each NIC
    serves (default: contiguous balanced blocks)."""
    count = ns.int("count", minimum=0, maximum=MAX_PER_NODE)
    if count > gpus:
        ns.r.fail(ns.path + ("count",), f"more NICs ({count}) than GPUs ({gpus}) is not supported")
    if not count:
        return NicSpec(count=0, bandwidth_gbps=0.0, efficiency=1.0, latency_ns=0, switch=(),
                       gpus=())
    bw = ns.rate("bandwidth_gbps")
    nic_switch = ns.int_list("switch", count, switches, _blocks(count, switches))
    nic_gpus = _nic_gpus(ns, gpus, count)
    return NicSpec(count=count, bandwidth_gbps=bw, efficiency=ns.eff(),
                   latency_ns=ns.ns("latency_ns"), switch=nic_switch, gpus=nic_gpus)


def _nic_gpus(ns: Section, gpus: int, count: int) -> tuple[tuple[int, ...], ...]:
    """``node.nics.gpus``: one list of GPU indices per NIC, every GPU served exactly once."""
    raw = ns.raw("gpus", False, None)
    if raw is None:
        if gpus % count:  # unequal blocks: some GPUs would share a NIC, others not
            ns.r.fail(ns.path + ("count",), _uneven(count, "NICs", gpus, "node.nics.gpus"))
        owner = _blocks(gpus, count)
        return tuple(tuple(i for i in range(gpus) if owner[i] == k) for k in range(count))
    p = ns.path + ("gpus",)
    if not isinstance(raw, list) or len(raw) != count:
        ns.r.fail(p, f"expected one list of GPU indices per NIC ({count} lists)")
    seen: list[int] = []
    out = []
    for lst in raw:
        if not isinstance(lst, list) or not lst:
            ns.r.fail(p, f"each entry must be a non-empty list of GPU indices, got {show(lst)}")
        for g in lst:
            if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < gpus:
                ns.r.fail(p, f"GPU index {show(g)} out of range [0, {gpus})")
        seen.extend(lst)
        out.append(tuple(lst))
    if sorted(seen) != list(range(gpus)):
        ns.r.fail(p, "every GPU must be served by exactly one NIC")
    return tuple(out)


def _fabric(s: Section, nics_per_node: int) -> FabricSpec:
    ftype = s.str("type", default="fat_tree")
    if ftype != "fat_tree":
        s.r.fail(s.path + ("type",),
                 f"unknown fabric type {show(ftype)} (supported: fat_tree)")
    rail = s.bool("rail_optimized", False)
    bw = s.rate("link_bandwidth_gbps")
    eff = s.eff()
    link_lat = s.ns("link_latency_ns")
    sharp = s.bool("sharp", False)
    transport = s.str("transport", default="infiniband")
    if transport not in ROUTINGS_FOR:
        s.r.fail(s.path + ("transport",), f"unknown transport {show(transport)} "
                 f"(known: {', '.join(ROUTINGS_FOR)})")
    routing = s.str("routing", default=ROUTINGS_FOR[transport][0])
    if routing not in ROUTINGS_FOR[transport]:
        s.r.fail(s.path + ("routing",), f"routing {show(routing)} does not exist on a "
                 f"{transport} fabric (known: {', '.join(ROUTINGS_FOR[transport])})")
    qps = s.int("qps_per_connection", 1, maximum=MAX_QPS)
    raw = s.raw("levels")
    if not isinstance(raw, list) or not raw:
        s.r.fail(s.path + ("levels",), "expected a non-empty list of switch levels")
    levels = []
    for i, item in enumerate(raw):
        ls = Section(s.r, item, s.path + ("levels", i))
        top = i == len(raw) - 1
        name = ls.str("name", default=_LEVEL_NAMES[i] if i < 3 else f"level{i + 1}")
        radix = ls.int("radix", minimum=2, maximum=MAX_RADIX)
        if top:
            if ls.has("oversubscription"):
                s.r.fail(ls.path + ("oversubscription",),
                         "the top level has no up-links, so no oversubscription")
            ratio, down, up = 1.0, radix, 0
        else:
            ratio = ls.num("oversubscription", 1.0, maximum=MAX_RADIX)
            down_f = radix * ratio / (ratio + 1.0)
            down = round(down_f)
            up = radix - down
            if up < 1 or down < 1 or abs(down_f - down) > 1e-9:
                s.r.fail(ls.path + ("oversubscription",),
                         f"radix {radix} cannot be split {ratio:g}:1 into whole down/up ports")
        levels.append(FabricLevel(name=name, radix=radix, oversubscription=ratio,
                                  latency_ns=ls.ns("latency_ns"), down=down, up=up))
        ls.done()
    if not rail and nics_per_node and levels[0].down % nics_per_node:
        s.r.fail(s.path + ("levels", 0, "radix"),
                 f"a leaf's {levels[0].down} down-ports must hold whole nodes "
                 f"({nics_per_node} NICs each) unless rail_optimized is true")
    s.done()
    return FabricSpec(type=ftype, rail_optimized=rail, link_bandwidth_gbps=bw, efficiency=eff,
                      link_latency_ns=link_lat, levels=tuple(levels), sharp=sharp,
                      transport=transport, routing=routing, qps_per_connection=qps)


def _collectives(s: Section | None) -> CollectiveSpec:
    if s is None:
        return CollectiveSpec()
    algo = s.raw("algorithm", False, "auto")
    per_op: dict[str, str] = {}
    default = "auto"
    if isinstance(algo, str):
        default = algo
    elif isinstance(algo, dict):
        for k, v in algo.items():
            if str(k).lower() not in _OPS:
                s.r.fail(s.path + ("algorithm", k), f"unknown operation (known: {', '.join(_OPS)})")
            if not isinstance(v, str) or v not in ALGORITHMS:
                s.r.fail(s.path + ("algorithm", k),
                         f"unknown algorithm {show(v)} (known: {', '.join(ALGORITHMS)})")
            per_op[str(k).lower()] = v
    else:
        s.r.fail(s.path + ("algorithm",), "expected an algorithm name or a mapping op → name")
    if default not in ALGORITHMS:
        s.r.fail(s.path + ("algorithm",),
                 f"unknown algorithm {show(default)} (known: {', '.join(ALGORITHMS)})")
    proto = s.str("protocol", default="auto")
    if proto not in PROTOCOLS:
        s.r.fail(s.path + ("protocol",),
                 f"unknown protocol {show(proto)} (known: {', '.join(PROTOCOLS)})")
    launch = s.int("launch_overhead_ns", 5000, minimum=0)
    s.done()
    return CollectiveSpec(algorithm=per_op, default_algorithm=default, protocol=proto,
                          launch_overhead_ns=launch)


def fabric_leaf_counts(fabric: FabricSpec, nodes: int, nics: int) -> tuple[int, int]:
    """(leaf switches the cluster needs, leaf switches the tree above the leaves can join)."""
    n_leaves = fabric.leaf_index(nodes - 1, nics - 1, nodes, nics) + 1
    if len(fabric.levels) == 1:
        # a single switch level: one leaf (per rail when rail-optimised; rails meet only
        # through the nodes' own NVLink/PCIe, as NCCL's PXN does)
        return n_leaves, nics if fabric.rail_optimized else 1
    max_leaves = 1
    for lv in fabric.levels[1:]:
        max_leaves *= lv.down
    return n_leaves, max_leaves


def parse_topology(text: str, path: str, nodes: int | None = None,
                   overrides: Sequence[str] = (), nproc_per_node: int | None = None) -> Topology:
    """Parse topology YAML ``text`` (read from ``path``); ``nodes`` overrides the node count,
    ``overrides`` are ``--set KEY=VALUE`` texts (:mod:`sim.topology.overrides`),
    ``nproc_per_node`` the processes a job runs per node (:mod:`sim.topology.nproc`; ``None``:
    one per GPU)."""
    data, lines = load_yaml_with_lines(text, path)
    if data is None:
        raise InputError("empty topology file (no YAML content)", file=path, line=1)
    done: list[Override] = []
    if overrides and isinstance(data, dict):
        data, done = apply_overrides(data, [parse_override(t) for t in overrides])
    r = Reader(path, lines, tuple(done))
    top = Section(r, data, ())
    stem = os.path.splitext(os.path.basename(path))[0]
    name = top.str("name", default=stem)
    description = top.str("description", default="")
    file_nodes = top.int("nodes", maximum=MAX_NODES)
    if nodes is not None and not 1 <= nodes <= MAX_NODES:
        raise InputError(f"must be in [1, {MAX_NODES}], got {nodes}", field="nodes")
    num_nodes = file_nodes if nodes is None else nodes
    ns = top.sub("node")
    assert ns is not None
    node = _node(ns)
    fs = top.sub("fabric", required=False)
    fabric = None
    if fs is not None:
        fabric = _fabric(fs, node.nics.count)
    coll = _collectives(top.sub("collectives", required=False))
    fsec = top.sub("faults", required=False)
    top.done()
    if num_nodes > 1:
        if node.nics.count == 0:
            r.fail(("node", "nics", "count"), f"{num_nodes} nodes need at least one NIC each")
        if fabric is None:
            r.fail(("fabric",), f"missing required key ({num_nodes} nodes need a fabric)", at=())
    if fabric is not None and node.nics.count:
        n_leaves, max_leaves = fabric_leaf_counts(fabric, num_nodes, node.nics.count)
        if n_leaves > max_leaves:
            per = "per rail " if fabric.rail_optimized else ""
            r.fail(("fabric", "levels"),
                   f"{num_nodes} nodes × {node.nics.count} NICs need {n_leaves} leaf switches "
                   f"({fabric.levels[0].down} NIC ports {per}each) but a "
                   f"{len(fabric.levels)}-level fat tree of these radixes joins at most "
                   f"{max_leaves}" + (" (node count from --nodes)" if nodes is not None else ""))
    topo = Topology(name=name, path=path, description=description, num_nodes=num_nodes,
                    node=node, fabric=fabric, collectives=coll,
                    overrides=tuple(ov.describe() for ov in done),
                    override_keys=tuple(f"{ov.text}={show(ov.value)}" for ov in done),
                    override_paths=tuple(ov.path for ov in done))
    topo = dataclasses.replace(topo, warnings=physical_warnings(topo))
    topo = with_nproc_per_node(topo, nproc_per_node)
    if fsec is not None:
        topo = dataclasses.replace(topo, faults=read_faults(fsec, topo))
    return topo


def load_topology(path: str, nodes: int | None = None, overrides: Sequence[str] = (),
                  nproc_per_node: int | None = None) -> Topology:
    """Read and validate the topology file at ``path`` (or the shipped topology of that name,
    :mod:`sim.files.catalog`); ``nodes`` overrides its node count, ``overrides`` are ``--set
    KEY=VALUE`` what-ifs (:mod:`sim.topology.overrides`), ``nproc_per_node`` the processes per
    node (:mod:`sim.topology.nproc`)."""
    path = resolve("topologies", path, "--topo")
    return parse_topology(read_text(path, what="topology file", flag="--topo"), path, nodes,
                          overrides, nproc_per_node)

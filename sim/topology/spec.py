"""Typed description of a cluster, as read from a topology YAML file (docs/topology.md).

Units are in the field names: bandwidths in GB/s (1e9 bytes/s, ``*_GBps``) or Gb/s (1e9 bits/s,
``*_gbps``, for NIC and cable line rates), latencies in integer nanoseconds (``*_ns``).
Every bandwidth is a *line rate per direction*; ``efficiency`` is the fraction of it that NCCL's
data path achieves (NCCL's own per-link constants, see docs/network.md), so the capacity the
network model uses is ``line rate × efficiency``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sim.assumption import Assumption
from sim.faults import Faults
from sim.topology.gpu import GpuSpec

if TYPE_CHECKING:  # the xGMI mesh's code loads with a topology that has one
    from sim.topology.mesh import XgmiSpec


@dataclass(frozen=True)
class NvlinkSpec:
    """NVLink to an NVSwitch fabric: every GPU reaches every other GPU of its node at full rate."""

    links_per_gpu: int
    link_bandwidth_GBps: float
    efficiency: float
    latency_ns: int
    # the NVSwitches reduce and multicast (NVLink SHARP, NVSwitch gen3 on H100 and newer):
    # NCCL's NVLS all-reduce runs on them
    nvls: bool = False

    @property
    def gpu_bandwidth_GBps(self) -> float:
        """Effective NVLink bandwidth of one GPU per direction (GB/s)."""
        return self.links_per_gpu * self.link_bandwidth_GBps * self.efficiency


@dataclass(frozen=True)
class PcieSpec:
    """The PCIe tree of a node: switches (each under one CPU socket), sockets, their links.

    ``gpu_switch[i]``: PCIe switch of GPU ``i``; ``switch_socket[p]``: socket of switch ``p``.
    ``bandwidth_GBps``: line rate of one x16 link (GPU↔switch, NIC↔switch, switch↔CPU).
    ``cpu_link_*``: the socket-to-socket interconnect (UPI / xGMI), used only with 2+ sockets.
    """

    switches: int
    sockets: int
    gpu_switch: tuple[int, ...]
    switch_socket: tuple[int, ...]
    bandwidth_GBps: float
    efficiency: float
    latency_ns: int
    cpu_link_bandwidth_GBps: float
    cpu_link_efficiency: float
    cpu_link_latency_ns: int


@dataclass(frozen=True)
class NicSpec:
    """The node's compute NICs: count, line rate (Gb/s), PCIe switch and served GPUs of each."""

    count: int
    bandwidth_gbps: float
    efficiency: float
    latency_ns: int
    switch: tuple[int, ...]
    gpus: tuple[tuple[int, ...], ...]

    @property
    def bandwidth_GBps(self) -> float:
        """Effective bandwidth of one NIC per direction in GB/s (1e9 bytes/s)."""
        return self.bandwidth_gbps / 8.0 * self.efficiency

    def nic_of_gpu(self, gpu: int) -> int:
        """The NIC that serves local GPU ``gpu``."""
        for k, gs in enumerate(self.gpus):
            if gpu in gs:
                return k
        raise ValueError(f"GPU {gpu} has no NIC")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpus: int
    gpu: GpuSpec
    pcie: PcieSpec
    nics: NicSpec
    nvlink: NvlinkSpec | None = None
    xgmi: XgmiSpec | None = None  # a switchless full mesh (sim/topology/mesh.py)

    @property
    def intra_kind(self) -> str:
        """``"nvswitch"``, ``"xgmi"`` or ``"pcie"``: what carries GPU-to-GPU traffic inside
        the node."""
        if self.xgmi is not None:
            return "xgmi"
        return "nvswitch" if self.nvlink is not None else "pcie"


@dataclass(frozen=True)
class FabricLevel:
    """One switch level of the fat tree (level 1 = leaf). ``down``/``up``: ports per switch."""

    name: str
    radix: int
    oversubscription: float
    latency_ns: int
    down: int
    up: int


@dataclass(frozen=True)
class FabricSpec:
    """A folded-Clos (fat-tree) network between the nodes' NICs.

    ``rail_optimized``: NIC ``k`` of every node of a leaf group goes to that group's leaf ``k``
    (one leaf per rail); otherwise a leaf takes whole nodes (all their NICs).
    """

    type: str
    rail_optimized: bool
    link_bandwidth_gbps: float
    efficiency: float
    link_latency_ns: int
    levels: tuple[FabricLevel, ...]
    # the switches reduce in the network (SHARP): NCCL's CollNet all-reduce can run on them
    sharp: bool = False
    # link layer: "infiniband" or "roce" (RDMA over Converged Ethernet)
    transport: str = "infiniband"
    # how switches pick among equal-cost up-links (docs/network.md, "Fabric routing"):
    # "dmodk" (OpenSM fat-tree routing), "adaptive" (InfiniBand adaptive routing), "ecmp"
    # (per-flow hashing), "spray" (per-packet spraying, Spectrum-X)
    routing: str = "dmodk"
    # NCCL_IB_QPS_PER_CONNECTION the cluster runs NCCL with (NCCL's default 1): queue pairs
    # per connection, each hashed on its own under ECMP
    qps_per_connection: int = 1

    @property
    def link_bandwidth_GBps(self) -> float:
        """Effective bandwidth of one switch-to-switch link per direction (GB/s)."""
        return self.link_bandwidth_gbps / 8.0 * self.efficiency

    def leaf_index(self, node: int, nic: int, nodes: int, nics: int) -> int:
        """Leaf switch of NIC ``nic`` of ``node`` (cluster of ``nodes`` × ``nics`` NICs).

        Not rail-optimised: NIC ports fill leaves in (node, NIC) order. Rail-optimised: rail
        ``k`` has ``ceil(nodes / leaf down-ports)`` leaves; whole rails are packed into the
        level-2 sub-trees (each joins ``levels[1].down`` leaves) when they fit, so that a rail's
        traffic stays below one set of spines.
        """
        d1 = self.levels[0].down
        if not self.rail_optimized:
            return (node * nics + nic) // d1
        per_rail = -(-nodes // d1)
        if len(self.levels) > 1 and per_rail <= self.levels[1].down:
            d2 = self.levels[1].down
            rails_per_block = d2 // per_rail
            return (nic // rails_per_block) * d2 + (nic % rails_per_block) * per_rail + node // d1
        return nic * per_rail + node // d1

    def port_index(self, node, nic, nodes: int, nics: int):
        """Global index of the leaf port of NIC ``nic`` of ``node`` (numbers or numpy arrays):
        ``leaf × leaf down-ports + port on the leaf``, ports filled in (node, NIC) order as
        :meth:`leaf_index` fills leaves. The destination index D of D-mod-K routing."""
        d1 = self.levels[0].down
        port = node % d1 if self.rail_optimized else (node * nics + nic) % d1
        return self.leaf_index(node, nic, nodes, nics) * d1 + port


# Routings per transport (the first is the default): an InfiniBand subnet manager's fat-tree
# (D-mod-K) tables, Quantum adaptive routing, or hash-based forwarding; Ethernet ECMP hashing or
# Spectrum-X packet spraying.
ROUTINGS_FOR = {"infiniband": ("dmodk", "adaptive", "ecmp"), "roce": ("ecmp", "spray")}


ALGORITHMS = ("auto", "ring", "tree", "hierarchical", "direct", "nvls", "nvlstree", "collnet")
PROTOCOLS = ("auto", "LL", "LL128", "Simple")


@dataclass(frozen=True)
class CollectiveSpec:
    """Collective-library settings: algorithm per operation (``auto`` = NCCL-like choice),
    protocol, and the fixed launch overhead of every collective (ns)."""

    algorithm: dict[str, str] = field(default_factory=dict)  # op name (lower case) → algorithm
    default_algorithm: str = "auto"
    protocol: str = "auto"
    launch_overhead_ns: int = 5000
    # measured / modelled time by message size from the user's nccl-tests (a calibration
    # profile's network_curves: sim.network.curves.TimeCurve), none from a topology file
    time_curves: tuple = ()


@dataclass(frozen=True)
class Topology:
    """A cluster: ``num_nodes`` identical nodes joined by a fabric."""

    name: str
    path: str
    description: str
    num_nodes: int
    node: NodeSpec
    fabric: FabricSpec | None
    collectives: CollectiveSpec = field(default_factory=CollectiveSpec)
    faults: Faults = field(default_factory=Faults)
    overrides: tuple[str, ...] = ()  # "KEY = VALUE (file: OLD)", one per --set
    override_keys: tuple[str, ...] = ()  # "KEY=VALUE" as given, one per --set
    override_paths: tuple[tuple, ...] = ()  # their key paths (str keys, int list indices)
    warnings: tuple[str, ...] = ()  # physically doubtful combinations (sim.topology.consistency)
    # GPUs of each node no process runs on (--nproc-per-node: ``node`` holds the used ones)
    idle_gpus_per_node: int = 0

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.node.gpus

    @property
    def gpu(self) -> GpuSpec:
        return self.node.gpu

    def describe(self) -> list[str]:
        """One-line-per-fact summary for reports (units explicit)."""
        n = self.node
        out = [f"topology: {self.name} ({self.path}): {self.num_nodes} nodes × {n.gpus} "
               f"{n.gpu.name} = {self.num_gpus} GPUs"]
        if self.idle_gpus_per_node:
            g = n.gpus + self.idle_gpus_per_node
            out.append(Assumption(
                f"--nproc-per-node {n.gpus}: {n.gpus} of each node's {g} GPUs used, "
                f"{self.idle_gpus_per_node} idle (GPUs {n.gpus}..{g - 1}); rank r runs on node "
                f"r // {n.gpus}, GPU r mod {n.gpus} (physical GPU (r // {n.gpus})·{g} + "
                f"r mod {n.gpus}), as torchrun places its local ranks", "nproc-per-node",
                departs=True))
        if n.xgmi is not None:
            x = n.xgmi
            out.append(f"intra-node: xGMI full mesh, one link per GPU pair ({x.links_per_gpu} "
                       f"per GPU) × {x.link_bandwidth_GBps:g} GB/s × efficiency "
                       f"{x.efficiency:g} = {x.link_GBps:g} GB/s per link and direction")
        elif n.nvlink is not None:
            out.append(f"intra-node: NVSwitch, {n.nvlink.links_per_gpu} NVLinks × "
                       f"{n.nvlink.link_bandwidth_GBps:g} GB/s × efficiency "
                       f"{n.nvlink.efficiency:g} = {n.nvlink.gpu_bandwidth_GBps:g} GB/s per GPU "
                       "per direction")
        else:
            p = n.pcie
            cpu = (f", socket link {p.cpu_link_bandwidth_GBps:g} GB/s × "
                   f"{p.cpu_link_efficiency:g}" if p.sockets > 1 else "")
            out.append(f"intra-node: PCIe tree, {p.switches} switch(es) on {p.sockets} "
                       f"socket(s), x16 links {p.bandwidth_GBps:g} GB/s × {p.efficiency:g}{cpu}")
        if n.nics.count:
            out.append(f"NICs: {n.nics.count} per node × {n.nics.bandwidth_gbps:g} Gb/s × "
                       f"efficiency {n.nics.efficiency:g} = {n.nics.bandwidth_GBps:g} GB/s each")
        if self.fabric is not None:
            f = self.fabric
            lv = ", ".join(f"{x.name} radix {x.radix} ({x.down} down / {x.up} up"
                           + (f", {x.oversubscription:g}:1" if x.up else "") + ")"
                           for x in f.levels)
            out.append(f"fabric: {len(f.levels)}-level {f.transport} fat tree"
                       f"{', rail-optimised' if f.rail_optimized else ''}, links "
                       f"{f.link_bandwidth_gbps:g} Gb/s × {f.efficiency:g}; {lv}")
        out += [Assumption(f"topology override (--set): {o}", "topology-override", departs=True)
                for o in self.overrides]
        out += [Assumption(f"WARNING: {w}", "topology-warning", departs=True)
                for w in self.warnings]
        return out

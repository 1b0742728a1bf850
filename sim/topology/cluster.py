"""The cluster as a set of directed links, with routing (ECMP or adaptive) between GPUs.

This is the structural, fast form of the cluster graph of :mod:`sim.topology.graph` (which
builds the same nodes and links with networkx for inspection and for the tests that check these
routes against networkx's shortest paths). Links are created lazily, only when a route uses
them, so a 1024-GPU cluster costs nothing until traffic flows.

Node names (tuples): ``("gpu", n, i)``, ``("nvswitch", n)``, ``("pcie", n, p)``,
``("cpu", n, s)``, ``("nic", n, k)`` inside node ``n``; ``("sw", level, block, j)`` for fabric
switches (level 1 = leaf; ``block`` = index of the level's sub-tree; ``j`` = switch in it).
A link is the pair ``(u, v)``. Routing between leaves (docs/network.md, "Fabric routing"):
``dmodk`` (an InfiniBand subnet manager's fat-tree tables: the path is fixed by the
destination's port index, D mod K), ``ecmp`` (per-flow hashing: CRC-32 of the flow's key),
``adaptive`` (InfiniBand adaptive routing) and ``spray`` (Ethernet per-packet spraying,
Spectrum-X): with the last two the parallel up-links of a sub-tree are one *trunk* link
``("up", level, block)`` / ``("down", level, block)`` whose capacity is their sum, load spread
evenly over them. The default is the topology's ``fabric.routing``.

Capacities are effective bandwidths in GB/s (= bytes per ns): line rate × efficiency.
Latencies are ns: each link carries the latency of the device it leaves (switch, NIC, PCIe
switch) plus cable latency for fabric links.
"""

from __future__ import annotations

import zlib

from sim.topology.fattree import FatTree
from sim.topology.spec import Topology

ROUTINGS = ("dmodk", "adaptive", "ecmp", "spray")
# routings that spread a flow over every parallel up-link (trunk links)
SPREADING = ("adaptive", "spray")
# routes up to which :meth:`Cluster.count_fabric_links` routes one by one (no numpy)
BULK_ROUTES = 128


def default_routing(topo: Topology) -> str:
    """The routing a topology's fabric runs (``fabric.routing``; no fabric: ``dmodk``, moot)."""
    return topo.fabric.routing if topo.fabric is not None else "dmodk"


class Cluster:
    """Routes between GPUs of a :class:`Topology` and the registry of the links they use."""

    def __init__(self, topo: Topology, routing: str | None = None):
        routing = routing or default_routing(topo)
        if routing not in ROUTINGS:
            raise ValueError(routing)
        self.topo = topo
        self.routing = routing
        self.spreading = routing in SPREADING
        self.gpn = topo.gpus_per_node
        node = topo.node
        self.nics = node.nics.count
        self._gpu_nic = tuple(node.nics.nic_of_gpu(i) for i in range(self.gpn)) if self.nics \
            else ()
        self.ids: dict[tuple, int] = {}
        self.names: list[tuple] = []
        self.cap: list[float] = []
        self.lat: list[int] = []
        self.kind: list[str] = []
        self._intra: dict[tuple, tuple] = {}  # template segments (local names) and their ids
        self._tmpl: dict[tuple, int] = {}  # template link → number (< 4096)
        self._paths: dict[tuple, tuple[int, ...]] = {}
        self._leaves: dict[tuple[int, int], int] = {}
        self._faults(topo)
        self.tree: FatTree | None = None
        if topo.fabric is not None and self.nics:
            self.tree = FatTree(topo.fabric)
            self._span = self.tree.spans  # level-l block of a leaf = leaf // _span[l]

    # ---- read access for vectorised routing (sim/network/alltoall.py) ----------------------
    @property
    def gpu_nics(self) -> tuple[int, ...]:
        """NIC (index within the node) of each local GPU."""
        return self._gpu_nic

    def local_links(self, node: int, a: tuple, b: tuple) -> list[tuple[tuple, tuple]]:
        """Link names of the route inside ``node`` from local endpoint ``a`` to ``b``
        (``("gpu", i)`` or ``("nic", k)``)."""
        return self._local_names(node, self._segment(a, b))

    # ---- faults (sim/faults.py) ----------------------------------------------------------
    def _faults(self, topo: Topology) -> None:
        """Degraded links scale their capacity; a failed NIC's traffic uses a substitute NIC of
        its node (same PCIe switch first, else the next working one)."""
        f = topo.faults
        self.perturbed = f.network
        self._degraded = dict(f.degraded)
        self._nic_sub: dict[tuple[int, int], int] = {}
        nics = topo.node.nics
        for n, k in sorted(f.failed_nics):
            ok = [j for j in range(nics.count)  # a NIC of idle GPUs only: none to proxy through
                  if (n, j) not in f.failed_nics and nics.gpus[j]]
            same = [j for j in ok if nics.switch[j] == nics.switch[k]]
            after = [j for j in ok if j > k] + [j for j in ok if j < k]
            self._nic_sub[(n, k)] = (same or after)[0]

    def working_nic(self, node: int, nic: int) -> int:
        """The NIC that carries traffic meant for NIC ``nic`` of ``node``."""
        return self._nic_sub.get((node, nic), nic) if self._nic_sub else nic

    def nic_pair(self, na: int, nb: int, nic: int) -> tuple[int, int]:
        """(source NIC, destination NIC) for rail ``nic`` between nodes ``na`` and ``nb``.

        A failed NIC's substitute may sit on a rail whose leaves never meet the other node's
        rail (a rail-only fabric): the transfer then stays on one rail end to end, arriving at
        (or leaving from) the other node's NIC on that rail, as NCCL does with PXN."""
        ka, kb = self.working_nic(na, nic), self.working_nic(nb, nic)
        if ka != kb and self.tree is not None and not self.tree.joined(
                self.leaf_of(na, ka), self.leaf_of(nb, kb)):
            if (nb, ka) not in self._nic_sub:
                kb = ka
            elif (na, kb) not in self._nic_sub:
                ka = kb
        return ka, kb

    def _degradation(self, u: tuple, v: tuple) -> float:
        d = self._degraded
        for x in (u, v):
            if x[0] == "nic" and ("nic", x[1], x[2]) in d:
                return d[("nic", x[1], x[2])]
        if {u[0], v[0]} == {"gpu", "nvswitch"}:
            g = u if u[0] == "gpu" else v
            key = ("nvlink", g[1] * self.gpn + g[2])
            if key in d:
                return d[key]
        if u[0] == "sw" and v[0] == "sw":
            lower = u if u[1] < v[1] else v
            return d.get(("uplinks", lower[1], lower[2]), 1.0)
        if u[0] in ("up", "down"):
            return d.get(("uplinks", u[1], u[2]), 1.0)
        return 1.0

    # ---- link registry -------------------------------------------------------------------
    def link(self, u: tuple, v: tuple) -> int:
        """Integer id of the directed link ``u → v`` (created on first use)."""
        key = (u, v)
        i = self.ids.get(key)
        if i is None:
            cap, lat, kind = self._link_props(u, v)
            if self._degraded:
                cap *= self._degradation(u, v)
            i = len(self.names)
            self.ids[key] = i
            self.names.append(key)
            self.cap.append(cap)
            self.lat.append(lat)
            self.kind.append(kind)
        return i

    def _link_props(self, u: tuple, v: tuple) -> tuple[float, int, str]:
        node = self.topo.node
        tu, tv = u[0], v[0]
        if tu == "gpu" and tv == "gpu":  # a link of the node's xGMI mesh (its own per pair)
            x = node.xgmi
            assert x is not None
            return x.link_GBps, x.latency_ns, "nvlink"
        if "nvswitch" in (tu, tv):
            nv = node.nvlink
            assert nv is not None
            return nv.gpu_bandwidth_GBps, (nv.latency_ns if tu == "nvswitch" else 0), "nvlink"
        p = node.pcie
        if tu == "cpu" and tv == "cpu":
            return p.cpu_link_bandwidth_GBps * p.cpu_link_efficiency, p.cpu_link_latency_ns, "cpu"
        nic_lat = node.nics.latency_ns
        if tu in ("pcie", "cpu") or tv in ("pcie", "cpu"):
            lat = p.latency_ns if tu in ("pcie", "cpu") else (nic_lat if tu == "nic" else 0)
            return p.bandwidth_GBps * p.efficiency, lat, "pcie"
        f = self.topo.fabric
        assert f is not None
        if tu == "nic" or tv == "nic":  # NIC ↔ leaf: the NIC's own rate (≤ the port's)
            bw = min(node.nics.bandwidth_GBps, f.link_bandwidth_GBps)
            lat = f.link_latency_ns + (nic_lat if tu == "nic" else f.levels[0].latency_ns)
            return bw, lat, "nic"
        if tu in ("up", "down"):  # adaptive-routing trunk: all parallel links of a sub-tree
            assert self.tree is not None
            level = u[1]
            n = self.tree.paths_below(level + 1)
            src_level = level if tu == "up" else level + 1
            return n * f.link_bandwidth_GBps, f.link_latency_ns + \
                f.levels[src_level - 1].latency_ns, "fabric"
        return f.link_bandwidth_GBps, f.link_latency_ns + f.levels[u[1] - 1].latency_ns, "fabric"

    # ---- geometry ------------------------------------------------------------------------
    def nic_of(self, gpu: int) -> int:
        """The NIC (index within its node) serving global GPU ``gpu``."""
        return self._gpu_nic[gpu % self.gpn]

    def leaf_of(self, node: int, nic: int) -> int:
        key = (node, nic)
        leaf = self._leaves.get(key)
        if leaf is None:
            f = self.topo.fabric
            assert f is not None
            leaf = self._leaves[key] = f.leaf_index(node, nic, self.topo.num_nodes, self.nics)
        return leaf

    def fabric_level(self, leaf_a: int, leaf_b: int) -> int:
        """Lowest switch level whose sub-tree holds both leaves (1 = same leaf)."""
        assert self.tree is not None
        return self.tree.level(leaf_a, leaf_b)

    def equal_cost_paths(self, leaf_a: int, leaf_b: int) -> int:
        """Number of equal-cost (shortest) paths between two leaves."""
        assert self.tree is not None
        return self.tree.equal_cost_paths(leaf_a, leaf_b)

    # ---- intra-node segments (local names; identical in every node) -----------------------
    def _pcie_path(self, a: tuple, sa: int, b: tuple, sb: int) -> tuple[tuple, ...]:
        p = self.topo.node.pcie
        if sa == sb:
            return (a, ("pcie", sa), b)
        ca, cb = p.switch_socket[sa], p.switch_socket[sb]
        mid = (("cpu", ca),) if ca == cb else (("cpu", ca), ("cpu", cb))
        return (a, ("pcie", sa)) + mid + (("pcie", sb), b)

    def _segment(self, a: tuple, b: tuple) -> tuple[tuple, ...]:
        """Node sequence from local endpoint ``a`` to ``b`` (("gpu", i) or ("nic", k))."""
        key = (a, b)
        seg = self._intra.get(key)
        if seg is not None:
            return seg
        node = self.topo.node
        p = node.pcie
        sw = {"gpu": lambda i: p.gpu_switch[i], "nic": lambda k: node.nics.switch[k]}
        if a[0] == "gpu" and b[0] == "gpu":
            if node.xgmi is not None:  # full mesh: the pair's own link
                seg = (a, b)
            elif node.nvlink is not None:
                seg = (a, ("nvswitch",), b)
            else:
                seg = self._pcie_path(a, sw["gpu"](a[1]), b, sw["gpu"](b[1]))
        else:
            gpu, nic = (a, b) if a[0] == "gpu" else (b, a)
            k = nic[1]
            sg, sn = p.gpu_switch[gpu[1]], node.nics.switch[k]
            if sg == sn or node.nvlink is None:
                seg = self._pcie_path(gpu, sg, nic, sn)
            else:  # PXN: over NVLink to the GPU next to the NIC, then PCIe
                proxy = ("gpu", node.nics.gpus[k][0])
                seg = (gpu, ("nvswitch",), proxy) + self._pcie_path(
                    proxy, p.gpu_switch[proxy[1]], nic, sn)[1:]
            if a[0] == "nic":
                seg = tuple(reversed(seg))
        self._intra[key] = seg
        return seg

    @staticmethod
    def _local_names(n: int, seg: tuple[tuple, ...]) -> list[tuple[tuple, tuple]]:
        names = [(x[0], n) + x[1:] for x in seg]
        return [(names[i], names[i + 1]) for i in range(len(names) - 1)]

    def _fabric_names(self, leaf_a: int, leaf_b: int, src: int, dst: int, channel: int,
                      dest_port: tuple[int, int]) -> list[tuple[tuple, tuple]]:
        """Switch links leaf_a → leaf_b of the transfer ``src → dst`` on ``channel`` arriving
        at NIC ``dest_port`` = (node, NIC)."""
        if leaf_a == leaf_b:
            return []
        assert self.tree is not None
        return self.tree.link_names(leaf_a, leaf_b, self._route_value(src, dst, channel,
                                                                      dest_port))

    def _route_value(self, src: int, dst: int, channel: int, dest_port: tuple[int, int]
                     ) -> int | None:
        """What picks the equal-cost path (its value mod the number of paths): ECMP the
        CRC-32 of ``"src>dst#channel"``, D-mod-K the destination NIC's port index; None for a
        spreading routing."""
        if self.spreading:
            return None
        if self.routing == "ecmp":
            return zlib.crc32(f"{src}>{dst}#{channel}".encode())
        f = self.topo.fabric
        assert f is not None
        return f.port_index(dest_port[0], dest_port[1], self.topo.num_nodes, self.nics)

    # ---- routes --------------------------------------------------------------------------
    def path(self, src: int, dst: int, rail: int = -1, channel: int = 0) -> tuple[int, ...]:
        """Link ids from GPU ``src`` to GPU ``dst`` (global indices).

        Inside a node: NVSwitch, else the PCIe tree. Between nodes: from ``src`` (over NVLink
        to the NIC's GPU if needed, as NCCL's PXN does) to NIC ``rail`` of its node, across the
        fabric to NIC ``rail`` of the destination node, then to ``dst``. ``rail = -1`` uses the
        destination GPU's NIC. ECMP picks among equal-cost fabric paths by CRC-32 of
        ``"src>dst#channel"`` (deterministic; independent of PYTHONHASHSEED), D-mod-K by the
        destination NIC's port index.
        """
        key = (src, dst, rail, channel)
        p = self._paths.get(key)
        if p is not None:
            return p
        p = tuple(self.link(u, v) for u, v in self.path_names(src, dst, rail, channel))
        self._paths[key] = p
        return p

    def path_names(self, src: int, dst: int, rail: int = -1, channel: int = 0
                   ) -> list[tuple[tuple, tuple]]:
        """The route of :meth:`path` as link names ``(u, v)``, without registering links or
        caching (cheap for the many routes only checked against known links)."""
        na, nb = divmod(src, self.gpn), divmod(dst, self.gpn)
        if na[0] == nb[0]:
            return self._local_names(na[0], self._segment(("gpu", na[1]), ("gpu", nb[1])))
        k = self.nic_of(dst) if rail < 0 else rail
        ka, kb = self.nic_pair(na[0], nb[0], k)
        la, lb = self.leaf_of(na[0], ka), self.leaf_of(nb[0], kb)
        out = self._local_names(na[0], self._segment(("gpu", na[1]), ("nic", ka)))
        out.append((("nic", na[0], ka), ("sw", 1, la, 0)))
        out.extend(self._fabric_names(la, lb, src, dst, channel, (nb[0], kb)))
        out.append((("sw", 1, lb, 0), ("nic", nb[0], kb)))
        out.extend(self._local_names(nb[0], self._segment(("nic", kb), ("gpu", nb[1]))))
        return out

    def fabric_names(self, src: int, dst: int, rail: int = -1, channel: int = 0
                     ) -> list[tuple[tuple, tuple]]:
        """Only the switch-to-switch links of :meth:`path_names` (none inside a leaf)."""
        na, nb = src // self.gpn, dst // self.gpn
        if na == nb:
            return []
        k = self.nic_of(dst) if rail < 0 else rail
        ka, kb = self.nic_pair(na, nb, k)
        la, lb = self.leaf_of(na, ka), self.leaf_of(nb, kb)
        return self._fabric_names(la, lb, src, dst, channel, (nb, kb))

    def count_fabric_links(self, src, dst, channel: int, wanted: dict[tuple, int]
                           ) -> dict[int, int] | None:
        """For many point-to-point routes at once (sequences of GPUs, destination NIC's rail):
        how many use each of the ``wanted`` fabric links (name → id). The same routes as
        :meth:`fabric_names`: route by route up to :data:`BULK_ROUTES` routes, vectorised with
        numpy above; ``None`` where that is not done (failed NICs)."""
        f = self.topo.fabric
        if f is None or self._nic_sub or not self.nics or not len(src):
            return None if self._nic_sub else {}
        assert self.tree is not None
        if len(src) <= BULK_ROUTES:
            seen: dict[tuple, int] = {}
            for s, d in zip(src, dst, strict=True):
                for name in self.fabric_names(int(s), int(d), -1, channel):
                    seen[name] = seen.get(name, 0) + 1
            # the links the bulk count reports: trunks of a spreading routing, else switches
            return {i: seen.get(n, 0) for n, i in wanted.items() if (n[0][0] in ("up", "down")
                    if self.spreading else n[0][0] == n[1][0] == "sw")}
        import numpy as np

        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        gpn, nn = self.gpn, self.topo.num_nodes
        k = np.asarray(self._gpu_nic)[dst % gpn]
        la = f.leaf_index(src // gpn, k, nn, self.nics)
        lb = f.leaf_index(dst // gpn, k, nn, self.nics)
        values = None
        if self.routing == "ecmp":
            values = np.fromiter((zlib.crc32(f"{s}>{d}#{channel}".encode()) for s, d in
                                  zip(src.tolist(), dst.tolist(), strict=True)),
                                 dtype=np.int64, count=len(src))
        elif not self.spreading:
            values = f.port_index(dst // gpn, k, nn, self.nics)
        return self.tree.count_links(la, lb, values, wanted)

    def _seg_ids(self, a: tuple, b: tuple) -> tuple[int, ...]:
        """Template link numbers of the segment ``a → b`` (cached)."""
        key = ("ids", a, b)
        got = self._intra.get(key)
        if got is None:
            seg = self._segment(a, b)
            got = tuple(self._tmpl.setdefault((seg[i], seg[i + 1]), len(self._tmpl))
                        for i in range(len(seg) - 1))
            self._intra[key] = got
        return got  # type: ignore[return-value]

    def local_keys(self, src: int, dst: int, rail: int = -1) -> list[int]:
        """The intra-node links of the route ``src → dst`` as integer keys (node × 4096 +
        template link), without touching the fabric (cheap; for fusability checks)."""
        na, ia = divmod(src, self.gpn)
        nb, ib = divmod(dst, self.gpn)
        if na == nb:
            base = na << 12
            return [base + t for t in self._seg_ids(("gpu", ia), ("gpu", ib))]
        k = self._gpu_nic[ib] if rail < 0 else rail
        ka, kb = self.nic_pair(na, nb, k)
        ba, bb = na << 12, nb << 12
        return ([ba + t for t in self._seg_ids(("gpu", ia), ("nic", ka))]
                + [bb + t for t in self._seg_ids(("nic", kb), ("gpu", ib))])

    def path_latency_ns(self, links: tuple[int, ...]) -> int:
        return sum(self.lat[i] for i in links)

    # ---- read API for the network models (describe, symmetry) -----------------------------
    @property
    def failed_nic_substitutes(self) -> dict[tuple[int, int], int]:
        """(node, failed NIC) → the NIC of that node that carries its traffic."""
        return dict(self._nic_sub)

    def degradation(self, u: tuple, v: tuple) -> float:
        """Capacity factor of the link ``u → v`` from the topology's faults (1.0: intact)."""
        return self._degradation(u, v) if self._degraded else 1.0

    def segment(self, a: tuple, b: tuple) -> tuple[tuple, ...]:
        """Device sequence inside a node from ``a`` to ``b`` (("gpu", i) or ("nic", k))."""
        return self._segment(a, b)

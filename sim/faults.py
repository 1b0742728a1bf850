"""Non-uniform clusters: slow GPUs, degraded links, failed NICs.

Faults come from the command line (``--slow-gpu``, ``--slow-node``, ``--degrade-link``,
``--fail-nic``; parsed by :func:`parse_slow`, :func:`parse_link`, :func:`parse_nic`) and from a
topology file's ``faults`` section (docs/topology.md); both are merged (:func:`faults_with`).
GPUs are global indices (``node·gpus_per_node + i``; rank r runs on GPU r; with
``--nproc-per-node K`` they count the GPUs the job uses, ``node·K + i``, sim/topology/nproc.py);
NICs are ``NODE.K``.
Link specs for ``--degrade-link SPEC:FACTOR`` (FACTOR in [1e-6, 1] multiplies the bandwidth, both
directions):

- ``nic:NODE.K`` — NIC K of node NODE (its PCIe and fabric links);
- ``nvlink:GPU`` — the NVLink port of GPU (to and from the NVSwitch);
- ``uplinks:LEVEL.BLOCK`` — every up- and down-link between sub-tree BLOCK of fabric level
  LEVEL (1 = leaf switch BLOCK) and the level above.

A failed NIC's traffic moves to another NIC of the node (one on the same PCIe switch if there
is one, else the next working NIC), as NCCL does when a NIC is down: those flows reroute and
share the substitute NIC; nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.errors import InputError, UsageError
from sim.limits import MIN_LINK_FACTOR, SCALE_RANGE, parse_float
from sim.parallel.rank_classes import RankClasses

LINK_KINDS = ("nic", "nvlink", "uplinks")


@dataclass(frozen=True)
class Faults:
    """What is slow, degraded or broken (all empty = a uniform cluster)."""

    slow_gpus: dict[int, float] = field(default_factory=dict)  # GPU → compute-time factor
    failed_nics: frozenset[tuple[int, int]] = frozenset()  # (node, NIC)
    degraded: dict[tuple, float] = field(default_factory=dict)  # ("nic", node, k) … → factor

    @property
    def empty(self) -> bool:
        return not (self.slow_gpus or self.failed_nics or self.degraded)

    @property
    def network(self) -> bool:
        """True if links or NICs are affected (the network model must know)."""
        return bool(self.failed_nics or self.degraded)

    def merged(self, other: Faults) -> Faults:
        """``other`` added to ``self``; ``other`` wins where both name the same part."""
        return Faults({**self.slow_gpus, **other.slow_gpus}, self.failed_nics | other.failed_nics,
                      {**self.degraded, **other.degraded})

    def describe(self) -> list[str]:
        out = [f"slow GPU {g}: compute × {f:g}" for g, f in sorted(self.slow_gpus.items())]
        out += [f"failed NIC {n}.{k}: its traffic moves to another NIC of node {n}"
                for n, k in sorted(self.failed_nics)]
        out += [f"degraded link {spec_text(s)}: bandwidth × {f:g}"
                for s, f in sorted(self.degraded.items())]
        return out

    def report(self, iteration_ns: int, healthy_ns: int) -> dict:
        """The report keys of a run with these faults, given the same run without them."""
        return {"faults": self.describe(), "healthy_iteration_time_s": healthy_ns * 1e-9,
                "fault_slowdown_s": (iteration_ns - healthy_ns) * 1e-9}

    def check(self, topo, where: str = "") -> None:
        """Raise :class:`InputError` if a fault names hardware the topology lacks."""
        n_gpu, nodes, nics = topo.num_gpus, topo.num_nodes, topo.node.nics.count

        def bad(msg: str, fld: str) -> None:
            raise InputError(msg, file=where or None, field=fld)

        for g in self.slow_gpus:
            if not 0 <= g < n_gpu:
                bad(f"GPU {g} is not in the cluster (GPUs 0..{n_gpu - 1})", "--slow-gpu")
        for n, k in self.failed_nics:
            if not (0 <= n < nodes and 0 <= k < nics):
                bad(f"NIC {n}.{k} is not in the cluster ({nodes} nodes × {nics} NICs)",
                    "--fail-nic")
        served = [k for k in range(nics) if topo.node.nics.gpus[k]]  # idle GPUs' NICs: not
        for n in range(nodes):
            if served and all((n, k) in self.failed_nics for k in served):
                bad(f"every NIC of node {n} failed: the node is cut off", "--fail-nic")
        levels = len(topo.fabric.levels) if topo.fabric is not None else 0
        for spec in self.degraded:
            kind = spec[0]
            if kind == "nic" and not (0 <= spec[1] < nodes and 0 <= spec[2] < nics):
                bad(f"NIC {spec[1]}.{spec[2]} is not in the cluster", "--degrade-link")
            if kind == "nvlink" and (topo.node.nvlink is None or not 0 <= spec[1] < n_gpu):
                bad(f"GPU {spec[1]} has no NVLink port in this cluster", "--degrade-link")
            if kind == "uplinks" and not 1 <= spec[1] < levels:
                bad(f"fabric level {spec[1]} has no up-links (levels 1..{levels - 1} do)",
                    "--degrade-link")


def spec_text(spec: tuple) -> str:
    if spec[0] == "nvlink":
        return f"nvlink:{spec[1]}"
    return f"{spec[0]}:{spec[1]}.{spec[2]}"


def _num(text: str, what: str, flag: str, lo: float, hi: float) -> float:
    """``text`` as a number in [lo, hi] (ASCII digits, finite: :func:`sim.limits.parse_float`)."""
    v = parse_float(text)
    if v is None:
        raise UsageError(f"{what} must be a number, got {text!r}", field=flag)
    if not lo <= v <= hi:
        raise UsageError(f"{what} must be in [{lo:g}, {hi:g}], got {text}", field=flag)
    return v


def _int(text: str, what: str, flag: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise UsageError(f"{what} must be an integer, got {text!r}", field=flag) from None
    if v < 0:
        raise UsageError(f"{what} must be ≥ 0, got {v}", field=flag)
    return v


def _pair(text: str, what: str, flag: str) -> tuple[int, int]:
    a, sep, b = text.partition(".")
    if not sep:
        raise UsageError(f"{what} must look like A.B, got {text!r}", field=flag)
    return _int(a, what, flag), _int(b, what, flag)


def parse_slow(text: str, flag: str = "--slow-gpu") -> tuple[int, float]:
    """``"17:1.5"`` → (17, 1.5): index and compute-time factor in [0.001, 1000]
    (:data:`sim.limits.SCALE_RANGE`)."""
    idx, sep, fac = text.partition(":")
    if not sep:
        raise UsageError(f"expected INDEX:FACTOR such as 17:1.5, got {text!r}", field=flag)
    return _int(idx, "index", flag), _num(fac, "factor", flag, *SCALE_RANGE)


def parse_nic(text: str, flag: str = "--fail-nic") -> tuple[int, int]:
    """``"3.2"`` → (node 3, NIC 2)."""
    return _pair(text, "NIC", flag)


def parse_link(text: str, flag: str = "--degrade-link") -> tuple[tuple, float]:
    """``"nic:3.2:0.5"`` → (("nic", 3, 2), 0.5); see the module docstring."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in LINK_KINDS:
        raise UsageError(f"expected KIND:WHERE:FACTOR with KIND one of {', '.join(LINK_KINDS)} "
                         f"(e.g. nic:3.2:0.5), got {text!r}", field=flag)
    kind, where, fac = parts
    factor = _num(fac, "bandwidth factor", flag, MIN_LINK_FACTOR, 1.0)
    if kind == "nvlink":
        return ("nvlink", _int(where, "GPU", flag)), factor
    a, b = _pair(where, "NODE.K" if kind == "nic" else "LEVEL.BLOCK", flag)
    return (kind, a, b), factor


def faults_with(topo, slow_gpus=(), slow_nodes=(), degraded_links=(), failed_nics=()
                ) -> Faults:
    """The topology file's faults plus the given ones (``slow_gpus`` / ``slow_nodes`` as
    ``(index, factor)``, ``degraded_links`` as ``(spec, factor)``, ``failed_nics`` as
    ``(node, NIC)``: see :func:`parse_slow`, :func:`parse_link`, :func:`parse_nic`), checked
    against the topology ``topo``."""
    slow = dict(slow_gpus)
    for n, f in slow_nodes:
        if n >= topo.num_nodes:
            raise UsageError(f"node {n} is not in the cluster (nodes 0..{topo.num_nodes - 1})",
                             field="slow_node")
        for i in range(topo.gpus_per_node):
            slow[n * topo.gpus_per_node + i] = f
    faults = topo.faults.merged(Faults(slow, frozenset(failed_nics), dict(degraded_links)))
    faults.check(topo)
    return faults


def affected_gpus(faults: Faults, topo) -> set[int]:
    """GPUs whose compute or traffic a fault touches directly (each becomes its own class)."""
    gpn = topo.gpus_per_node
    out = set(faults.slow_gpus)
    nodes = {n for n, _ in faults.failed_nics}
    for spec in faults.degraded:
        if spec[0] == "nic":
            nodes.add(spec[1])
        elif spec[0] == "nvlink":
            out.add(spec[1])
        else:  # every node with a NIC below the sub-tree
            level, block = spec[1], spec[2]
            f = topo.fabric
            span = 1
            for x in f.levels[1:level]:
                span *= x.down
            for n in range(topo.num_nodes):
                if any(f.leaf_index(n, k, topo.num_nodes, topo.node.nics.count) // span == block
                       for k in range(topo.node.nics.count)):
                    nodes.add(n)
    for n in nodes:
        out.update(range(n * gpn, (n + 1) * gpn))
    return out


def simulation_plan(faults: Faults, topo, placement, per_rank: bool = False):
    """(rank classes, compute scale per simulated rank, notes) for simulating ``faults``.

    Uniform cluster: one representative per stage (or every rank with ``per_rank``).
    Otherwise the tensor- and data-parallel indices of every affected GPU get classes of their
    own (per-rank simulation where the cluster is not uniform); the rest of the cluster keeps
    one representative per class. A slow GPU's rank is then simulated itself, at its speed;
    its tensor-parallel peers wait for it at every TP collective.
    """
    world = placement.world_size
    gpus = sorted(g for g in affected_gpus(faults, topo) if g < world)
    if per_rank:
        classes = RankClasses.per_rank(placement)
    elif not gpus:
        classes = RankClasses.symmetric(placement)
    else:
        classes = RankClasses.isolating(placement, {placement.coord(g).tp for g in gpus},
                                        {placement.coord(g).dp for g in gpus})
    scale = {g: f for g, f in faults.slow_gpus.items() if g < world}
    notes = []
    unused = sorted(set(faults.slow_gpus) - set(scale))
    if unused:
        notes.append(f"slow GPU(s) {unused} run no rank of this layout")
    return classes, scale, notes

"""Building a network model from a topology (options: :class:`sim.scenario.NetworkOptions`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.errors import UsageError
from sim.network.flow import FlowNetwork
from sim.network.nccl_env import parse_nccl_algo, parse_nccl_proto
from sim.topology.cluster import ROUTINGS
from sim.topology.spec import ALGORITHMS, PROTOCOLS, ROUTINGS_FOR

if TYPE_CHECKING:
    from sim.topology.spec import Topology

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")


def parse_algorithm(text: str | None) -> str | dict[str, str] | None:
    """``auto`` / ``ring`` / … or per-operation ``allreduce=tree,allgather=ring``."""
    if text is None:
        return None
    text = text.strip()
    if "=" not in text:
        if text not in ALGORITHMS:
            raise UsageError(f"unknown algorithm {text!r} (known: {', '.join(ALGORITHMS)})",
                             field="algorithm")
        return text
    out: dict[str, str] = {}
    for part in text.split(","):
        op, _, algo = part.partition("=")
        op, algo = op.strip().lower(), algo.strip()
        if op not in OPS:
            raise UsageError(f"unknown operation {op!r} (known: {', '.join(OPS)})",
                             field="algorithm")
        if algo not in ALGORITHMS:
            raise UsageError(f"unknown algorithm {algo!r} (known: {', '.join(ALGORITHMS)})",
                             field="algorithm")
        out[op] = algo
    return out


def build_network(topology: Topology, *, algorithm: str | dict[str, str] | None = None,
                  routing: str | None = None, protocol: str | None = None,
                  nvls_enable: bool | None = None, nccl_algo: str | None = None,
                  nccl_proto: str | None = None,
                  collnet_enable: bool | None = None) -> FlowNetwork:
    """The contention-aware network model of ``topology``.

    ``algorithm``: ``auto`` (least predicted time, like NCCL), a name (``ring``, ``tree``,
    ``hierarchical``, ``direct``; applied where it exists, auto elsewhere), a mapping
    ``{op: name}`` (op in lower case, e.g. ``allreduce``), or ``None`` (default) for the
    topology file's ``collectives.algorithm`` (itself ``auto`` unless the file says
    otherwise). ``routing``: ``dmodk``, ``adaptive``, ``ecmp``, ``spray`` (one the fabric's
    transport has) or ``None`` for the topology's ``fabric.routing``. ``protocol``: ``auto``,
    ``LL``, ``LL128``, ``Simple`` or ``None`` for the topology file's choice. ``nvls_enable``:
    NCCL's NCCL_NVLS_ENABLE — NVLS all-reduce is a candidate where the node's NVSwitches declare
    ``nvls: true`` (False: never chosen by ``auto``; ``--algorithm nvls`` still runs it).
    ``nccl_algo`` / ``nccl_proto``: NCCL_ALGO / NCCL_PROTO strings in NCCL's syntax
    (:mod:`sim.network.nccl_env`): what ``auto`` may choose per collective.
    ``collnet_enable``: NCCL_COLLNET_ENABLE — SHARP / CollNet all-reduce where the fabric
    declares ``sharp: true`` (NCCL's default: off). Either switch given (not None) on a
    topology without the capability would change nothing and is refused (exit 2).
    """
    nv = topology.node.nvlink
    if nvls_enable is not None and (nv is None or not nv.nvls):
        raise UsageError("the topology's NVSwitches do not declare nvls: true, so NVLS never "
                         "runs and the switch would change nothing; leave it out",
                         field="nccl_nvls_enable")
    if collnet_enable is not None and (topology.fabric is None or not topology.fabric.sharp):
        raise UsageError("the topology's fabric does not declare sharp: true, so SHARP never "
                         "runs and the switch would change nothing; leave it out",
                         field="nccl_collnet_enable")
    if routing is not None and routing not in ROUTINGS:
        raise UsageError(f"unknown routing {routing!r} (known: {', '.join(ROUTINGS)})",
                         field="routing")
    f = topology.fabric
    if routing is not None and f is not None and routing not in ROUTINGS_FOR[f.transport]:
        raise UsageError(f"routing {routing!r} does not exist on the topology's {f.transport} "
                         f"fabric (known: {', '.join(ROUTINGS_FOR[f.transport])})",
                         field="routing")
    if protocol is not None and protocol not in PROTOCOLS:
        raise UsageError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})",
                         field="protocol")
    if isinstance(algorithm, str):
        algorithm = parse_algorithm(algorithm)
    net = FlowNetwork(topology, algorithm=algorithm, routing=routing, protocol=protocol,
                      nvls_enable=nvls_enable is not False)
    net.tuner.nccl_algo = parse_nccl_algo(nccl_algo)
    net.tuner.nccl_proto = parse_nccl_proto(nccl_proto)
    net.tuner.collnet_enable = bool(collnet_enable)
    return net

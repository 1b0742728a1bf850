"""Shared pieces of the Chakra trace readers (:mod:`sim.workload.chakra`,
:mod:`sim.workload.chakra_pytorch`): node attributes, collective types, process groups."""

from __future__ import annotations

from typing import Any

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import InputError

# Chakra's CollectiveCommType numbers (et_def.proto) ↔ simrun's collectives
COLL_OF = {0: CollKind.ALLREDUCE, 2: CollKind.ALLGATHER, 5: CollKind.BROADCAST,
           6: CollKind.ALLTOALL, 7: CollKind.REDUCESCATTER}
CHAKRA_OF = {v: k for k, v in COLL_OF.items()}
COMP, COLL = 4, 7  # NodeType numbers


def attrs(msg) -> dict[str, Any]:
    """A message's attributes by name (the value of each one's ``oneof``)."""
    out = {}
    for a in msg.attr:
        kind = a.WhichOneof("value")
        v = getattr(a, kind) if kind else None
        out[a.name] = list(v.values) if hasattr(v, "values") else v
    return out


def comm_of(a: dict, file: str, where: str, group: GroupKind, pb) -> Comm:
    """The collective of a node's attributes ``a``: ``comm_type``, ``comm_size`` (bytes),
    ``involved_dim``, simrun's ``simrun_blocking`` and ``simrun_process_ns`` (ns); refused
    naming ``file`` and ``where`` (the node) when simrun cannot run it."""
    ctype, size = a.get("comm_type"), a.get("comm_size", a.get("tensor_size"))
    if ctype not in COLL_OF:
        name = pb.CollectiveCommType.Name(ctype) if ctype in pb.CollectiveCommType.values() \
            else ctype
        raise InputError(f"comm_type {name} is not modelled (ALL_REDUCE, ALL_GATHER, "
                         "REDUCE_SCATTER, ALL_TO_ALL, BROADCAST are)", file=file, field=where)
    dims = a.get("involved_dim")
    if dims is not None and not all(dims):
        raise InputError(f"involved_dim {dims}: collectives over part of the ranks are not "
                         "modelled (simrun reads them over every rank)", file=file, field=where)
    if not isinstance(size, int) or size < 0:
        raise InputError(f"comm_size must be a byte count, got {size!r}", file=file,
                         field=where)
    blocking = bool(a.get("simrun_blocking", True))
    return Comm(COLL_OF[ctype], group, size, blocking=blocking,
                post_delay_ns=int(a.get("simrun_process_ns", 0)))


def group_of(a: dict, file: str, where: str, default: GroupKind) -> GroupKind:
    """The group of a node's ``pg_name`` (one of simrun's), or ``default`` without one."""
    pg = a.get("pg_name")
    if pg is None:
        return default
    if pg not in GroupKind.__members__:
        raise InputError(f"pg_name {pg!r}: process groups other than simrun's "
                         f"({', '.join(GroupKind.__members__)}) are not modelled", file=file,
                         field=where)
    return GroupKind(pg)

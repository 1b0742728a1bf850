"""Reader for MLCommons Chakra execution traces (``--workload DIR``: a folder of per-rank
``<name>.<rank>.et`` files, the ``et_def.proto`` schema of PyPI ``mlc-chakra``, the 'chakra'
extra).

A ``.et`` file is a sequence of length-prefixed protobuf messages (a varint byte count, then
the message): one ``GlobalMetadata``, then ``Node`` s. Two kinds of trace are read
(docs/workload-formats.md):

- **written by simrun** (``--chakra DIR``; the metadata's ``simrun_layout`` attribute): every
  node carries the workload row and phase it came from (``simrun_row``, ``simrun_phase``) and
  its exact time (``simrun_duration_ns``); the rows, their collectives (``comm_type``,
  ``comm_size``, ``pg_name`` = simrun's group) and the layout (metadata ``tp``, ``pp``, ``ep``,
  ``vpp``, ``ga``, ``all_gpus``, ``pp_comm``) are rebuilt as written, so the run is the one
  that wrote it, to the ns;
- **other traces** (Chakra's generator and text converter): read as one sequential pass of
  GPU work. Each compute node (``COMP_NODE``: ``duration_micros``) becomes a row's forward
  compute; a collective (``COMM_COLL_NODE``: ``comm_type``, ``comm_size``) is that row's
  collective, over every rank (the DP group of a TP 1, PP 1 layout of as many ranks as files),
  blocking the node after it, or overlapping the one compute node after it when the node
  after both waits for the two. Refused, naming the file and node: any other collective the
  next node does not wait for, memory, send/receive and host (``is_cpu_op``) nodes other
  than compute nodes, process groups other than simrun's, and ranks whose traces differ
  (simrun runs one representative rank). Host compute nodes (``is_cpu_op`` true: the CPU-side
  operators of a trace converted from PyTorch) take no GPU time: they are read as
  dependencies only (a node depending on one depends on what it depends on), and the report
  says how many.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sim.comm import Comm, GroupKind
from sim.errors import InputError, UsageError
from sim.files.inputs import read_bytes
from sim.program.workload import Layer, Phase, Workload, WorkloadHeader
from sim.workload.chakra_nodes import CHAKRA_OF, COLL, COLL_OF, COMP, attrs, comm_of, group_of

__all__ = ["CHAKRA_OF", "COLL_OF", "attrs", "read_chakra", "schema"]

MAX_RANK_FILES = 4096
MAX_NODES = 1 << 20
EXTRA = "chakra"
_FILE = re.compile(r"^(?:.*\.)?(\d+)\.et$")
HEADER_KEYS = ("tp", "pp", "ep", "vpp", "ga", "all_gpus", "pp_comm")
_PHASES = ("forward", "input_grad", "weight_grad")


def schema(flag: str):
    """The generated ``et_def_pb2`` module, or a :class:`UsageError` naming the extra."""
    try:
        from chakra.schema.protobuf import et_def_pb2
    except ImportError:
        raise UsageError(f"Chakra traces need the '{EXTRA}' extra: pip install "
                         f"'simrun[{EXTRA}]' (PyPI mlc-chakra)", field=flag) from None
    return et_def_pb2


def is_chakra_dir(path: str | Path) -> bool:
    """Whether ``path`` is a folder (read as per-rank Chakra traces)."""
    return Path(path).is_dir()


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``pos``; (-1, pos) when truncated."""
    value = shift = 0
    while pos < len(data) and shift < 64:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    return -1, pos


def read_messages(data: bytes, file: str, pb) -> tuple[Any, list[Any]]:
    """(GlobalMetadata, nodes) of one ``.et`` file's bytes; truncated or corrupt messages are
    an :class:`InputError` naming the file and the message (``GlobalMetadata`` or ``node N``)."""
    from google.protobuf.message import DecodeError

    out: list[Any] = []
    pos = 0
    while pos < len(data):
        what = "GlobalMetadata" if not out else f"node {len(out) - 1}"
        size, start = _varint(data, pos)
        if size < 0 or start + size > len(data):
            raise InputError(f"truncated: the message at byte {pos} declares "
                             f"{max(size, 0)} bytes, {len(data) - start} are left", file=file,
                             field=what)
        msg = pb.GlobalMetadata() if not out else pb.Node()
        try:
            msg.ParseFromString(data[start:start + size])
        except DecodeError as e:
            raise InputError(f"not a Chakra {type(msg).__name__} message ({e})", file=file,
                             field=what) from None
        out.append(msg)
        if len(out) > MAX_NODES + 1:
            raise InputError(f"more than {MAX_NODES:,} nodes", file=file, field="nodes")
        pos = start + size
    if not out:
        raise InputError("empty: no GlobalMetadata message", file=file, field="GlobalMetadata")
    return out[0], out[1:]


def rank_files(folder: Path) -> list[Path]:
    """The folder's ``*.<rank>.et`` files in rank order (ranks 0..N-1, none missing)."""
    found: dict[int, Path] = {}
    for p in sorted(folder.iterdir()):
        m = _FILE.match(p.name)
        if m and p.is_file():
            r = int(m.group(1))
            if r in found:
                raise InputError(f"two files for rank {r}: {found[r].name} and {p.name}",
                                 file=str(folder), field="rank")
            found[r] = p
        if len(found) > MAX_RANK_FILES:
            raise InputError(f"more than {MAX_RANK_FILES} rank files", file=str(folder),
                             field="rank")
    if not found:
        raise InputError("no <name>.<rank>.et files", file=str(folder), field="workload")
    missing = sorted(set(range(len(found))) - set(found))
    if missing:
        raise InputError(f"rank {missing[0]}'s file is missing (ranks must be 0..N-1)",
                         file=str(folder), field="rank")
    return [found[r] for r in range(len(found))]


def _signature(nodes) -> list[tuple]:
    return [(n.type, n.duration_micros, tuple(sorted(attrs(n).items(), key=lambda kv: kv[0])))
            for n in nodes]


def read_chakra(folder: str | Path) -> Workload:
    """The workload of a folder of per-rank Chakra traces (see the module docstring)."""
    pb = schema("--workload")
    folder = Path(folder)
    files = rank_files(folder)
    data0 = read_bytes(files[0], what="Chakra trace")
    meta, nodes = read_messages(data0, str(files[0]), pb)
    first = _signature(nodes)
    for p in files[1:]:
        data = read_bytes(p, what="Chakra trace")
        if data == data0:  # the same bytes: the same trace (simrun writes every rank alike)
            continue
        _m, other = read_messages(data, str(p), pb)
        sig = _signature(other)
        if sig != first:
            i = next((i for i, (a, b) in enumerate(zip(first, sig, strict=False)) if a != b),
                     min(len(first), len(sig)))
            raise InputError(f"differs from rank 0's trace ({files[0].name}): simrun runs one "
                             "representative rank, so every rank's trace must be the same",
                             file=str(p), field=f"node {i}")
    m = attrs(meta)
    if "simrun_layout" in m:
        return _simrun_workload(m, nodes, str(files[0]), str(folder), pb)
    from sim.workload import chakra_pytorch
    if chakra_pytorch.is_pytorch_trace(m):
        return chakra_pytorch.read_pytorch(nodes, str(files[0]), str(folder), len(files), pb)
    gpu, where = _without_host_nodes(nodes, str(files[0]), pb)
    w = _sequential_workload(gpu, str(files[0]), str(folder), len(files), where)
    if len(gpu) < len(nodes):
        w.assumptions.append(f"Chakra trace: {len(nodes) - len(gpu)} host (is_cpu_op) compute "
                             "nodes read as dependencies taking no GPU time")
    return w


#: the most nodes one host node's dependencies may resolve to
MAX_HOST_DEPS = 10_000


def _without_host_nodes(nodes, file: str, pb) -> tuple[list, list[int]]:
    """The nodes without the host compute nodes (``is_cpu_op``: PyTorch's CPU-side operators in
    a trace converted from PyTorch), and each kept node's position in the file. A host operator
    takes no GPU time: a node that depends on one depends on what that one depends on."""
    resolved: dict[int, list[int]] = {}
    kept, where = [], []
    for i, n in enumerate(nodes):
        mine: dict[int, None] = {}
        for d in (*n.data_deps, *n.ctrl_deps):
            mine.update(dict.fromkeys(resolved.get(d, [d])))
        if n.type == COMP and attrs(n).get("is_cpu_op"):
            if len(mine) > MAX_HOST_DEPS:
                raise InputError(f"a host node depending on over {MAX_HOST_DEPS} nodes",
                                 file=file, field=f"node {i}")
            resolved[n.id] = list(mine)
            continue
        if any(d in resolved for d in (*n.data_deps, *n.ctrl_deps)):
            n = _with_deps(n, list(mine), pb)
        kept.append(n)
        where.append(i)
    return kept, where


def _with_deps(n, deps: list[int], pb):
    copy = pb.Node()
    copy.CopyFrom(n)
    del copy.data_deps[:]
    del copy.ctrl_deps[:]
    copy.data_deps.extend(deps)
    return copy


def _simrun_workload(meta: dict, nodes, file: str, folder: str, pb) -> Workload:
    header = WorkloadHeader()
    for key in HEADER_KEYS:
        v = meta.get(key)
        if v is not None and (not isinstance(v, int) or v < 0):
            raise InputError(f"must be a whole number, got {v!r}", file=file,
                             field=f"GlobalMetadata.{key}")
        setattr(header, "pp_comm_bytes" if key == "pp_comm" else key, v or None)
    rows: dict[int, dict[str, Any]] = {}
    for i, n in enumerate(nodes):
        a, where = attrs(n), f"node {i}"
        row, phase = a.get("simrun_row"), a.get("simrun_phase")
        if not isinstance(row, int) or not 0 <= row < MAX_NODES or phase not in _PHASES:
            raise InputError("a simrun trace's node needs simrun_row and simrun_phase",
                             file=file, field=where)
        r = rows.setdefault(row, {"name": n.name.rsplit(".", 1)[0]})
        ns = a.get("simrun_duration_ns", n.duration_micros * 1000)
        if n.type == COMP:
            r[phase] = Phase(ns)
        elif n.type == COLL:
            default = GroupKind.DP if phase == "weight_grad" else GroupKind.TP
            comm = comm_of(a, file, where, group_of(a, file, where, default), pb)
            if phase == "forward" and not comm.blocking and not comm.per_microbatch:
                # the engine issues non-blocking collectives in the last backward only
                raise InputError("a non-blocking collective in a forward phase (simrun issues "
                                 "non-blocking collectives in the backward only)", file=file,
                                 field=f"{where}.simrun_blocking")
            r[phase] = Phase(r.get(phase, Phase()).compute_ns, comm)
        else:
            raise InputError(f"node type {pb.NodeType.Name(n.type)} in a simrun trace",
                             file=file, field=where)
    if sorted(rows) != list(range(len(rows))):
        raise InputError("rows are missing (simrun_row must number 0..N-1)", file=file,
                         field="simrun_row")
    layers = [Layer(r["name"], **{k: v for k, v in r.items() if k in _PHASES})
              for _i, r in sorted(rows.items())]
    header.declared_rows = len(layers)
    return Workload(folder, "chakra", header, layers,
                    [f"Chakra trace written by simrun: {len(layers)} rows per rank"])


def _deps(nodes, file: str, where: list[int]) -> list[set[int]]:
    """Per node, the positions of the nodes it depends on (data or control); a dependency on
    a later or unknown node is refused (``where``: each node's position in the file)."""
    pos = {n.id: i for i, n in enumerate(nodes)}
    out: list[set[int]] = []
    for i, n in enumerate(nodes):
        mine = set()
        for d in (*n.data_deps, *n.ctrl_deps):
            if d not in pos or pos[d] >= i:
                raise InputError(f"depends on node id {d}, which is not an earlier node",
                                 file=file, field=f"node {where[i]}")
            mine.add(pos[d])
        out.append(mine)
    return out


def _overlaps_next(nodes, deps: list[set[int]], i: int) -> bool:
    """Whether collective ``i`` runs beside the compute node after it and the node after that
    waits for both (Chakra's text converter: an input-gradient all-reduce beside the weight
    gradient): read as a collective overlapping that compute (``Comm.overlap``)."""
    j, k = i + 1, i + 2
    return (k < len(nodes) and nodes[j].type == COMP and nodes[k].type == COMP
            and i not in deps[j] and deps[i] <= deps[j] and {i, j} <= deps[k])


def _sequential_workload(nodes, file: str, folder: str, ranks: int,
                         position: list[int]) -> Workload:
    pb = schema("--workload")
    deps = _deps(nodes, file, position)
    layers: list[Layer] = []
    beside: Comm | None = None  # a collective that overlaps the next compute node
    for i, n in enumerate(nodes):
        a, where = attrs(n), f"node {position[i]}"
        if a.get("is_cpu_op"):
            raise InputError("host (is_cpu_op) nodes are not modelled: simrun times GPU work",
                             file=file, field=where)
        if n.type == COMP:
            layers.append(Layer(n.name or f"node{i}",
                                forward=Phase(n.duration_micros * 1000, beside)))
            beside = None
        elif n.type == COLL:
            comm = comm_of(a, file, where, group_of(a, file, where, GroupKind.DP), pb)
            if i + 1 < len(nodes) and i not in deps[i + 1]:
                if not _overlaps_next(nodes, deps, i):
                    raise InputError(
                        "the next node does not depend on this collective, so they run "
                        "alongside each other in Chakra's semantics; simrun reads other traces "
                        "as one sequence (a collective blocks the node after it, or overlaps "
                        "one compute node that the node after both waits for)", file=file,
                        field=where)
                beside = Comm(comm.kind, comm.group, comm.size_bytes, overlap=True)
                continue
            if not layers or layers[-1].forward.comm is not None:
                layers.append(Layer(n.name or f"node{i}"))
            last = layers[-1]
            layers[-1] = Layer(last.name, forward=Phase(last.forward.compute_ns, comm))
        elif n.type != pb.METADATA_NODE:
            raise InputError(f"node type {pb.NodeType.Name(n.type)} is not modelled (compute "
                             "and collective nodes are)", file=file, field=where)
    if not layers:
        raise InputError("no compute or collective nodes", file=file, field="nodes")
    header = WorkloadHeader(tp=1, pp=1, ga=1, all_gpus=ranks, declared_rows=len(layers))
    return Workload(folder, "chakra", header, layers,
                    [f"Chakra trace: {len(layers)} rows read as one sequential pass over "
                     f"{ranks} ranks (collectives over all of them)"])

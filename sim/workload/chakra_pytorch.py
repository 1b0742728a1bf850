"""Chakra traces converted from PyTorch (``chakra_trace_link`` + ``chakra_converter PyTorch``
of PyPI ``mlc-chakra``): read as the GPU work of one rank, in launch order.

Such a trace is recognised by its ``GlobalMetadata`` carrying the PyTorch execution trace's
``schema`` and ``pid`` attributes (the converter copies ``schema``, ``pid``, ``time``, ``start_ts``,
``finish_ts`` from the JSON trace: ``pytorch_converter.py`` ``write_global_metadata``). Every
node carries ``is_cpu_op``; GPU nodes carry their CUDA stream (``stream``, or ``tid`` in
converters before the ``stream`` attribute). What simrun does with each field:

- GPU ``COMP_NODE`` (``is_cpu_op`` false): a row's compute of ``duration_micros`` µs;
  kernels run one after another on the compute stream in node-id order (launch order). A
  second compute stream is refused naming the node (simrun has one compute stream per rank).
- GPU ``COMM_COLL_NODE`` (an NCCL kernel): the collective of ``comm_type`` and ``comm_size``
  bytes over every rank (its ``pg_name``, PyTorch's process group, must be a group of every
  rank as the trace's ``## process_group:init ##`` record gives its ``group_size``; a smaller
  group, and an ``involved_dim`` that leaves a dimension out, are refused), issued after the
  compute kernel launched before it and run on the communication stream beside later
  kernels (non-blocking, FIFO, the iteration waits for it); blocking when the next GPU
  kernel depends on it. A later kernel but not the next one depending on it is refused
  naming the node. Its own
  ``duration_micros`` (the measured NCCL kernel) is not used: simrun models the collective.
- host nodes (``is_cpu_op`` true, compute or collective: PyTorch's CPU-side operators and
  ``c10d`` calls): no GPU time; read as dependencies only (a GPU node that depends on one
  depends on the GPU nodes it resolves to). The report says how many.
- ``data_deps``: dependencies (through host nodes as above); ``ctrl_deps``: the operator's
  parent in PyTorch's call tree (the converter writes ``json_node.parent`` there), not an
  ordering: irrelevant. ``inputs``/``outputs`` (tensor shapes), ``rf_id``, ``fw_parent``,
  ``fw_tid``, ``seq_id``, ``scope``, ``op_schema`` and the metadata's attributes: profiler
  bookkeeping, irrelevant to timing (the durations are given). Any other attribute of a GPU
  node is refused naming it.
- memory, send/receive and other node types: refused naming the node.

The rows are held as one backward pass (weight-gradient phases, listed in reverse: the engine
runs a backward's rows in reverse list order and issues non-blocking collectives in the last
microbatch's backward); a collective on the compute stream itself blocks it.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from sim.comm import Comm, GroupKind
from sim.errors import InputError
from sim.program.workload import Layer, Phase, Workload, WorkloadHeader
from sim.workload.chakra_nodes import COLL, COMP, attrs, comm_of, group_of

#: a GPU node's attributes: applied (above), irrelevant to timing (profiler bookkeeping);
#: any other is refused naming it (host nodes' attributes are all irrelevant: no GPU time)
APPLIED = frozenset({"is_cpu_op", "tid", "stream", "comm_type", "comm_size", "pg_name",
                     "involved_dim"})
IRRELEVANT = frozenset({"rf_id", "fw_parent", "fw_tid", "seq_id", "scope", "op_schema"})

#: the most GPU nodes one node's host dependencies may resolve to, and the most such links
#: over all nodes (a bound on the reader's memory)
MAX_RESOLVED = 100_000
MAX_LINKS = 1 << 24


def is_pytorch_trace(meta: dict[str, Any]) -> bool:
    """Whether a trace's metadata attributes are those the PyTorch converter copies."""
    return "schema" in meta and "pid" in meta  # the text converter writes only "schema"


def _gpu_deps(nodes, file: str) -> tuple[list[Any], dict[int, set[int]]]:
    """(GPU nodes in node-id order, each GPU node's id → the GPU node ids it depends on,
    resolved through host nodes). Unknown or cyclic dependencies are refused."""
    by_id: dict[int, Any] = {}
    for i, n in enumerate(nodes):
        if n.id in by_id:
            raise InputError(f"node id {n.id} appears twice", file=file, field=f"node {i}")
        by_id[n.id] = n
    pos = {n.id: i for i, n in enumerate(nodes)}
    host = {n.id for n in nodes if attrs(n).get("is_cpu_op")}
    resolved: dict[int, frozenset[int]] = {}
    links = 0

    def of(nid: int) -> frozenset[int]:
        nonlocal links
        # iterative depth-first resolution (traces hold long host chains)
        stack, onstack = [nid], {nid}
        while stack:
            top = stack[-1]
            todo = [d for d in by_id[top].data_deps if d in host and d not in resolved]
            for d in todo:
                if d not in by_id:
                    continue
                if d in onstack:
                    raise InputError("data_deps form a cycle", file=file,
                                     field=f"node {pos[d]}")
            todo = [d for d in todo if d in by_id]
            if todo:
                stack.append(todo[0])
                onstack.add(todo[0])
                continue
            out: set[int] = set()
            for d in by_id[top].data_deps:
                if d not in by_id:
                    raise InputError(f"data_deps names node id {d}, which is not in the file",
                                     file=file, field=f"node {pos[top]}")
                out.update(resolved[d] if d in host else (d,))
            if len(out) > MAX_RESOLVED:
                raise InputError(f"depends on over {MAX_RESOLVED} GPU nodes", file=file,
                                 field=f"node {pos[top]}")
            links += len(out)
            if links > MAX_LINKS:
                raise InputError(f"dependencies resolve to over {MAX_LINKS:,} links between "
                                 "GPU nodes", file=file, field=f"node {pos[top]}")
            resolved[top] = frozenset(out)
            stack.pop()
            onstack.discard(top)
        return resolved[nid]

    gpu = sorted((n for n in nodes if n.id not in host), key=lambda n: n.id)
    return gpu, {n.id: set(of(n.id)) for n in gpu}


#: the most process groups a trace's ``## process_group:init ##`` record may declare
MAX_GROUPS = 4096
PG_INIT = "## process_group:init ##"


def process_groups(nodes, file: str) -> dict[str, int]:
    """Each process group's size by name, from the ``## process_group:init ##`` node PyTorch
    records (its one input: a JSON list of ``{"pg_name", "ranks", "group_size", ...}``)."""
    out: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.name != PG_INIT:
            continue
        try:
            (text,) = ast.literal_eval(n.inputs.values)
            groups = json.loads(text)
            if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
                raise ValueError(f"a list of at most {MAX_GROUPS} groups")
            for g in groups:
                size = g["group_size"]
                if not isinstance(size, int) or size < 1:
                    raise ValueError("group_size must be a positive whole number")
                out[str(g["pg_name"])] = size
        except (ValueError, SyntaxError, TypeError, KeyError, RecursionError,
                MemoryError) as e:
            raise InputError(f"{PG_INIT} inputs are not PyTorch's process-group list ({e})",
                             file=file, field=f"node {i}") from None
    return out


def _pg(a: dict, groups: dict[str, int], ranks: int, file: str, where: str) -> dict:
    """The attributes with a PyTorch ``pg_name`` checked and dropped: simrun reads a
    collective over a group of every rank (the DP group); a smaller group is refused."""
    pg = a.get("pg_name")
    if pg is None or pg in GroupKind.__members__:
        return a
    if pg not in groups:
        raise InputError(f"pg_name {pg!r} is not in the trace's {PG_INIT} record", file=file,
                         field=where)
    if groups[pg] != ranks:
        raise InputError(f"pg_name {pg!r}: a group of {groups[pg]} ranks, the trace folder has "
                         f"{ranks}; simrun reads collectives over every rank", file=file,
                         field=where)
    return {k: v for k, v in a.items() if k != "pg_name"}


def _stream(a: dict, file: str, where: str) -> int:
    s = a.get("stream", a.get("tid"))
    if not isinstance(s, int):
        raise InputError("a GPU node needs its stream (stream or tid)", file=file, field=where)
    return s


def _check(n, a: dict, deps: set[int], row_of: dict[int, int], last_row: int,
           pos: dict[int, int], file: str) -> None:
    """A GPU node's attributes and dependencies, refused naming the node where simrun cannot
    read them (``last_row``: the row the node follows)."""
    where = f"node {pos[n.id]}"
    other = sorted(set(a) - APPLIED - IRRELEVANT)
    if other:
        raise InputError(f"attribute {other[0]} is not read (a GPU node's attributes: "
                         f"{', '.join(sorted(APPLIED | IRRELEVANT))})", file=file, field=where)
    for d in deps:
        if d >= n.id:
            raise InputError(f"depends on GPU node id {d}, launched after it (GPU nodes run "
                             "in node-id order)", file=file, field=where)
        if d in row_of and row_of[d] != last_row:
            raise InputError(f"depends on the collective node {pos[d]}, which the kernel "
                             "before it does not wait for: simrun runs a collective beside "
                             "later kernels or blocks the next one", file=file, field=where)


def read_pytorch(nodes, file: str, folder: str, ranks: int, pb) -> Workload:
    """The workload of one rank's trace converted from PyTorch (see the module docstring)."""
    pos = {n.id: i for i, n in enumerate(nodes)}
    for n in nodes:
        if "is_cpu_op" not in attrs(n) and n.type != pb.METADATA_NODE:
            raise InputError("a trace converted from PyTorch marks every node is_cpu_op",
                             file=file, field=f"node {pos[n.id]}")
    gpu, deps = _gpu_deps(nodes, file)
    groups = process_groups(nodes, file)
    layers: list[Layer] = []
    row_of: dict[int, int] = {}  # a collective's id → the row holding it
    compute_stream = None
    for n in gpu:
        a, where = attrs(n), f"node {pos[n.id]}"
        if n.type == pb.METADATA_NODE:
            continue
        _check(n, a, deps[n.id], row_of, len(layers) - 1, pos, file)
        if n.type == COMP:
            stream = _stream(a, file, where)
            if compute_stream not in (None, stream):
                raise InputError(f"compute kernels on two streams ({compute_stream} and "
                                 f"{stream}): simrun runs one compute stream per rank",
                                 file=file, field=where)
            compute_stream = stream
            if layers and any(row_of.get(d) == len(layers) - 1 for d in deps[n.id]):
                last = layers[-1]  # the collective before this kernel blocks it
                c = last.weight_grad.comm
                layers[-1] = Layer(last.name, weight_grad=Phase(
                    last.weight_grad.compute_ns, Comm(c.kind, c.group, c.size_bytes)))
            layers.append(Layer(n.name or f"node{pos[n.id]}",
                                weight_grad=Phase(n.duration_micros * 1000)))
        elif n.type == COLL:
            on_compute = _stream(a, file, where) == compute_stream
            a = _pg(a, groups, ranks, file, where)
            c = comm_of(a, file, where, group_of(a, file, where, GroupKind.DP), pb)
            if not layers or layers[-1].weight_grad.comm is not None:
                layers.append(Layer(n.name or f"node{pos[n.id]}"))
            last = layers[-1]
            c = Comm(c.kind, c.group, c.size_bytes, blocking=on_compute)
            layers[-1] = Layer(last.name, weight_grad=Phase(last.weight_grad.compute_ns, c))
            row_of[n.id] = len(layers) - 1
        else:
            raise InputError(f"node type {pb.NodeType.Name(n.type)} is not modelled (compute "
                             "and collective nodes are)", file=file, field=where)
    if not layers:
        raise InputError("no GPU (is_cpu_op false) compute or collective nodes: a host-only "
                         "trace, converted without its Kineto device trace (chakra_trace_link),"
                         " holds no GPU work to time", file=file, field="nodes")
    layers.reverse()  # one backward pass (the module docstring)
    header = WorkloadHeader(tp=1, pp=1, ga=1, all_gpus=ranks, declared_rows=len(layers))
    n_comp = sum(1 for n in gpu if n.type == COMP)
    return Workload(folder, "chakra", header, layers, [
        f"Chakra trace converted from PyTorch: {n_comp} GPU kernels in launch order on one "
        f"compute stream, {len(row_of)} collectives over {ranks} ranks on the communication "
        f"stream, {len(nodes) - len(gpu)} host (is_cpu_op) nodes read as dependencies taking "
        "no GPU time; each collective's measured duration_micros is replaced by simrun's "
        "model"])

"""Write a run's workload as per-rank Chakra execution traces (``--chakra DIR``), for
ASTRA-sim and the other Chakra tools; read back by :mod:`sim.workload.chakra`.

The rows written are the AICB rows of the program that ran (:func:`sim.models.aicb_writer.
aicb_text`, as ``simrun generate`` writes them): the per-microbatch block of one
representative stage unrolled ``ga`` times, then the iteration-level rows. Every rank gets
the same trace, ``DIR/simrun.<rank>.et`` (a ``GlobalMetadata``, then the nodes), as Chakra's
own text converter (``chakra_converter Text``) writes a workload text: the forward of every
row in order (a ``COMP_NODE`` per row, then a ``COMM_COLL_NODE`` for its collective), then
the backward in reverse (input-gradient, then weight-gradient compute and collective). Each
node depends on the one before it, except that nothing waits for a non-blocking (gradient)
collective. ``duration_micros`` is the compute time in whole µs (ASTRA-sim's field);
``simrun_duration_ns`` keeps the ns. Collectives carry ``comm_type`` (et_def.proto's
``CollectiveCommType``), ``comm_size`` (bytes) and ``pg_name`` (simrun's group: TP, DP, EP,
DP_EP, …). The layout goes into the metadata (``tp``, ``pp``, ``ep``, ``vpp``, ``ga``,
``all_gpus``, ``pp_comm``) with ``simrun_layout`` marking the trace as simrun's.
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import UsageError
from sim.files.outputs import atomic_write
from sim.models.aicb_writer import aicb_text
from sim.program.pipeline import PipelineProgram
from sim.program.workload import Layer, Workload
from sim.workload.aicb import read_aicb
from sim.workload.chakra import CHAKRA_OF, HEADER_KEYS, MAX_RANK_FILES, schema

FLAG = "--chakra"


def program_rows(program: PipelineProgram) -> Workload:
    """The rows of ``program``: a workload file's own (:attr:`PipelineProgram.rows`), or a
    generated program's AICB rows (what ``simrun generate`` writes); a :class:`UsageError`
    naming ``--chakra`` when it has neither."""
    if program.rows is not None:
        return program.rows
    try:
        text = aicb_text(program)
    except ValueError as e:
        raise UsageError(f"this program cannot be written as rows: {e}", field=FLAG) from None
    return read_aicb(text, "<program>")


def check_chakra(program: PipelineProgram) -> None:
    """Refuse before simulating what :func:`write_chakra` could not write."""
    schema(FLAG)
    ranks = program.tp * program.pp * program.dp
    if ranks > MAX_RANK_FILES:
        raise UsageError(f"writes one file per rank: at most {MAX_RANK_FILES}, this layout "
                         f"has {ranks}", field=FLAG)
    program_rows(program)


def _attr(pb, name: str, value) -> object:
    if isinstance(value, bool):
        return pb.AttributeProto(name=name, bool_val=value)
    if isinstance(value, int):
        return pb.AttributeProto(name=name, int64_val=value)
    return pb.AttributeProto(name=name, string_val=str(value))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _frame(msg) -> bytes:
    data = msg.SerializeToString(deterministic=True)
    return _varint(len(data)) + data


def trace_bytes(w: Workload, header: dict[str, int]) -> bytes:
    """The bytes of one rank's ``.et`` file for the rows of ``w`` and the layout ``header``."""
    pb = schema(FLAG)
    meta = pb.GlobalMetadata(version="0.0.4", attr=[
        _attr(pb, "schema", "1.0.2-chakra.0.0.4"), _attr(pb, "simrun_layout", True),
        *(_attr(pb, k, v) for k, v in header.items())])
    out = [_frame(meta)]
    prev: list[int] = []  # the node the next one depends on

    def add(row: int, lay: Layer, phase: str, comm_only: bool) -> None:
        ph = getattr(lay, phase)
        if not comm_only:
            n = pb.Node(id=len(out) - 1, name=f"{lay.name}.{phase}", type=pb.COMP_NODE,
                        duration_micros=ph.compute_ns // 1000, data_deps=prev,
                        attr=[_attr(pb, "is_cpu_op", False), _attr(pb, "simrun_row", row),
                              _attr(pb, "simrun_phase", phase),
                              _attr(pb, "simrun_duration_ns", ph.compute_ns)])
            out.append(_frame(n))
            prev[:] = [n.id]
            return
        c = ph.comm
        if c is None:
            return
        if c.kind not in CHAKRA_OF:
            raise UsageError(f"row {lay.name}: a {c.kind.value} has no Chakra collective type",
                             field=FLAG)
        n = pb.Node(id=len(out) - 1, name=f"{lay.name}.{phase}", type=pb.COMM_COLL_NODE,
                    data_deps=prev, attr=[
                        _attr(pb, "is_cpu_op", False), _attr(pb, "comm_type", CHAKRA_OF[c.kind]),
                        _attr(pb, "comm_size", c.size_bytes), _attr(pb, "pg_name", c.group.value),
                        _attr(pb, "simrun_row", row), _attr(pb, "simrun_phase", phase),
                        _attr(pb, "simrun_blocking", c.blocking),
                        _attr(pb, "simrun_process_ns", c.post_delay_ns)])
        out.append(_frame(n))
        if c.blocking:
            prev[:] = [n.id]

    for i, lay in enumerate(w.layers):
        add(i, lay, "forward", False)
        add(i, lay, "forward", True)
    for i in reversed(range(len(w.layers))):
        for phase in ("input_grad", "weight_grad"):
            lay = w.layers[i]
            if getattr(lay, phase).compute_ns:
                add(i, lay, phase, False)
            add(i, lay, phase, True)
    return b"".join(out)


def write_chakra(folder: str | Path, program: PipelineProgram) -> list[Path]:
    """Write ``folder/simrun.<rank>.et`` for every rank of ``program`` (each atomically)."""
    check_chakra(program)
    w = program_rows(program)
    h = w.header
    header = {k: v for k, v in zip(HEADER_KEYS, (program.tp, program.pp, program.ep, program.vpp,
                                                 program.microbatches, program.tp * program.pp
                                                 * program.dp, h.pp_comm_bytes or 0),
                                   strict=True)}
    data = trace_bytes(w, header)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(program.tp * program.pp * program.dp):
        p = out / f"simrun.{r}.et"
        atomic_write(p, lambda f: f.write(data), binary=True, flag=FLAG)
        paths.append(p)
    return paths

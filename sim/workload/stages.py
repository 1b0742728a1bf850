"""From one representative rank's rows to the programs of every pipeline stage.

AICB files list the rows of ONE rank (one pipeline stage) with the per-microbatch block unrolled
``ga`` times, preceded and followed by iteration-level rows. This module recovers that structure
(:mod:`sim.workload.blocks`), resolves the :class:`~sim.parallel.layout.Layout` from the header and
the overrides, places rows on stages, splits layers into virtual-pipeline chunks and builds a
:class:`~sim.program.pipeline.PipelineProgram`. Every interpretation it makes is appended to
``program.assumptions`` (printed in every report) and can be overridden (see
:class:`LayoutOptions`). The rules are documented in docs/workload-formats.md.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace

from sim.assumption import Assumption, key_of
from sim.comm import CollKind, GroupKind
from sim.errors import InputError, UsageError
from sim.files.inputs import INT64_MAX
from sim.parallel.layout import Layout, require_gpus
from sim.pipeline.orders import check_interleaved
from sim.pipeline.registry import default_schedule, schedule_type
from sim.pipeline.types import Schedule
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase, PhaseKind, Workload
from sim.workload.aicb import in_embedding_group
from sim.workload.blocks import RowStructure, find_structure, layer_period

FIRST_STAGE_ROW = re.compile(r"^embedding", re.I)  # inside the block: input embedding
LAST_STAGE_ROW = re.compile(r"^(final|lm_head|output)", re.I)  # inside the block: output layer
TIED_EMBEDDING_ROW = re.compile(r"^embedding_(grads|norm)$")  # first and last stage
LOSS_ROW = re.compile(r"^(cross_entropy|loss)", re.I)  # last stage
ROW_PLACEMENTS = ("megatron", "all")


@dataclass
class LayoutOptions:
    """What a run asks of a workload file's layout (``None`` = use the file's header), and how
    to read its rows; :func:`build_program` resolves it into a :class:`~sim.parallel.layout.Layout`.
    ``all_gpus``: the run's GPUs (``--gpus``); ``default_gpus``: the topology's, used when
    nothing else says and the most a layout may need."""

    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    vpp: int | None = None
    microbatches: int | None = None
    all_gpus: int | None = None
    schedule: str | None = None
    pp_comm_bytes: int | None = None
    row_placement: str = "megatron"
    microbatch_group_size: int | None = None
    # the topology's GPU count: used when nothing else says, and the most a layout may need
    default_gpus: int | None = None


def _split_block(block: list[Layer], placement: str):
    first: list[Layer] = []
    last: list[Layer] = []
    body = list(block)
    if placement == "megatron":
        while body and FIRST_STAGE_ROW.match(body[0].name):
            first.append(body.pop(0))
        while body and LAST_STAGE_ROW.match(body[-1].name):
            last.insert(0, body.pop())
    return first, body, last


def derive_pp_bytes(body: list[Layer], tp: int) -> tuple[int | None, str]:
    """Pipeline message size from the TP collectives: the most common forward TP collective size
    is the activation ``b·s·h·bytes``; with sequence parallelism (TP all-gather/reduce-scatter)
    each rank holds and sends 1/tp of it."""
    sizes = Counter()
    sp = False
    for lay in body:
        c = lay.forward.comm
        if c is not None and c.group is GroupKind.TP:
            sizes[c.size_bytes] += 1
            sp |= c.kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER)
    if not sizes:
        return None, ""
    act = sizes.most_common(1)[0][0]
    if sp:
        return act // tp, Assumption(
            f"pipeline message = {act // tp} bytes per microbatch, derived: most common forward "
            f"TP collective ({act} bytes = activation b·s·h·dtype) / TP {tp} (sequence "
            "parallel: all-gather/reduce-scatter seen)", "pp-message")
    return act, Assumption(f"pipeline message = {act} bytes per microbatch, derived: most "
                           "common forward TP all-reduce size (activation b·s·h·dtype)",
                           "pp-message")


def _resolve(name: str, override: int | None, header: int | None, default: int,
             notes: list[str], what: str) -> int:
    if override is not None:
        if header is not None and header != override:
            notes.append(f"{what}: {override} from --{name} (file says {header})")
        return override
    if header is not None:
        return header
    notes.append(f"{what}: not in the file, using {default} (--{name})")
    return default


def build_program(w: Workload, opts: LayoutOptions) -> PipelineProgram:
    """Build the per-stage programs of ``w`` under ``opts``; see the module docstring."""
    h = w.header
    notes = list(w.assumptions)
    if opts.row_placement not in ROW_PLACEMENTS:
        raise UsageError(f"unknown row placement {opts.row_placement!r}; choose "
                         f"{' or '.join(ROW_PLACEMENTS)}", field="row_placement")
    tp = _resolve("tp", opts.tp, h.tp, 1, notes, "tensor-parallel size")
    pp = _resolve("pp", opts.pp, h.pp, 1, notes, "pipeline stages")
    ep = _resolve("ep", opts.ep, h.ep, 1, notes, "expert-parallel size")
    structure = find_structure(w.layers, h.ga or 1, w.path)
    notes.extend(structure.notes)
    m = _resolve("microbatches", opts.microbatches, h.ga, structure.blocks_found, notes,
                 "microbatches per iteration")
    for name, val in (("tp", tp), ("pp", pp), ("ep", ep), ("microbatches", m)):
        if val < 1:
            raise UsageError(f"must be ≥ 1, got {val}", field=name)
    dp = _resolve_dp(w, opts, tp, pp, ep, notes)
    first, body, last = _split_block(structure.block, opts.row_placement)
    period = layer_period([lay.name for lay in body]) if body else 1
    n_layers = len(body) // period if body else 0
    v, schedule = _resolve_vpp(opts, h.vpp, pp, m, n_layers, notes)
    if v > 1:
        notes.append(f"virtual pipeline: {n_layers} layers ({period} rows each) per stage split "
                     f"into {v} chunks of {n_layers // v}")
    layout = Layout(tp=tp, pp=pp, dp=dp, ep=ep, vpp=v, microbatches=m, schedule=schedule,
                    microbatch_group_size=opts.microbatch_group_size)
    pp_bytes = _pp_bytes(opts, h.pp_comm_bytes, body, tp, pp, notes)
    chunk_rows = [body[i * len(body) // v : (i + 1) * len(body) // v] for i in range(v)]
    stages = [_stage(s, layout, chunk_rows, first, last, structure, opts.row_placement)
              for s in range(pp)]
    _describe_placement(notes, opts.row_placement, first, last, structure)
    if layout.schedule_type.v_shape and opts.row_placement == "megatron":
        notes.append(f"{schedule} (V placement): the last virtual stage is chunk 1 of stage 0, so "
                     "the output and loss rows run there; both tied embedding copies are on "
                     "stage 0 and its embedding_grads all-reduce is dropped (nothing to reduce)")
    return PipelineProgram.of(layout, pp_bytes=pp_bytes, stages=stages, source=w.path,
                              assumptions=notes)


def _resolve_dp(w: Workload, opts: LayoutOptions, tp: int, pp: int, ep: int,
                notes: list[str]) -> int:
    """DP = all GPUs / (TP·PP), the GPUs from ``--gpus``, the header or the topology; the
    layout must fit the topology (:func:`sim.parallel.layout.require_gpus`)."""
    h = w.header
    gpus_default = opts.default_gpus if opts.default_gpus is not None else tp * pp
    all_gpus = _resolve("gpus", opts.all_gpus, h.all_gpus, gpus_default, notes, "GPUs (all_gpus)")
    gpus_from = ("--gpus" if opts.all_gpus is not None else "header all_gpus"
                 if h.all_gpus is not None else "the topology")
    if opts.default_gpus is not None:
        require_gpus(all_gpus, opts.default_gpus, gpus_from, "the topology")
    if tp * pp > all_gpus or all_gpus % (tp * pp):
        src = "" if gpus_from == "header all_gpus" else f" ({gpus_from})"
        problem = (f"one pipeline replica needs TP·PP = {tp}·{pp} = {tp * pp} GPUs, more than "
                   f"the {all_gpus} GPUs available{src}" if tp * pp > all_gpus else
                   f"{all_gpus} GPUs{src} is not a multiple of TP·PP = {tp}·{pp}")
        if not src:  # the file's value: name the file, line and field, like any input error
            raise InputError(f"{problem} (--gpus overrides)", file=w.path, line=1,
                             field="all_gpus")
        raise UsageError(problem, field="gpus")
    dp = all_gpus // (tp * pp)
    if dp % ep:
        if opts.ep is None and h.ep is not None:
            raise InputError(f"expert-parallel size {ep} must divide the data-parallel size "
                             f"DP = {dp} (--ep overrides)", file=w.path, line=1, field="ep")
        raise UsageError(f"expert-parallel size {ep} must divide the data-parallel size "
                         f"DP = {dp}", field="ep")
    notes.append(Assumption(f"data-parallel size DP = all_gpus / (TP·PP) = {all_gpus} / "
                            f"({tp}·{pp}) = {dp}", "dp-size"))
    return dp


def _pp_bytes(opts: LayoutOptions, header_bytes: int | None, body: list[Layer], tp: int,
              pp: int, notes: list[str]) -> int:
    """Bytes of one pipeline message per microbatch: ``--pp-comm-bytes``, the header's
    ``pp_comm``, else derived from the TP collectives (:func:`derive_pp_bytes`)."""
    if opts.pp_comm_bytes is not None:
        if opts.pp_comm_bytes > INT64_MAX:
            raise UsageError(f"must be ≤ 2^63−1, got {opts.pp_comm_bytes}",
                             field="pp_comm_bytes")
        notes.append(Assumption(f"pipeline message = {opts.pp_comm_bytes} bytes per "
                                "microbatch (--pp-comm-bytes)", "pp-message"))
        return opts.pp_comm_bytes
    if header_bytes is not None:
        notes.append(Assumption(f"pipeline message = {header_bytes} bytes per microbatch "
                                "(header pp_comm)", "pp-message"))
        return header_bytes
    derived, why = derive_pp_bytes(body, tp)
    if derived is None:
        if pp > 1:
            raise UsageError("the file gives no pp_comm and has no TP collective to derive "
                             "the pipeline message size from; pass --pp-comm-bytes",
                             field="pp_comm_bytes")
        derived, why = 0, "no pipeline traffic (one stage)"
    notes.append(Assumption(why + " (--pp-comm-bytes overrides)", key_of(why)))
    return derived


def _stage(s: int, layout: Layout, chunk_rows: list[list[Layer]], first: list[Layer],
           last: list[Layer], structure: RowStructure, placement: str) -> StageProgram:
    """Stage ``s``'s program: its chunks' rows (embedding rows on the first, output rows on
    the last stage unless ``placement`` is ``all``), prologue and epilogue."""
    pp, v, typ = layout.pp, layout.vpp, layout.schedule_type
    chunks = []
    for c in range(v):
        rows = list(chunk_rows[c])
        if placement == "all" or (s == 0 and c == 0):
            rows = first + rows
        if placement == "all" or typ.virtual_stage(pp, s, c) == pp * v - 1:
            rows = rows + last
        chunks.append(tuple(rows))
    last_stage = typ.last_stage(pp, v)
    lead = _on_stage(structure.leading, s, last_stage, placement)
    trail = _on_stage(structure.trailing, s, last_stage, placement)
    return StageProgram(s, chunks, _prologue(lead), _epilogue(lead, trail))


def _check_groups(group: int | None, typ: Schedule, pp: int, m: int, v: int,
                  notes: list[str]) -> None:
    """The interleaved schedule's microbatch groups (``--microbatch-group-size``)."""
    if group is not None and not typ.interleaves:
        raise UsageError(f"only the interleaved schedule groups microbatches; this run uses "
                         f"{typ.name} (virtual pipeline size {v})",
                         field="microbatch_group_size")
    if typ.interleaves:
        check_interleaved(pp, m, v, group)
        if group is not None:
            notes.append(f"interleaved schedule: microbatches in groups of {group} "
                         f"(--microbatch-group-size; Megatron's default is PP = {pp})")


def _resolve_vpp(opts: LayoutOptions, header_vpp: int | None, pp: int, m: int, n_layers: int,
                 notes: list[str]) -> tuple[int, str]:
    typ = None if opts.schedule is None else schedule_type(opts.schedule)
    if typ is not None and typ.bidirectional:
        raise UsageError("the dualpipe schedule runs two model stages per rank, one per "
                         "direction; a workload file holds one stage's rows per rank (use "
                         "--model)", field="schedule")
    if opts.vpp is not None:
        v = opts.vpp
        if v < 1:
            raise UsageError(f"must be ≥ 1, got {v}", field="vpp")
    elif header_vpp and header_vpp > 1 and (typ is None or typ.interleaves):
        reason = None
        if n_layers % header_vpp:
            reason = f"{n_layers} layers per stage are not divisible by {header_vpp}"
        else:
            try:
                check_interleaved(pp, m, header_vpp, opts.microbatch_group_size)
            except UsageError as e:
                reason = e.message
        if reason is None:
            v = header_vpp
            notes.append(f"header vpp = {v} read as Megatron's virtual pipeline size (chunks per "
                         "stage); --vpp overrides")
        else:
            v = 1
            notes.append(Assumption(f"header vpp = {header_vpp} cannot be a virtual pipeline "
                                    f"size here ({reason}); read as AICB's layers-per-stage "
                                    "field and not used for scheduling (--vpp overrides)",
                                    "header-vpp", departs=True))
    elif typ is not None and typ.v_shape:
        v = 2
        notes.append(f"virtual pipeline size 2: the {typ.name} schedule's two chunks per stage in "
                     "V placement (--vpp)")
    else:
        v = 1
        if header_vpp and header_vpp > 1:
            notes.append(Assumption(f"header vpp = {header_vpp} ignored for the "
                                    f"{opts.schedule} schedule", "header-vpp", departs=True))
    if v > 1 and n_layers % v:
        raise UsageError(f"{n_layers} layers per stage cannot be split into {v} virtual-pipeline "
                         "chunks", field="vpp")
    if typ is None:
        typ = default_schedule(v)
        notes.append(Assumption(f"schedule: {typ.name} (default for virtual pipeline size {v}; "
                                "--schedule)", "schedule"))
    _check_groups(opts.microbatch_group_size, typ, pp, m, v, notes)
    typ.check(pp, m, v, opts.microbatch_group_size)
    return v, typ.name


def _on_stage(rows: list[Layer], s: int, last_stage: int, placement: str) -> list[Layer]:
    """The iteration-level ``rows`` stage ``s`` runs; ``last_stage``: the stage holding the
    output layer (the last, or 0 in V placement, where both tied embedding copies are on stage
    0 and there is nothing to all-reduce between them)."""
    if placement == "all":
        return list(rows)
    out = []
    for lay in rows:
        if TIED_EMBEDDING_ROW.match(lay.name) and s not in (0, last_stage):
            continue
        if LOSS_ROW.match(lay.name) and s != last_stage:
            continue
        if last_stage == 0 and lay.name == "embedding_grads":
            lay = replace(lay, input_grad=Phase(lay.input_grad.compute_ns))
        out.append(in_embedding_group(lay))
    return out


def _task(lay: Layer, kind: PhaseKind, task_kind: TaskKind) -> Task | None:
    ph: Phase = lay.phase(kind)
    if ph.compute_ns == 0 and ph.comm is None:
        return None
    if ph.comm is not None and ph.compute_ns == 0:
        task_kind = TaskKind.GRAD_SYNC
    return Task(f"{lay.name}.{kind.value}", task_kind, ph.compute_ns, ph.comm)


def _prologue(lead: list[Layer]) -> tuple[Task, ...]:
    tasks = (_task(lay, PhaseKind.FORWARD, TaskKind.COMPUTE) for lay in lead)
    return tuple(t for t in tasks if t is not None)


def _epilogue(lead: list[Layer], trail: list[Layer]) -> tuple[Task, ...]:
    tasks: list[Task] = []
    for lay in reversed(lead):
        for kind in (PhaseKind.INPUT_GRAD, PhaseKind.WEIGHT_GRAD):
            t = _task(lay, kind, TaskKind.OPTIMIZER)
            if t is not None:
                tasks.append(t)
    for lay in trail:
        for kind in PhaseKind:
            t = _task(lay, kind, TaskKind.OPTIMIZER)
            if t is not None:
                tasks.append(t)
    # the optimizer (or, before it, Megatron's embedding-group all-reduce, which follows the
    # DP gradient sync) waits for outstanding gradient reductions
    for i, t in enumerate(tasks):
        if (t.kind is TaskKind.OPTIMIZER and t.compute_ns > 0) or (
                t.comm is not None and t.comm.group is GroupKind.EMB):
            tasks[i] = Task(t.label, t.kind, t.compute_ns, t.comm, wait_async=True)
            break
    return tuple(tasks)


def _describe_placement(notes: list[str], placement: str, first: list[Layer], last: list[Layer],
                        st: RowStructure) -> None:
    if st.leading or st.trailing:
        notes.append(
            "iteration-level rows "
            f"({', '.join(lay.name for lay in st.leading + st.trailing)}): forward phases of "
            "the leading rows run once before the first microbatch; after the last backward the "
            "leading rows' backward phases run in reverse file order (SimAI's walk), then the "
            "trailing rows; their compute counts as optimizer time and the first optimizer "
            "compute waits for outstanding gradient reductions")
    if placement == "all":
        notes.append("row placement 'all': every stage runs every row (SimAI's representative-"
                     "rank view; --row-placement megatron places embedding/output rows)")
    else:
        msg = "row placement 'megatron': "
        msg += (f"{', '.join(x.name for x in first)} on the first stage only; " if first else "")
        msg += (f"{', '.join(x.name for x in last)} on the last stage only; " if last else "")
        msg += ("embedding_grads/embedding_norm on the first and last stage (the embedding_grads "
                "all-reduce in Megatron's embedding group of those two stages, EMB); "
                "cross_entropy/loss "
                "rows on the last stage; all other rows on every stage (--row-placement all "
                "puts every row on every stage)")
        notes.append(msg)

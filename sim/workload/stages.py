"""From one representative rank's rows to the programs of every pipeline stage.

AICB files list the rows of ONE rank (one pipeline stage) with the per-microbatch block unrolled
``ga`` times, preceded and followed by iteration-level rows. This module recovers that
structure, places rows on stages, splits layers into virtual-pipeline chunks and builds a
:class:`~sim.workload.program.PipelineProgram`. Every interpretation it makes is appended to
``program.assumptions`` (printed in every report) and can be overridden (see
:class:`LayoutOptions`). The rules are documented in docs/workload-formats.md.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from sim.comm import CollKind, GroupKind
from sim.errors import InputError, UsageError
from sim.inputs import INT64_MAX
from sim.schedules import SCHEDULES, check_interleaved
from sim.workload.model import Layer, Phase, PhaseKind, Workload
from sim.workload.program import PipelineProgram, StageProgram, Task, TaskKind

# Iteration-level rows AICB writes before / after the unrolled microbatch blocks.
ITERATION_ROW = re.compile(
    r"^(grad_gather|grad_param_comm|grad_param_compute|embedding_grads|moe_grad_norm\d*|norm|"
    r"grad_norm|layernorm|embedding_norm|cross_entropy\d*|optimizer\d*|loss\d*)$"
)
FIRST_STAGE_ROW = re.compile(r"^embedding", re.I)  # inside the block: input embedding
LAST_STAGE_ROW = re.compile(r"^(final|lm_head|output)", re.I)  # inside the block: output layer
TIED_EMBEDDING_ROW = re.compile(r"^embedding_(grads|norm)$")  # first and last stage
LOSS_ROW = re.compile(r"^(cross_entropy|loss)", re.I)  # last stage
ROW_PLACEMENTS = ("megatron", "all")


@dataclass
class LayoutOptions:
    """Command-line overrides of what the workload header says (``None`` = use the file)."""

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


@dataclass
class RowStructure:
    """Rows split into iteration-level prologue/epilogue rows and the per-microbatch block."""

    leading: list[Layer]
    block: list[Layer]
    trailing: list[Layer]
    blocks_found: int
    notes: list[str]


def _key(layer: Layer) -> tuple:
    return (layer.name, layer.forward, layer.input_grad, layer.weight_grad)


def find_structure(layers: list[Layer], ga: int, file: str) -> RowStructure:
    """Detect the ``ga`` repeated per-microbatch blocks and the iteration-level rows.

    With ``ga > 1`` the block rows are those whose name occurs a multiple of ``ga`` times; the
    region they span must consist of exactly ``ga`` repetitions (by row name). With ``ga == 1``
    the leading/trailing rows with AICB's iteration-level names are split off.
    """
    names = [lay.name for lay in layers]
    notes: list[str] = []
    if ga > 1:
        counts = Counter(names)
        idx = [i for i, nm in enumerate(names) if counts[nm] % ga == 0]
        if not idx:
            raise InputError(f"ga = {ga} but no row name repeats a multiple of {ga} times, so "
                             "the per-microbatch block cannot be found", file=file, line=1,
                             field="ga")
        start, end = idx[0], idx[-1] + 1
        if (end - start) % ga:
            raise InputError(
                f"ga = {ga} does not divide the {end - start} rows of the repeated region "
                f"(lines {layers[start].line}-{layers[end - 1].line})", file=file, line=1,
                field="ga")
        k = (end - start) // ga
        for i in range(start, end - k):
            if names[i] != names[i + k]:
                raise InputError(
                    f"ga = {ga}: the rows between lines {layers[start].line} and "
                    f"{layers[end - 1].line} do not repeat every {k} rows (line "
                    f"{layers[i + k].line} is {names[i + k]!r}, expected {names[i]!r})",
                    file=file, line=layers[i + k].line, field="name")
        blocks = [layers[start + j * k : start + (j + 1) * k] for j in range(ga)]
        variants = Counter(tuple(_key(x) for x in b) for b in blocks)
        rep_key, rep_count = variants.most_common(1)[0]
        rep = next(b for b in blocks if tuple(_key(x) for x in b) == rep_key)
        if len(variants) > 1:
            diff = sorted({b[i].line for b in blocks for i in range(k)
                           if _key(b[i]) != rep_key[i]})
            notes.append(
                f"the {ga} unrolled blocks are not identical: {rep_count} share the values used "
                f"for every microbatch; rows that differ: lines {_ranges(diff)}")
        notes.append(
            f"per-microbatch block: {k} rows (lines {rep[0].line}-{rep[-1].line}), found "
            f"{ga} times = ga")
        return RowStructure(layers[:start], list(rep), layers[end:], ga, notes)
    lead = 0
    while lead < len(names) and ITERATION_ROW.match(names[lead]):
        lead += 1
    trail = len(names)
    while trail > lead and ITERATION_ROW.match(names[trail - 1]):
        trail -= 1
    if trail == lead:
        raise InputError("every row is an iteration-level row; no per-microbatch layers",
                         file=file, field="rows")
    block = layers[lead:trail]
    notes.append(f"per-microbatch block: {len(block)} rows (lines {block[0].line}-"
                 f"{block[-1].line}); ga = 1")
    return RowStructure(layers[:lead], block, layers[trail:], 1, notes)


def _ranges(lines: list[int]) -> str:
    out, i = [], 0
    while i < len(lines):
        j = i
        while j + 1 < len(lines) and lines[j + 1] == lines[j] + 1:
            j += 1
        out.append(str(lines[i]) if i == j else f"{lines[i]}-{lines[j]}")
        i = j + 1
    if len(out) > 6:
        out = out[:6] + [f"… ({len(lines)} rows)"]
    return ", ".join(out)


def layer_period(names: list[str]) -> int:
    """Smallest row period of ``names`` (rows per transformer layer); ``len(names)`` if none."""
    n = len(names)
    for p in range(1, n + 1):
        if n % p == 0 and all(names[i] == names[i + p] for i in range(n - p)):
            return p
    return n


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
        return act // tp, (f"pipeline message = {act // tp} bytes per microbatch, derived: most "
                           f"common forward TP collective ({act} bytes = activation b·s·h·dtype) "
                           f"/ TP {tp} (sequence parallel: all-gather/reduce-scatter seen)")
    return act, (f"pipeline message = {act} bytes per microbatch, derived: most common forward "
                 "TP all-reduce size (activation b·s·h·dtype)")


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
                         f"{' or '.join(ROW_PLACEMENTS)}", field="--row-placement")
    tp = _resolve("tp", opts.tp, h.tp, 1, notes, "tensor-parallel size")
    pp = _resolve("pp", opts.pp, h.pp, 1, notes, "pipeline stages")
    ep = _resolve("ep", opts.ep, h.ep, 1, notes, "expert-parallel size")
    ga_file = h.ga or 1
    structure = find_structure(w.layers, ga_file, w.path)
    notes.extend(structure.notes)
    m = _resolve("microbatches", opts.microbatches, h.ga, structure.blocks_found, notes,
                 "microbatches per iteration")
    for name, val in (("tp", tp), ("pp", pp), ("ep", ep), ("microbatches", m)):
        if val < 1:
            raise UsageError(f"must be ≥ 1, got {val}", field=f"--{name}")

    gpus_default = opts.default_gpus if opts.default_gpus is not None else tp * pp
    all_gpus = _resolve("gpus", opts.all_gpus, h.all_gpus, gpus_default, notes, "GPUs (all_gpus)")
    gpus_from = ("--gpus" if opts.all_gpus is not None else "header all_gpus"
                 if h.all_gpus is not None else "the topology")
    if opts.default_gpus is not None and all_gpus > opts.default_gpus:
        raise UsageError(f"the layout needs {all_gpus} GPUs ({gpus_from}) but the topology has "
                         f"{opts.default_gpus}; use --nodes or --gpus", field="--gpus")
    if tp * pp > all_gpus or all_gpus % (tp * pp):
        src = "" if gpus_from == "header all_gpus" else f" ({gpus_from})"
        problem = (f"one pipeline replica needs TP·PP = {tp}·{pp} = {tp * pp} GPUs, more than "
                   f"the {all_gpus} GPUs available{src}" if tp * pp > all_gpus else
                   f"{all_gpus} GPUs{src} is not a multiple of TP·PP = {tp}·{pp}")
        if not src:  # the file's value: name the file, line and field, like any input error
            raise InputError(f"{problem} (--gpus overrides)", file=w.path, line=1,
                             field="all_gpus")
        raise UsageError(problem, field="--gpus")
    dp = all_gpus // (tp * pp)
    if dp % ep:
        if opts.ep is None and h.ep is not None:
            raise InputError(f"expert-parallel size {ep} must divide the data-parallel size "
                             f"DP = {dp} (--ep overrides)", file=w.path, line=1, field="ep")
        raise UsageError(f"expert-parallel size {ep} must divide the data-parallel size "
                         f"DP = {dp}", field="--ep")
    notes.append(f"data-parallel size DP = all_gpus / (TP·PP) = {all_gpus} / ({tp}·{pp}) = {dp}")

    first, body, last = _split_block(structure.block, opts.row_placement)
    period = layer_period([lay.name for lay in body]) if body else 1
    n_layers = len(body) // period if body else 0

    v, schedule = _resolve_vpp(opts, h.vpp, pp, m, n_layers, notes)
    chunk_rows = [body[i * len(body) // v : (i + 1) * len(body) // v] for i in range(v)]
    if v > 1:
        notes.append(f"virtual pipeline: {n_layers} layers ({period} rows each) per stage split "
                     f"into {v} chunks of {n_layers // v}")

    if opts.pp_comm_bytes is not None:
        if opts.pp_comm_bytes > INT64_MAX:
            raise UsageError(f"must be ≤ 2^63−1, got {opts.pp_comm_bytes}",
                             field="--pp-comm-bytes")
        pp_bytes = opts.pp_comm_bytes
        notes.append(f"pipeline message = {pp_bytes} bytes per microbatch (--pp-comm-bytes)")
    elif h.pp_comm_bytes is not None:
        pp_bytes = h.pp_comm_bytes
        notes.append(f"pipeline message = {pp_bytes} bytes per microbatch (header pp_comm)")
    else:
        derived, why = derive_pp_bytes(body, tp)
        if derived is None:
            if pp > 1:
                raise UsageError("the file gives no pp_comm and has no TP collective to derive "
                                 "the pipeline message size from; pass --pp-comm-bytes",
                                 field="--pp-comm-bytes")
            derived, why = 0, "no pipeline traffic (one stage)"
        pp_bytes = derived
        notes.append(why + " (--pp-comm-bytes overrides)")

    stages = []
    for s in range(pp):
        chunks = []
        for c in range(v):
            rows = list(chunk_rows[c])
            if opts.row_placement == "all" or (s == 0 and c == 0):
                rows = first + rows
            if opts.row_placement == "all" or (s == pp - 1 and c == v - 1):
                rows = rows + last
            chunks.append(tuple(rows))
        lead = _on_stage(structure.leading, s, pp, opts.row_placement)
        trail = _on_stage(structure.trailing, s, pp, opts.row_placement)
        stages.append(StageProgram(s, chunks, _prologue(lead), _epilogue(lead, trail)))
    _describe_placement(notes, opts.row_placement, first, last, structure)
    return PipelineProgram(
        tp=tp, pp=pp, dp=dp, ep=ep, vpp=v, microbatches=m, pp_bytes=pp_bytes, stages=stages,
        schedule=schedule, source=w.path, microbatch_group_size=opts.microbatch_group_size,
        assumptions=notes,
    )


def _resolve_vpp(opts: LayoutOptions, header_vpp: int | None, pp: int, m: int, n_layers: int,
                 notes: list[str]) -> tuple[int, str]:
    sched = opts.schedule
    if sched is not None and sched not in SCHEDULES:
        raise UsageError(f"unknown schedule {sched!r}; choose one of {', '.join(SCHEDULES)}",
                         field="--schedule")
    if opts.vpp is not None:
        v = opts.vpp
        if v < 1:
            raise UsageError(f"must be ≥ 1, got {v}", field="--vpp")
    elif header_vpp and header_vpp > 1 and sched in (None, "interleaved"):
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
            notes.append(f"header vpp = {header_vpp} cannot be a virtual pipeline size here "
                         f"({reason}); read as AICB's layers-per-stage field and not used for "
                         "scheduling (--vpp overrides)")
    else:
        v = 1
        if header_vpp and header_vpp > 1:
            notes.append(f"header vpp = {header_vpp} ignored for the {sched} schedule")
    if v > 1 and n_layers % v:
        raise UsageError(f"{n_layers} layers per stage cannot be split into {v} virtual-pipeline "
                         "chunks", field="--vpp")
    if sched is None:
        sched = "interleaved" if v > 1 else "1f1b"
        notes.append(f"schedule: {sched} (default for virtual pipeline size {v}; --schedule)")
    if opts.microbatch_group_size is not None and sched != "interleaved":
        raise UsageError(f"only the interleaved schedule groups microbatches; this run uses "
                         f"{sched} (virtual pipeline size {v})", field="--microbatch-group-size")
    if sched == "interleaved":
        check_interleaved(pp, m, v, opts.microbatch_group_size)
    elif v > 1:
        raise UsageError(f"the {sched} schedule runs one model chunk per stage; got a virtual "
                         f"pipeline size of {v} (use --schedule interleaved or --vpp 1)",
                         field="--schedule")
    return v, sched


def _on_stage(rows: list[Layer], s: int, pp: int, placement: str) -> list[Layer]:
    if placement == "all":
        return list(rows)
    out = []
    for lay in rows:
        if TIED_EMBEDDING_ROW.match(lay.name) and s not in (0, pp - 1):
            continue
        if LOSS_ROW.match(lay.name) and s != pp - 1:
            continue
        out.append(lay)
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
    for i, t in enumerate(tasks):  # the optimizer waits for outstanding gradient reductions
        if t.kind is TaskKind.OPTIMIZER and t.compute_ns > 0:
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
        msg += ("embedding_grads/embedding_norm on the first and last stage; cross_entropy/loss "
                "rows on the last stage; all other rows on every stage (--row-placement all "
                "puts every row on every stage)")
        notes.append(msg)

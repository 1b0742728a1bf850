"""Model runs whose ZeRO-3 collectives come from AICB's physical-format log
(``simrun --workload LOG.csv --model SPEC``).

The log (:mod:`sim.workload.aicb_csv`) fixes the layout (one data-parallel group, ZeRO-3, one
microbatch) and every collective; the model spec gives what the log lacks: the compute of every
row, timed by simrun's kernel model, the optimizer step and the memory. The generator times the
rows; :mod:`sim.workload.aicb_zero3` places the log's collectives among them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sim.assumption import key_of
from sim.errors import UsageError
from sim.files.catalog import resolve
from sim.files.inputs import read_text
from sim.parallel.config import ParallelConfig, Training
from sim.parallel.layout import LayoutRequest
from sim.program.pipeline import PipelineProgram
from sim.program.workload import Layer
from sim.workload.aicb_csv import CollectiveLog, Role, read_log
from sim.workload.aicb_zero3 import check_reduced, step_tasks, weave

if TYPE_CHECKING:  # annotations only: a workload-file run does not load the model generator
    from sim.models.generator import Zero3Units
    from sim.models.vocab.rows import Row
    from sim.models.vocab.spec import ModelSpec


def load_log(path: str) -> CollectiveLog:
    """Read the physical-format file at ``path`` (or a shipped workload's name)."""
    path = resolve("workloads", path, "--workload")
    return read_log(read_text(path), path)


def log_layout(log: CollectiveLog, request: LayoutRequest,
               training: Training) -> LayoutRequest:
    """The layout ``log`` fixes: TP = PP = CP = EP = 1, DP = its group size, ZeRO-3, one
    microbatch; a flag asking for another is refused, naming it."""
    n, why = log.group_size, f"{log.path} is one DeepSpeed ZeRO-3 iteration of one "
    why += f"data-parallel group of {log.group_size} ranks"
    if log.ranks != n:
        raise UsageError(f"line 1 names {log.ranks} ranks but the collectives run in groups "
                         f"of {n}: simrun reads logs of one data-parallel group",
                         field="workload")
    for flag, value, want in (("--tp", request.tp, 1), ("--pp", request.pp, 1),
                              ("--context-parallel-size", request.cp, 1),
                              ("--ep", request.ep, 1), ("--vpp", request.vpp, 1),
                              ("--microbatches", request.microbatches, 1),
                              ("--dp", request.dp, n), ("--gpus", request.gpus, n),
                              ("--zero", request.zero, 3)):
        if value is not None and value != want:
            raise UsageError(f"{value}: {why} (TP = PP = 1, one microbatch, ZeRO stage 3); "
                             f"leave it out or give {want}", field=flag)
    gb = training.micro_batch * n
    if training.global_batch not in (None, gb):
        raise UsageError(f"{training.global_batch}: {why} and one microbatch, so the global "
                         f"batch is DP × --micro-batch = {gb}", field="global_batch")
    return replace(request, tp=1, pp=1, cp=1, ep=1, vpp=1, dp=n, gpus=n, zero=3,
                   microbatches=1)


def first_use(rows: list[Row]) -> list[int]:
    """Per row, the row whose backward first needs its parameters: its re-run forward under
    full recomputation (``layer<k>_recompute_<name>``, :func:`sim.models.vocab.rows.recompute_rows`,
    walked before the layer's backward), else itself."""
    index = {r.name: i for i, r in enumerate(rows)}
    out = []
    for i, r in enumerate(rows):
        k = r.tags.get("layer")
        prefix = f"layer{k}_"
        twin = (index.get(f"{prefix}recompute_{r.name.removeprefix(prefix)}")
                if k is not None else None)
        out.append(i if twin is None else twin)
    return out


def units_of(log: CollectiveLog, model: ModelSpec) -> Zero3Units:
    """The generator's ZeRO-3 hook: the log's collectives among a chunk's timed rows."""
    if model.moe is not None:
        raise UsageError(f"{model.name} is a mixture-of-experts model; AICB's DeepSpeed "
                         "ZeRO-3 logs are of dense models", field="model")

    def units(layers: list[Layer], rows: list[Row], par: ParallelConfig) -> list[Layer]:
        del par  # the log fixes the layout
        params = [r.params for r in rows]
        out = weave(log, layers, params, first_use(rows))
        check_reduced(log, sum(params))
        return out

    return units


def with_log(program: PipelineProgram, log: CollectiveLog, model_path: str) -> PipelineProgram:
    """``program`` with the log's step collectives around its optimizer step and the report's
    assumptions saying what came from the log and what from the model."""
    st = program.stages[0]
    st.epilogue = step_tasks(log, st.epilogue)
    count = {role: len(log.of(role)) for role in Role}
    skipped = ", ".join(f"{k} ({v})" for k, v in sorted(log.skipped.items()))
    # the log's ZeRO-3 is stated below, not the generated program's
    program.assumptions = [a for a in program.assumptions if key_of(a) != "zero"]
    program.assumptions[:0] = [
        f"collective log {log.path} (AICB physical format, one DeepSpeed ZeRO-3 iteration of "
        f"ranks 0-{log.ranks - 1} in one DP group): from the file, every collective's kind, "
        f"DP group and size and their order ({count[Role.FWD_GATHER]} forward and "
        f"{count[Role.BWD_GATHER]} backward parameter all-gathers, "
        f"{count[Role.BWD_RS]} gradient-bucket reduce-scatters; at the step "
        f"{count[Role.STEP_RS]} reduce-scatter and {count[Role.STEP_ALLREDUCE]} all-reduces "
        f"before the optimizer, {count[Role.STEP_GATHER]} all-gathers after it); not part of "
        f"the iteration and not simulated: {skipped or 'nothing'}; the file's _elapsed_time, "
        "algbw, busbw, src, dst columns are not used",
        f"from the model spec {model_path}: every compute time (the kernel model below), the "
        "optimizer step and the memory; the file's tensors matched to the spec's rows by size "
        "(all match); ZeRO-3 from the file (sim/workload/aicb_zero3.py): each all-gather "
        "blocks the compute just before its row's forward and before the first backward "
        "computation needing the row (its re-run forward with --recompute full), in file "
        "order, none prefetched (the file records one fetch per tensor); each bucket's "
        "reduce-scatter runs asynchronously on the DP gradient stream once the bucket's "
        "gradients exist",
    ]
    return program

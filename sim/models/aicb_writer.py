"""Write a generated :class:`PipelineProgram` as a SimAI / AICB workload text file.

Layout (as AICB writes seed 002; read back by :mod:`sim.workload.aicb` +
:mod:`sim.workload.stages`):

- line 1: ``HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: TP ep: EP pp: PP vpp: V
  ga: M all_gpus: N pp_comm: BYTES checkpoints: 0 checkpoint_initiates: 0``;
- line 2: the number of rows;
- the per-microbatch block of ONE representative stage, unrolled ``ga`` times: the first
  stage's embedding rows (``embedding*``), the representative stage's transformer-layer rows of
  all its model chunks in order (layer indices dropped from the names, so the rows of every
  layer have the same names), the last stage's output rows (``final_norm``, ``output_*``);
- iteration-level rows after the blocks: ``fp8_weight_casts`` (the rows' once-per-iteration
  first-forward compute, summed: AICB's block repeats every microbatch alike) and the
  representative stage's delayed gradient syncs (:mod:`sim.models.features.grad_sync`; all after the
  last backward, where the interleaved schedule launches some earlier) and epilogue tasks as
  ``optimizer1``, ``optimizer2``, … (compute in the forward column; a TP collective in the
  forward column, others in the weight-grad column, which defaults to the DP group).

Rows have 12 tab-separated columns: name, -1, then compute ns / comm type / bytes for forward,
input-gradient and weight-gradient, then the process time (AICB writes 100 ns; here 0 by
default because generated collectives have no post-delay — pass ``process_ns=100`` for AICB's
convention). Comm types carry ``_EP`` / ``_DP_EP`` / ``_DP`` / ``_TP`` suffixes when the group
differs from the column's default (TP for forward and input-grad, DP for weight-grad).
Data-parallel bucket collectives stay in the weight-grad column of the block rows in every
unrolled copy; simrun issues non-blocking collectives of per-microbatch rows only in the last
microbatch's backward (SimAI would issue them ``ga`` times). The file holds the representative
stage's buckets for every stage: read back, other stages bucket as it does, where Megatron-Core
gives each of their chunks one bucket (``sim.models.generator._single_bucket``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from sim.comm import Comm, GroupKind
from sim.errors import UsageError
from sim.files.outputs import atomic_write
from sim.program.pipeline import PipelineProgram, Task
from sim.program.workload import Layer, Phase

POLICY = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
#: the iteration-level row carrying the once-per-iteration compute of the block's rows
#: (``Layer.first_forward_ns``: Transformer Engine's FP8 weight casts)
FIRST_FORWARD_ROW = "fp8_weight_casts"
_LAYER_PREFIX = re.compile(r"^layer\d+_")


def _comm_type(comm: Comm | None, default: GroupKind) -> tuple[str, int]:
    if comm is None or comm.size_bytes == 0:
        return "NONE", 0
    name = comm.kind.value
    if comm.group is not default:
        name += "_" + comm.group.value
    return name, comm.size_bytes


def _cols(phase: Phase, default: GroupKind) -> list[str]:
    kind, size = _comm_type(phase.comm, default)
    return [str(phase.compute_ns), kind, str(size)]


def format_row(name: str, layer: Layer, process_ns: int) -> str:
    """One 12-column row for ``layer`` named ``name``."""
    cols = [name, "-1"]
    cols += _cols(layer.forward, GroupKind.TP)
    cols += _cols(layer.input_grad, GroupKind.TP)
    cols += _cols(layer.weight_grad, GroupKind.DP)
    cols.append(str(process_ns))
    return "\t".join(cols)


def _task_layer(task: Task) -> Layer:
    comm = task.comm
    if comm is not None and comm.group is GroupKind.EMB:
        # AICB's own row for it: embedding_grads, all-reduce in the input-grad column (read
        # back into Megatron's embedding group by the AICB reader)
        return Layer("embedding_grads", forward=Phase(task.compute_ns),
                     input_grad=Phase(0, replace(comm, group=GroupKind.TP)))
    if comm is not None and comm.group is GroupKind.TP:
        return Layer(task.label, forward=Phase(task.compute_ns, comm))
    return Layer(task.label, forward=Phase(task.compute_ns), weight_grad=Phase(0, comm))


def representative_rows(program: PipelineProgram, stage: int = 0) -> tuple[list, list]:
    """(per-microbatch block rows, iteration-level rows) as ``(name, Layer)`` pairs."""
    if not 0 <= stage < program.pp:
        raise ValueError(f"stage {stage} outside 0..{program.pp - 1}")
    st = program.stages[stage]
    if any(s.prologue for s in program.stages):
        raise ValueError("programs with prologue tasks cannot be written as AICB text")

    def is_layer(lay: Layer) -> bool:
        return bool(_LAYER_PREFIX.match(lay.name))

    first = [x for x in program.stages[0].chunks[0] if not is_layer(x)]
    head = first[: next((i for i, x in enumerate(program.stages[0].chunks[0]) if is_layer(x)),
                        len(first))]
    last_chunk = program.stages[-1].chunks[-1]
    tail_start = len(last_chunk)
    while tail_start > 0 and not is_layer(last_chunk[tail_start - 1]):
        tail_start -= 1
    tail = list(last_chunk[tail_start:])
    body = [x for chunk in st.chunks for x in chunk if is_layer(x)]
    block = [(x.name, x) for x in head]
    block += [(_LAYER_PREFIX.sub("", x.name), x) for x in body]
    block += [(x.name if re.match(r"^(final|output|lm_head)", x.name) else "output_" + x.name, x)
              for x in tail]
    iteration, k = [], 0
    once = sum(x.first_forward_ns for _n, x in block)
    if once:  # work of the iteration's first forward (FP8 weight casts): no slot in AICB's block
        iteration.append((FIRST_FORWARD_ROW, Layer(FIRST_FORWARD_ROW, forward=Phase(once))))
    # delayed gradient syncs (sim.models.features.grad_sync) as the first iteration-level rows: read
    # back, they are issued after the last backward, before the optimizer waits for them
    for t in (*(t for g in st.grad_syncs for t in g.tasks), *st.epilogue):
        lay = _task_layer(t)
        if lay.name != "embedding_grads":
            k += 1
        iteration.append((lay.name if lay.name == "embedding_grads" else f"optimizer{k}", lay))
    return block, iteration


def aicb_text(program: PipelineProgram, *, stage: int = 0, process_ns: int = 0) -> str:
    """The whole file as a string (see the module docstring)."""
    block, iteration = representative_rows(program, stage)
    if any(ph.overlaps for _n, lay in block for ph in (lay.forward, lay.input_grad,
                                                       lay.weight_grad)):
        raise UsageError("AICB text has one collective per phase after its compute: it cannot "
                         "hold a collective pipelined with a GEMM", field="tp_comm_overlap")
    if any(st.deferred is not None for st in program.stages):
        raise UsageError("AICB text repeats one row list per microbatch: it cannot hold the "
                         "output-layer weight gradients deferred to the pipeline flush",
                         field="defer_embedding_wgrad_compute")
    if program.etp not in (None, program.tp):
        raise UsageError("AICB text has no expert tensor-parallel group (its header and comm "
                         "suffixes know TP, EP and DP_EP only)",
                         field="expert_tensor_parallel_size")
    header = (
        f"{POLICY} model_parallel_NPU_group: {program.tp} ep: {program.ep} pp: {program.pp} "
        f"vpp: {program.vpp} ga: {program.microbatches} all_gpus: {program.world_size} "
        f"pp_comm: {program.pp_bytes} checkpoints: 0 checkpoint_initiates: 0"
    )
    block_lines = [format_row(n, lay, process_ns) for n, lay in block]
    lines = [header, str(len(block_lines) * program.microbatches + len(iteration))]
    lines += block_lines * program.microbatches
    lines += [format_row(n, lay, process_ns) for n, lay in iteration]
    return "\n".join(lines) + "\n"


def write_aicb(program: PipelineProgram, path: str | Path, *, stage: int = 0,
               process_ns: int = 0) -> int:
    """Write ``program`` to ``path`` atomically (temp file + ``os.replace``); returns the number
    of rows written. ``stage``: the representative stage whose layers and epilogue are written.
    """
    text = aicb_text(program, stage=stage, process_ns=process_ns)
    atomic_write(path, lambda f: f.write(text), flag="--out")
    return int(text.split("\n", 2)[1])

"""The operator-level plan of one iteration: which rows each (stage, chunk) runs per microbatch.

A :class:`ModelPlan` depends only on the model and the parallel layout (no GPU): it is what the
FLOP, parameter and memory accounting read, and what :func:`sim.models.generate` times.
Virtual stage ``c·p + r`` (chunk ``c`` of stage ``r``) holds layers
``[(c·p + r)·L/(p·v), (c·p + r + 1)·L/(p·v))`` with the even split (uneven splits:
:mod:`sim.parallel.split`); the embedding precedes virtual stage 0 and the
final norm, output layer and loss follow the last one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import UsageError
from sim.models.features import cross_entropy, eager, fp8
from sim.models.layers import embedding_rows, output_rows, transformer_layer_rows
from sim.models.parallel_checks import validate
from sim.models.vocab.dims import Dims
from sim.models.vocab.rows import Row
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig
from sim.parallel.split import virtual_stage_layers


@dataclass
class StagePlan:
    """Rows of each model chunk of one stage (per microbatch, per GPU) and its parameters."""

    stage: int
    chunks: list[list[Row]]
    layers: list[list[int]]  # global transformer-layer indices per chunk

    @property
    def params(self) -> int:
        """Dense parameters held by one GPU of this stage (TP shard)."""
        return sum(r.params for chunk in self.chunks for r in chunk)

    @property
    def expert_params(self) -> int:
        """Expert parameters held by one GPU of this stage (EP and TP shard)."""
        return sum(r.expert_params for chunk in self.chunks for r in chunk)

    def rows(self):
        for chunk in self.chunks:
            yield from chunk


@dataclass
class ModelPlan:
    model: ModelSpec
    par: ParallelConfig
    dims: Dims
    stages: list[StagePlan]

    def iteration_flops(self) -> tuple[int, int]:
        """(model FLOPs, hardware FLOPs) of one iteration on all GPUs, summed from the
        per-operator accounting: per-GPU FLOPs × TP ranks × DP replicas × microbatches."""
        mult = self.par.tp * self.par.dp * self.par.cp * self.par.microbatches
        model = hw = 0
        for st in self.stages:
            for row in st.rows():
                for op in row.ops():
                    hw += op.flops
                    if not op.recompute:
                        model += op.flops
        return model * mult, hw * mult


def build_model_plan(model: ModelSpec, par: ParallelConfig) -> ModelPlan:
    """Validate ``par`` against ``model`` and lay out every stage's rows."""
    validate(model, par)
    if model.moe is not None and par.tp > 1 and not par.sp:
        raise UsageError("mixture-of-experts models with tp > 1 need --sequence-parallel "
                         "(Megatron-Core's MoE layers expect it)", field="sequence_parallel")
    dm = Dims.of(model, par)
    p, v, typ = par.pp, par.vpp, par.layout.schedule_type
    n_vs = typ.virtual_stage_count(p, v)  # DualPipe: p stages, each on two ranks
    counts = virtual_stage_layers(model.layers, p, n_vs // p, par.split)
    starts = [sum(counts[:i]) for i in range(n_vs)]
    stages = []
    for r in range(p):
        chunks: list[list[Row]] = []
        layer_ids: list[list[int]] = []
        for c in range(v):
            vs = typ.virtual_stage(p, r, c)
            ids = list(range(starts[vs], starts[vs] + counts[vs]))
            rows: list[Row] = []
            if vs == 0:
                rows += embedding_rows(model, dm)
            block = [r for i in ids for r in transformer_layer_rows(model, par, dm, i)]
            if par.dtype == "fp8":  # the chunk's TransformerBlock is one fp8_autocast region
                block = fp8.autocast_rows(block, par)
            rows += block
            if vs == n_vs - 1:
                # The last stage holds the output weight: its own (untied) or, when another
                # stage holds the input embedding (pp > 1, not the V placement or DualPipe,
                # where a rank holds both ends), a copy of the tied word embedding (Megatron);
                # else shared.
                holds = (not model.tied_embeddings) or all(
                    typ.virtual_stage(p, r, cc) != 0 for cc in range(v))
                rows += eager.apply(output_rows(model, dm, holds_output_weight=holds,
                                                loss_fusion=cross_entropy.variant(par)),
                                    par, dm)
            chunks.append(rows)
            layer_ids.append(ids)
        stages.append(StagePlan(r, chunks, layer_ids))
    return ModelPlan(model, par, dm, stages)

"""Model-driven workloads: model specs, FLOP/parameter/memory accounting, the roofline compute
model, the workload generator and importers of model descriptions (see docs/models.md).

Public API::

    load_model(path) -> ModelSpec
    ParallelConfig.derive(Layout(...), Training(...)) -> ParallelConfig(layout, training)
        (sim.parallel.layout.Layout + Training; microbatches from the global batch)
    generate(model, par, gpu, ...) -> PipelineProgram
    build_model_plan(model, par) -> ModelPlan  (operators per row, FLOP accounting)
    check_memory(model, par, gpu, ...) -> MemoryReport
    model_flops_per_iteration(model, global_batch) -> int
    achieved_throughput(model_flops, iteration_time_s, n_gpus, peak_tflops) -> (tflops, mfu)
"""

from sim.models.flops import (
    achieved_throughput,
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    total_params,
)
from sim.models.generator import generate
from sim.models.plan import ModelPlan, build_model_plan
from sim.models.vocab.spec import ModelSpec, MoESpec, load_model, model_from_dict
from sim.parallel.config import ParallelConfig, Training

__all__ = [
    "ModelPlan", "ModelSpec", "MoESpec", "ParallelConfig", "achieved_throughput",
    "build_model_plan", "generate", "hardware_flops_per_iteration", "load_model",
    "model_flops_per_iteration", "model_from_dict", "total_params", "Training",
]

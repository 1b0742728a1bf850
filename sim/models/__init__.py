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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# name -> the module defining it: imported on first use, so that a run that never generates a
# model (a workload file) does not pay for the generator, its features and tables
_HOME = {
    "achieved_throughput": "sim.models.flops", "hardware_flops_per_iteration": "sim.models.flops",
    "model_flops_per_iteration": "sim.models.flops", "total_params": "sim.models.flops",
    "generate": "sim.models.generator", "ModelPlan": "sim.models.plan",
    "build_model_plan": "sim.models.plan", "ModelSpec": "sim.models.vocab.spec",
    "MoESpec": "sim.models.vocab.spec", "load_model": "sim.models.vocab.spec",
    "model_from_dict": "sim.models.vocab.spec", "ParallelConfig": "sim.parallel.config",
    "Training": "sim.parallel.config",
}

__all__ = [
    "ModelPlan", "ModelSpec", "MoESpec", "ParallelConfig", "achieved_throughput",
    "build_model_plan", "generate", "hardware_flops_per_iteration", "load_model",
    "model_flops_per_iteration", "model_from_dict", "total_params", "Training",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'sim.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value

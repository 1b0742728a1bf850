"""Model-level metrics of one simulated iteration: FLOPs, MFU/HFU, tokens/s, memory.

Report keys of a model-driven run (units in the names); used by ``simrun --model``, sweeps and
validation.
"""

from __future__ import annotations

from typing import Any

from sim.models.flops import (
    achieved_throughput,
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    total_params,
)
from sim.models.memory import MemoryReport
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig
from sim.topology.gpu import GpuSpec


def metrics(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec, iteration_ns: int,
            memory: MemoryReport | None = None, path: str = "") -> dict[str, Any]:
    """Model-level metrics of one simulated iteration of ``iteration_ns`` ns: model and
    training setup, FLOPs per iteration, achieved TFLOP/s per GPU, MFU and HFU (fractions of
    the dtype's dense peak), tokens/s and (with ``memory``) the per-GPU memory in bytes."""
    it_s = iteration_ns * 1e-9
    mf = model_flops_per_iteration(model, par.global_batch)
    hf = hardware_flops_per_iteration(model, par.global_batch, par.recompute,
                                      par.fused_attention)
    peak = gpu.tflops("fp4" if par.fp4 else par.dtype)  # NVFP4: the GEMMs' fp4 peak
    tflops, mfu = achieved_throughput(mf, it_s, par.world_size, peak)
    _, hfu = achieved_throughput(hf, it_s, par.world_size, peak)
    out: dict[str, Any] = {
        "model": {"name": model.name, "file": path, "parameters": total_params(model),
                  "layers": model.layers, "hidden": model.hidden, "heads": model.heads,
                  "seq_len": model.seq_len, "vocab": model.vocab},
        "training": {"global_batch": par.global_batch, "micro_batch": par.micro_batch,
                     "dtype": par.dtype, "recompute": par.recompute,
                     "sequence_parallel": par.sp,
                     "distributed_optimizer": par.distributed_optimizer,
                     "flash_attention": par.flash_attention},
        "model_flops_per_iteration": mf,
        "hardware_flops_per_iteration": hf,
        "peak_tflops_per_gpu": peak,
        "tflops_per_gpu": tflops,
        "mfu": mfu,
        "hfu": hfu,
        "tokens_per_s": par.global_batch * model.seq_len / it_s,
    }
    if memory is not None:
        out["memory"] = memory_dict(memory)
    return out


def memory_dict(mem: MemoryReport) -> dict[str, Any]:
    """The memory report as JSON-ready dict (bytes per GPU)."""
    peak = mem.peak
    return {
        "capacity_bytes": mem.capacity_bytes,
        "feasible": mem.feasible,
        "reason": mem.reason,
        "peak_stage": peak.stage,
        "peak_bytes": peak.components(),
        "stages": [{"stage": st.stage, **st.components(),
                    "inflight_microbatches": st.inflight_microbatches} for st in mem.stages],
    }

"""``simrun --model M``: command-line options of model-driven runs and the program they build.

The layout flags (``--tp --pp --ep --vpp --schedule --microbatches --gpus
--microbatch-group-size``) are the main CLI's (:func:`sim.cli.add_layout_arguments`); this module
adds the model and training options and turns them into a :class:`ModelRun`: the validated
:class:`~sim.models.parallel.ParallelConfig`, the memory check, the generated program and the
report keys that need the simulated iteration time (MFU, tokens/s).

``DP`` defaults to ``GPUs / (TP·PP)`` with ``GPUs = --gpus`` or all GPUs of the topology
(``--nodes`` sizes it). ``--microbatches``, when given, must equal ``global_batch /
(micro_batch·DP)``; with it, ``--global-batch`` may be left out.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from sim.errors import UsageError
from sim.models.flops import (
    achieved_throughput,
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    total_params,
)
from sim.models.memory import MemoryReport, check_memory
from sim.models.parallel import DTYPES, RECOMPUTE, ParallelConfig, validate
from sim.models.spec import ModelSpec, load_model
from sim.topology.gpu import GpuSpec
from sim.workload.program import PipelineProgram


def _positive_int(text: str) -> int:
    from sim.cli import positive_int

    return positive_int(text)


def add_model_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Add ``--model``, ``--dp``, ``--micro-batch``, ``--global-batch`` and the training options
    (a "model-driven workload" group). ``required``: ``--model`` must be given."""
    g = parser.add_argument_group("model-driven workload (--model instead of --workload)")
    g.add_argument("--model", metavar="PATH|NAME", required=required,
                   help="model spec YAML, or the name of a shipped one ('simrun list models'): "
                        "generate the workload for the layout given by --tp/--pp/--dp/--vpp/--ep")
    g.add_argument("--dp", type=_positive_int, metavar="N",
                   help="data-parallel size (default: GPUs / (TP·PP), GPUs = --gpus or the "
                        "topology's)")
    g.add_argument("--micro-batch", type=_positive_int, default=1, metavar="B",
                   help="sequences per microbatch (default: %(default)s)")
    g.add_argument("--global-batch", type=_positive_int, metavar="B",
                   help="sequences per iteration; microbatches = global / (micro·DP) (required "
                        "unless --microbatches is given)")
    g.add_argument("--sequence-parallel", action="store_true",
                   help="Megatron sequence parallelism (ignored, and said so, when TP = 1)")
    g.add_argument("--recompute", choices=RECOMPUTE, default="none",
                   help="activation recomputation (default: %(default)s)")
    g.add_argument("--dtype", choices=DTYPES, default="bf16",
                   help="training dtype; its dense peak is the MFU reference (default: "
                        "%(default)s)")
    g.add_argument("--distributed-optimizer", action="store_true",
                   help="shard the optimizer state over DP (reduce-scatter gradients, all-gather "
                        "parameters)")
    g.add_argument("--flash-attention", action="store_true",
                   help="fused attention kernel (default: unfused, as in Megatron 2022)")
    g.add_argument("--no-overlap-grad-reduce", action="store_true",
                   help="one blocking DP gradient collective after the backward instead of "
                        "per-bucket overlap")
    g.add_argument("--ignore-memory", action="store_true",
                   help="simulate even when the layout does not fit in GPU memory")


@dataclass
class ModelRun:
    """A model-driven run: what the CLI simulates and the model-level report keys."""

    path: str
    model: ModelSpec
    par: ParallelConfig
    gpu: GpuSpec
    memory: MemoryReport
    program: PipelineProgram
    notes: list[str] = field(default_factory=list)

    @property
    def model_flops(self) -> int:
        return model_flops_per_iteration(self.model, self.par.global_batch)

    def report_extra(self, iteration_ns: int) -> dict[str, Any]:
        """Report keys of a model-driven run (units in the names): model and training setup,
        FLOPs per iteration, achieved TFLOP/s per GPU, MFU and HFU (fractions of the dtype's
        dense peak), tokens/s and the per-GPU memory breakdown in bytes."""
        return metrics(self.model, self.par, self.gpu, iteration_ns, self.memory, self.path)

    def assumptions(self) -> list[str]:
        return list(self.notes) + [f"memory per GPU: {self.memory.reason}"] + list(
            self.memory.assumptions)


def metrics(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec, iteration_ns: int,
            memory: MemoryReport | None = None, path: str = "") -> dict[str, Any]:
    """Model-level metrics of one simulated iteration (see :meth:`ModelRun.report_extra`)."""
    it_s = iteration_ns * 1e-9
    mf = model_flops_per_iteration(model, par.global_batch)
    hf = hardware_flops_per_iteration(model, par.global_batch, par.recompute,
                                      par.fused_attention)
    peak = gpu.tflops(par.dtype)
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


def parallel_config_from_args(args: argparse.Namespace, model: ModelSpec, num_gpus: int
                              ) -> ParallelConfig:
    """The :class:`ParallelConfig` the flags ask for on a cluster of ``num_gpus`` GPUs; raises
    :class:`UsageError` naming the flag for inconsistent or invalid choices."""
    if getattr(args, "pp_comm_bytes", None) is not None:
        raise UsageError("applies to workload files; with --model the pipeline message is "
                         "derived from the model", field="--pp-comm-bytes")
    if getattr(args, "row_placement", "megatron") != "megatron":
        raise UsageError("applies to workload files; generated workloads place rows as "
                         "Megatron does", field="--row-placement")
    tp, pp = args.tp or 1, args.pp or 1
    gpus = args.gpus or num_gpus
    if args.dp is None:
        if gpus % (tp * pp):
            raise UsageError(f"{gpus} GPUs are not a multiple of TP·PP = {tp}·{pp}; give --dp "
                             "or --gpus", field="--dp")
        dp = gpus // (tp * pp)
    else:
        dp = args.dp
        if args.gpus and tp * pp * dp != args.gpus:
            raise UsageError(f"TP·PP·DP = {tp}·{pp}·{dp} = {tp * pp * dp} but --gpus is "
                             f"{args.gpus}", field="--dp")
    b = args.micro_batch
    gb = args.global_batch
    if gb is None:
        if not args.microbatches:
            raise UsageError("required with --model (or give --microbatches)",
                             field="--global-batch")
        gb = args.microbatches * b * dp
    elif args.microbatches and args.microbatches * b * dp != gb:
        raise UsageError(f"{args.microbatches} microbatches × micro batch {b} × DP {dp} = "
                         f"{args.microbatches * b * dp} sequences, but --global-batch is {gb}",
                         field="--microbatches")
    par = ParallelConfig(
        tp=tp, pp=pp, dp=dp, vpp=args.vpp or 1, ep=args.ep or 1, micro_batch=b,
        global_batch=gb, sequence_parallel=args.sequence_parallel, recompute=args.recompute,
        dtype=args.dtype, distributed_optimizer=args.distributed_optimizer,
        schedule=args.schedule, microbatch_group_size=args.microbatch_group_size,
        flash_attention=getattr(args, "flash_attention", False),
        overlap_grad_reduce=not getattr(args, "no_overlap_grad_reduce", False))
    validate(model, par)
    return par


def model_run_from_args(args: argparse.Namespace, topology) -> ModelRun:
    """Load ``--model``, build the layout on ``topology`` (a :class:`~sim.topology.Topology`),
    check memory and generate the program. A layout that does not fit in GPU memory raises
    :class:`UsageError` with the reason (unless ``--ignore-memory``)."""
    from sim.models.generator import generate
    from sim.models.plan import build_model_plan

    model = load_model(args.model)
    par = parallel_config_from_args(args, model, topology.num_gpus)
    if par.world_size > topology.num_gpus:
        raise UsageError(
            f"the layout needs {par.world_size} GPUs (TP {par.tp} x PP {par.pp} x DP {par.dp}) "
            f"but {topology.path} has {topology.num_gpus} ({topology.num_nodes} nodes x "
            f"{topology.gpus_per_node}); use --nodes", field="--dp")
    gpu = topology.gpu
    if par.dtype not in gpu.peak_tflops:
        raise UsageError(f"GPU {gpu.name} has no {par.dtype} peak", field="--dtype")
    plan = build_model_plan(model, par)
    mem = check_memory(model, par, gpu, plan=plan)
    notes = []
    if not mem.feasible:
        if not getattr(args, "ignore_memory", False):
            from sim.models.memory_advice import memory_advice

            advice = memory_advice(model, par, gpu, mem.peak.total_bytes)
            raise UsageError(f"layout does not fit in GPU memory: {mem.reason}; {advice} "
                             "(--ignore-memory simulates it anyway)", field="--model")
        notes.append("WARNING: simulated although the layout does not fit in GPU memory "
                     "(--ignore-memory)")
    program = generate(model, par, gpu, plan=plan, source=f"model {model.name} ({args.model})")
    return ModelRun(args.model, model, par, gpu, mem, program, notes)

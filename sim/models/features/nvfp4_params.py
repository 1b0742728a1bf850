"""Megatron-Core's ``--fp4-param-gather`` (``fp4_param``; Megatron-Bridge's
``bf16_with_nvfp4_mixed`` sets it): the TE linears' weights kept as NVFP4 parameters,
quantised after the optimizer step and all-gathered in FP4.

The same parameters and buffers as ``--fp8-param-gather`` (:mod:`sim.models.features.fp8_params`:
the transformer layers' TE linears, built under TE's quantized-model-init; counted in the rows'
``fp8_params``). Read in NVIDIA/TransformerEngine at d0067d0da6cb01811b8072a7d304f0e00344ce2b,
``transformer_engine/pytorch/tensor/utils.py``:

* **after the optimizer step** (``quantize_master_weights`` →
  ``_cast_master_weights_to_nvfp4_2d``): each rank's master shard of every FP4 weight, as
  for FP8 copied to bf16 with the Adam step, is read once by
  ``nvfp4_multi_tensor_compute_partial_amax`` (2 B/element: the amax of every 16 × 16 tile
  and of the tensor); two blocking MAX all-reduces in the data-parallel group follow — the
  tile amaxes of the whole weights (one fp32 per 16 × 16 tile: 4 / 256 B per parameter, so
  every rank can set every tile's E4M3 scale) and one fp32 global amax per weight; then the
  partial cast writes the shard's FP4 data (read 2, write 0.5 B per element).
* **the all-gather** carries the FP4 data only, 0.5 B per FP4 parameter (the scales are
  computed on every rank from the all-reduced tile amaxes); the other parameters 2 B.
* **after the all-gather** (``post_all_gather_processing`` → ``_nvfp4_2d_multi_tensor_transpose``):
  the column-wise copy of each gathered weight from its row-wise data and scales (read and
  write 0.5 + 1/16 B per parameter; with 2D scaling both copies hold the same values), where
  the forward pre-hook waits for the bucket (``--overlap-param-gather``) or right after the
  blocking all-gather in the optimizer step.
"""

from __future__ import annotations

import sys

from sim.comm import CollKind, Comm, GroupKind
from sim.models.features import fp8_params, mxfp8, nvfp4
from sim.models.vocab.ops import Op, elementwise
from sim.program.pipeline import Task, TaskKind

#: bytes per element in sixteenths: the shard's tile-amax pass (2 B read) and its partial cast
#: (2 B read, 0.5 B written)
PARTIAL_AMAX, PARTIAL_CAST = 32, 40
#: fp32 tile amaxes all-reduced: one per 16 × 16 = 256 parameters
TILE, AMAX_BYTES = 256, 4


def check_precision(par, gpu_name: str, family: str, peaks: dict) -> None:
    """The GPU refusals of ``par``'s low-precision GEMMs: MXFP8 and NVFP4 need data-center
    Blackwell (:func:`sim.models.features.mxfp8.check_gpu`,
    :func:`sim.models.features.nvfp4.check_gpu`)."""
    if par.dtype == "fp8":
        mxfp8.check_gpu(par.fp8_recipe, gpu_name, family)
    if par.fp4:
        nvfp4.check_gpu(gpu_name, family, peaks)


def quantized_weights(par):
    """The module of ``par``'s low-precision parameters: this one with ``--fp4-format``,
    else :mod:`sim.models.features.fp8_params`."""
    return sys.modules[__name__] if par.fp4 else fp8_params


def gather_bytes(params: int, fp4_params: int) -> int:
    """Bytes of the parameter all-gather of ``params`` parameters, ``fp4_params`` of them FP4
    (0.5 B each, rounded up), the others bf16 (2 B)."""
    return (fp4_params + 1) // 2 + 2 * (params - fp4_params)


def quantize_ops(shard: int) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """``(before the amax all-reduces, after them)``: the partial amax pass and the partial
    cast of a rank's ``shard`` elements."""
    if not shard:
        return (), ()
    return ((elementwise("nvfp4_param_partial_amax", PARTIAL_AMAX * shard // 16,
                         "nvfp4_param_amax", (1, shard)),),
            (elementwise("nvfp4_param_partial_cast", PARTIAL_CAST * shard // 16,
                         "nvfp4_param_cast", (1, shard)),))


def amax_reductions(params: int, tensors: int, group: GroupKind, size: int) -> list[Comm]:
    """The two blocking MAX all-reduces of ``tensors`` FP4 weights of ``params`` parameters in
    ``group`` (``size`` ranks): their tile amaxes and their global amaxes."""
    if not params or size == 1:
        return []
    return [Comm(CollKind.ALLREDUCE, group, -(-params // TILE) * AMAX_BYTES, blocking=True),
            Comm(CollKind.ALLREDUCE, group, tensors * AMAX_BYTES, blocking=True)]


def optimizer_tasks(rows: list, par, ops_ns) -> tuple[Task, ...]:
    """The epilogue tasks quantising one stage's FP4 weights after the optimizer step."""
    dense = sum(r.fp8_params for r in rows)
    if not dense:
        return ()
    before, after = quantize_ops(-(-dense // par.dp_cp))
    comms = amax_reductions(dense, sum(1 for r in rows if r.fp8_params), GroupKind.DP,
                            par.dp_cp)
    tasks = [Task(before[0].name, TaskKind.OPTIMIZER, compute_ns=ops_ns(before),
                  comm=comms[0] if comms else None)]
    tasks += [Task("nvfp4_param_global_amax_reduction", TaskKind.GRAD_SYNC, comm=c)
              for c in comms[1:]]
    tasks.append(Task(after[0].name, TaskKind.OPTIMIZER, compute_ns=ops_ns(after)))
    return tuple(tasks)


def transpose_task(rows: list, ops_ns) -> tuple[Task, ...]:
    """Without ``--overlap-param-gather``: the column-wise copies of the stage's gathered FP4
    weights right after the blocking all-gather."""
    n = sum(r.fp8_params for r in rows)
    if not n:
        return ()
    return (Task("nvfp4_param_transpose", TaskKind.COMPUTE,
                 compute_ns=ops_ns((nvfp4.transpose_op("nvfp4_param", n),))),)


def describe(par) -> str:
    """The assumption line of a run with ``--fp4-param-gather``."""
    where = ("in the first microbatch's forward, where the forward pre-hook waits for the "
             "bucket (--overlap-param-gather)" if par.overlap_param_gather else
             "right after the blocking all-gather in the optimizer step")
    return ("--fp4-param-gather (Megatron-Core fp4_param): the TE linears' weights (qkv, proj, "
            "fc1, fc2) are NVFP4 parameters, all-gathered at 0.5 B per parameter (scales "
            "computed on every rank; norms, biases, embedding and output layer stay bf16, "
            "2 B); no weight quantisation in the first microbatch's forward; after the "
            "optimizer step each rank reads its master shard of them once for the 16x16-tile "
            "amaxes (2 B/element), all-reduces in DP the tile amaxes of the whole weights "
            "(4 B per 256 parameters) and one fp32 global amax per weight (blocking), then "
            "writes its FP4 shard (2 B read, 0.5 B written); after the all-gather TE's "
            "multi-tensor transpose makes the column-wise copy (1.125 B/parameter) " + where)

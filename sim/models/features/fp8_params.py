"""Megatron-Core's ``--fp8-param-gather``: FP8 weights kept by the TE linears, quantised once
after the optimizer step and all-gathered in FP8.

Read in NVIDIA/Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553 and
NVIDIA/TransformerEngine at d0067d0da6cb01811b8072a7d304f0e00344ce2b:

* **which parameters**: ``TransformerBlock`` builds its layers inside ``get_fp8_context(...,
  is_init=True)`` (``megatron/core/transformer/transformer_block.py``; ``fp8_utils.py``:
  TE's ``fp8_model_init`` when ``config.fp8_param``, which ``--fp8-param-gather`` sets,
  ``megatron/training/argument_utils.py``), so the GEMM weights of the TE modules in the
  transformer layers — the TE linears ``linear_qkv``, ``linear_proj``, ``linear_fc1``,
  ``linear_fc2`` and the routed experts' ``GroupedLinear`` — are ``Float8Tensor`` parameters
  (1 byte per element). Norm weights, biases, the router, the word embedding and the output
  layer (``tensor_parallel.ColumnParallelLinear``, built outside the block) stay bf16.
* **the all-gather**: the distributed optimizer's parameter buffer holds the FP8 weights in
  a ``uint8`` buffer of their own (``param_and_grad_buffer.py``); ``partition_buckets`` merges
  the bf16 buckets into the last FP8 bucket group, so the gathers carry 1 byte per FP8
  parameter and 2 per other parameter.
* **after the optimizer step** (``distrib_optimizer.py`` ``_copy_main_params_to_model_params``
  → ``fp8_utils.quantize_param_shard`` → TE ``tensor/utils.py`` ``quantize_master_weights``):
  each rank's fp32 master shard of every FP8 weight is copied to bf16 (``.to(model_weight.
  dtype)``: the same 4 + 2 bytes per element as the bf16 copy Megatron makes of the other
  parameters, timed with the Adam step as before), then cast to FP8 in place in the parameter
  buffer (read 2, write 1 byte per element). Delayed scaling: the cast records each weight's
  amax (``_cast_master_weights_to_fp8_delayed_scaling``); current scaling (``tensorwise``):
  ``tex.compute_amax`` reads the shard first (2 bytes per element) and the cast follows the
  reduction (``_cast_master_weights_to_fp8_current_scaling``). Both then all-reduce (MAX,
  blocking) one fp32 amax per FP8 weight tensor in the optimizer's data-parallel group and
  update the scales (tiny multi-tensor kernels, not timed).
* **after the all-gather**: ``_post_param_sync`` → ``post_all_gather_processing`` → TE
  ``Float8Tensor._create_transpose()`` on Hopper (no non-TN FP8 GEMM): one FP8 transpose of
  each gathered weight (read 1, write 1 byte per element of the TP-local weight). With
  ``--overlap-param-gather`` it runs where the forward pre-hook waits for the bucket (the
  first microbatch's forward); without, right after the blocking all-gather in the optimizer
  step (``DistributedDataParallel._start_bucket_group_param_sync``).
* **what it replaces**: Transformer Engine's once-per-iteration weight cast(+transpose) of a
  bf16 weight in the first microbatch's forward (:func:`sim.models.features.fp8.weight_casts`):
  with an FP8 weight ``_Linear.forward`` uses the tensor as it is.

Preconditions (``megatron/training/arguments.py``): ``--fp8-param-gather`` needs the
distributed optimizer, torch FSDP2 or Megatron-FSDP; ``fp8_param`` needs FP8
(``transformer_config.py``). simrun models it with the distributed optimizer; FSDP's FP8
all-gathers (Megatron-FSDP) are not modelled and refused.
"""

from __future__ import annotations

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import UsageError
from sim.models.features.fp8 import kernel
from sim.models.vocab.ops import Op, OpKind
from sim.program.pipeline import Task, TaskKind

FLAG = "--fp8-param-gather"
OPTION = "fp8_param_gather"  # errors name the option (the CLI, its flag)
#: bytes per element of an FP8 parameter in the parameter all-gather (bf16: 2)
FP8_PARAM_BYTES = 1
#: bytes of one FP8 weight's amax in the post-step reduction (fp32)
AMAX_BYTES = 4


def check(par) -> None:
    """Refuse ``--fp8-param-gather`` where Megatron cannot run it or simrun does not model it
    (``par``: a :class:`~sim.parallel.config.ParallelConfig`)."""
    if not par.fp8_param_gather:
        return
    if par.dtype != "fp8":
        raise UsageError(f"applies to --dtype fp8 runs (a {par.dtype} run has no FP8 "
                         "weights; Megatron-Core: fp8_param must be used with fp8)", field=OPTION)
    if par.fsdp or par.zero >= 1:
        raise UsageError("FP8 parameters with FSDP / ZeRO (Megatron-FSDP's FP8 all-gathers) "
                         "are not modelled; use it with --distributed-optimizer", field=OPTION)
    if not par.distributed_optimizer:
        raise UsageError("needs --distributed-optimizer (Megatron-LM: only supported with the "
                         "distributed optimizer, torch FSDP2 or Megatron-FSDP)", field=OPTION)


def gather_bytes(params: int, fp8_params: int) -> int:
    """Bytes of the parameter all-gather of ``params`` parameters, ``fp8_params`` of them FP8:
    1 byte per FP8 parameter, 2 per other (bf16) parameter."""
    return FP8_PARAM_BYTES * fp8_params + 2 * (params - fp8_params)


def quantize_ops(shard: int, recipe: str) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """The quantisation of a rank's ``shard`` master-weight elements of FP8 weights after the
    optimizer step: ``(before the amax reduction, after it)`` — delayed: the cast, then the
    reduction; tensorwise: the amax pass, the reduction, then the cast."""
    if not shard:
        return (), ()
    cast = (kernel("fp8_param_cast", "fp8_cast", 1, shard),)
    if recipe == "tensorwise":
        return (kernel("fp8_param_amax", "fp8_amax", 1, shard),), cast
    return cast, ()


def amax_reduction(tensors: int, group: GroupKind, size: int) -> Comm | None:
    """The blocking MAX all-reduce of ``tensors`` FP8 weights' fp32 amaxes in the optimizer's
    data-parallel ``group`` of ``size`` ranks (``None`` for one rank or no FP8 weight)."""
    if tensors == 0 or size == 1:
        return None
    return Comm(CollKind.ALLREDUCE, group, tensors * AMAX_BYTES, blocking=True)


def shard(params: int, size: int) -> int:
    """A rank's share of ``params`` parameters under the distributed optimizer (``size``
    ranks; rounded up)."""
    return -(-params // size)


def describe(par) -> str:
    """The assumption line of a run with ``--fp8-param-gather``."""
    where = ("in the first microbatch's forward, where the forward pre-hook waits for the "
             "bucket (--overlap-param-gather)" if par.overlap_param_gather else
             "right after the blocking all-gather in the optimizer step")
    amax = ("an amax pass (2 B/element), the DP amax all-reduce, then the cast"
            if par.fp8_recipe == "tensorwise" else
            "the cast (recording the amax), then the DP amax all-reduce")
    return (f"{FLAG} (Megatron-Core fp8_param, TE fp8_model_init): the TE linears' weights "
            "(qkv, proj, fc1, fc2, routed experts) are FP8 parameters, all-gathered at 1 byte "
            "per parameter (norms, biases, router, embedding and output layer stay bf16, 2 "
            "bytes); no weight cast in the first microbatch's forward; after the optimizer "
            "step each rank quantises its master shard of those weights: " + amax + " (one "
            "fp32 per FP8 weight, blocking; dense in DP, experts in DP_EP), the fp32→bf16 "
            "copy timed with the Adam step as for bf16 weights; after the all-gather one FP8 "
            f"transpose per weight (2 B/parameter, TE's post_all_gather_processing on "
            f"Hopper) {where}; the bucket boundaries stay simrun's (Megatron keeps FP8 and "
            "bf16 parameters in separate buffers and merges the bf16 buckets into the last "
            "FP8 bucket group)")


def _tensors(rows) -> tuple[int, int]:
    """FP8 weight tensors among ``rows``: (dense, expert) — one per TE linear, one per local
    expert of a grouped linear (its GEMM's ``count``)."""
    dense = sum(1 for r in rows if r.fp8_params)
    expert = sum(next((op.count for op in r.fwd if op.kind is OpKind.GEMM), 1)
                 for r in rows if r.fp8_expert_params)
    return dense, expert


def optimizer_tasks(rows: list, par, ops_ns) -> tuple[Task, ...]:
    """The epilogue tasks that quantise the FP8 weights among ``rows`` (one stage's rows)
    after the optimizer step (see the module docstring): the shard kernels timed by
    ``ops_ns(ops)`` around the blocking amax all-reduces (dense in DP, experts in DP_EP)."""
    dense = sum(r.fp8_params for r in rows)
    expert = sum(r.fp8_expert_params for r in rows)
    if not (dense or expert):
        return ()
    elements = shard(dense, par.dp_cp) + shard(expert, par.edp)
    before, after = quantize_ops(elements, par.fp8_recipe)
    n_dense, n_expert = _tensors(rows)
    comms = [c for c in (amax_reduction(n_dense, GroupKind.DP, par.dp_cp),
                         amax_reduction(n_expert, GroupKind.DP_EP, par.edp)) if c is not None]
    tasks = [Task(before[0].name, TaskKind.OPTIMIZER, compute_ns=ops_ns(before),
                  comm=comms[0] if comms else None)]
    tasks += [Task("fp8_param_amax_reduction_experts", TaskKind.GRAD_SYNC, comm=c)
              for c in comms[1:]]
    if after:
        tasks.append(Task(after[0].name, TaskKind.OPTIMIZER, compute_ns=ops_ns(after)))
    return tuple(tasks)


def transpose_task(rows: list, ops_ns) -> tuple[Task, ...]:
    """Without ``--overlap-param-gather``: the FP8 transposes of all the stage's gathered FP8
    weights right after the blocking all-gather (2 bytes per parameter)."""
    n = sum(r.fp8_params + r.fp8_expert_params for r in rows)
    if not n:
        return ()
    return (Task("fp8_param_transpose", TaskKind.COMPUTE,
                 compute_ns=ops_ns((kernel("fp8_param_transpose", "fp8_transpose", 1, n),))),)

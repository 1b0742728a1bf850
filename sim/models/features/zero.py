"""ZeRO (DeepSpeed) and FSDP (PyTorch) data parallelism: what each stage shards and sends.

Semantics (Rajbhandari et al., "ZeRO", SC'20 §5; DeepSpeed ``zero_optimization.stage``;
PyTorch FSDP ``ShardingStrategy``), over the DP×CP ranks, with 16-bit parameters and
gradients and 12 bytes of fp32 optimizer state per parameter (the paper's 2 + 2 + 12):

- stage 1: optimizer state sharded. Gradients reduce-scattered (bucketed, overlapped with the
  last microbatch's backward, as DeepSpeed reduces only at the gradient-accumulation
  boundary), the owner steps its shard, the updated parameters are all-gathered.
- stage 2 (FSDP ``SHARD_GRAD_OP``): gradients sharded too. Their reduce-scatter runs in
  **every** microbatch's backward (DeepSpeed reduces each micro-step into the partition).
- stage 3 (``--fsdp``: FSDP ``FULL_SHARD``): parameters sharded too. Each unit (a transformer
  layer; the embedding rows; the output rows) is all-gathered before its forward and again
  before its backward, one unit ahead (prefetch: issued when the previous unit starts, waited
  for before the unit runs); its gradients are reduce-scattered right after its backward, in
  every microbatch; no parameter all-gather after the optimizer step.

All-gathers use a stream of their own (DeepSpeed and FSDP run them on a separate CUDA stream),
the reduce-scatters the gradient stream. Memory: :func:`zero_state_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.comm import CollKind, Comm, GroupKind
from sim.models.features import fsdp2
from sim.models.vocab.ops import Op
from sim.models.vocab.rows import Row
from sim.parallel.config import ParallelConfig
from sim.program.workload import NO_PHASE, Layer, Phase

BYTES_16 = 2  # 16-bit parameters and gradients (ZeRO's mixed-precision accounting)
OPT_BYTES = 12  # fp32 master weights, momentum and variance


def units(rows: list[Row]) -> list[tuple[int, int, int]]:
    """(first row, end row, parameters) of each ZeRO-3 unit of a chunk: maximal runs of rows
    of one transformer layer, or of non-layer rows (embedding / output)."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i].tags.get("layer") != rows[start].tags.get("layer"):
            params = sum(r.params + r.expert_params for r in rows[start:i])
            out.append((start, i, params))
            start = i
    return out


def _gather(params: int, group_size: int) -> Comm | None:
    if params == 0 or group_size == 1:
        return None
    return Comm(CollKind.ALLGATHER, GroupKind.DP, params * BYTES_16, blocking=False,
                prefetch=True)


def zero3_layers(layers: list[Layer], rows: list[Row], par: ParallelConfig,
                 time_ops: Callable[[tuple[Op, ...]], int] | None = None) -> list[Layer]:
    """``layers`` (timed from ``rows``) with ZeRO-3's per-unit parameter all-gathers (forward
    and backward, one unit ahead) and gradient reduce-scatters (see the module docstring);
    with ``--use-torch-fsdp2`` also FSDP2's copies (:mod:`sim.models.features.fsdp2`), timed by
    ``time_ops`` (ns of a sequence of operators)."""
    n = par.dp_cp
    us = [u for u in units(rows) if u[2]]
    if not us:
        return layers
    ag = [_gather(p, n) for _, _, p in us]
    wait = GroupKind.DP if n > 1 else None
    fs2 = par.use_torch_fsdp2 and n > 1 and time_ops is not None

    def t(ops: tuple[Op, ...]) -> int:
        return time_ops(ops) if fs2 else 0

    out = [Layer("zero3_prefetch", forward=Phase(0, ag[0]))]
    cursor = 0
    for j, (a, b, params) in enumerate(us):
        name = f"layer{rows[a].tags['layer']}" if "layer" in rows[a].tags else rows[a].name
        out.extend(layers[cursor:a])
        rs = Comm(CollKind.REDUCESCATTER, GroupKind.DP,
                  params * (fsdp2.REDUCE_BYTES if fs2 else BYTES_16), blocking=False,
                  per_microbatch=True) if n > 1 else None
        copy_out = t(fsdp2.copy_out(params))
        out.append(Layer(f"{name}_zero3_gather",
                         forward=Phase(copy_out, ag[j + 1] if j + 1 < len(us) else None, wait),
                         weight_grad=Phase(t(fsdp2.reduce_scatter_copy_in(params)), rs)))
        out.extend(layers[a:b])
        out.append(Layer(f"{name}_zero3_gather_bwd", forward=NO_PHASE,
                         input_grad=Phase(copy_out, ag[j - 1] if j > 0 else None, wait)))
        cursor = b
    out.extend(layers[cursor:])
    out.append(Layer("zero3_prefetch_bwd", input_grad=Phase(0, ag[-1])))
    return out


def zero_state_bytes(par: ParallelConfig, params: int, largest_unit: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state) bytes per GPU under ``par.zero`` for ``params``
    parameters on this GPU; stage 3 also holds the full parameters of two units (the one
    running and the one prefetched), ``largest_unit`` parameters each."""
    n = par.dp_cp
    shard = -(-params // n)
    weights = BYTES_16 * (shard + 2 * largest_unit if par.zero >= 3 else params)
    grads = BYTES_16 * (shard if par.zero >= 2 else params)
    return weights, grads, OPT_BYTES * shard

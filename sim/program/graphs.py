"""Which kernels a CUDA graph replays (Megatron-Core ``--cuda-graph-impl`` /
``--cuda-graph-scope``), for the host-dispatch model (:mod:`sim.engine.host`).

A captured region's kernels are issued by one graph launch; the host issues every other kernel
one by one. :class:`GraphCapture` labels each step of the engine with the region it belongs to
(``None``: issued eagerly). Consecutive kernels of one region, one pass direction (forward or
backward), one microbatch and one model chunk are one graph replay (:meth:`GraphCapture.key`).

Granularity, as Megatron-Core captures (NVIDIA/Megatron-LM 54f90af0, megatron/core/transformer/
transformer_layer.py ``create_mcore_cudagraph_manager``; Transformer Engine's
``make_graphed_callables`` graphs each callable's forward and backward per microbatch):

- ``layer`` (the empty scope): each transformer layer's forward and its backward, per
  microbatch: rows ``layer<i>_*`` (their TP/CP/EP collectives inside; the embedding, final
  norm, output layer and loss run eagerly, as do the gradient-bucket reductions);
- ``attn`` / ``mlp``: ``TransformerLayer._forward_attention`` (rows ``layer<i>_attn_*``) /
  ``_forward_mlp`` of a dense layer (rows ``layer<i>_mlp_*``), each its own graph;
- ``iteration`` (``full_iteration``): Megatron-Core's ``FullCudaGraphWrapper`` captures the
  whole ``forward_backward_func`` of the step (every microbatch, every collective in it) as one
  graph: one launch per iteration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.comm import GroupKind

#: groups whose collectives a per-layer graph leaves out (gradient buckets, parameter
#: all-gathers, the embedding group's all-reduce, pipeline transfers: issued outside the layer)
_OUTSIDE = frozenset({GroupKind.DP, GroupKind.DP_EP, GroupKind.EMB, GroupKind.PP})
_ROW = re.compile(r"(?:recompute_)?layer(\d+)_(.+)")
#: the engine's region kinds (simrun's words for Megatron's scopes: "layer" = the empty scope)
REGIONS = ("layer", "attn", "mlp", "iteration")


@dataclass(frozen=True)
class GraphCapture:
    """The captured regions: a non-empty subset of :data:`REGIONS` (``iteration`` alone)."""

    regions: frozenset[str]

    def label(self, layer: str, group: GroupKind | None) -> str | None:
        """The region of a step of row ``layer`` (``group``: its collective's, ``None`` for
        compute); ``None``: issued eagerly."""
        if "iteration" in self.regions:
            return "iteration"
        m = _ROW.fullmatch(layer)
        if m is None or group in _OUTSIDE or m.group(2).endswith("_grad_bucket"):
            return None
        if "layer" in self.regions:
            return f"layer{m.group(1)}"
        block = m.group(2).split("_", 1)[0]
        return f"layer{m.group(1)}_{block}" if block in self.regions else None

    def key(self, label: str, backward: bool, mb: int, chunk: int) -> tuple:
        """One graph replay: the whole iteration, or one region's pass of one microbatch."""
        return (label,) if label == "iteration" else (label, backward, mb, chunk)

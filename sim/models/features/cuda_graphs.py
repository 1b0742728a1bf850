"""Megatron-Core's CUDA graphs (``--cuda-graph-impl``, ``--cuda-graph-scope``): the framework's
refusals, the captured regions and the report line.

Source: NVIDIA/Megatron-LM at commit 54f90af0 (2026-05-17, the last before the scope was split
into ``cuda_graph_modules``; Megatron-Bridge 25.11 / 26.02 configs still write
``cuda_graph_scope``): ``megatron/core/transformer/transformer_config.py`` (``cuda_graph_impl``
``none | local | transformer_engine``, ``cuda_graph_scope``, ``__post_init__`` checks),
``megatron/core/transformer/enums.py`` (``CudaGraphScope``: ``full_iteration attn mlp moe
moe_router moe_preprocess mamba full_iteration_inference``), ``megatron/training/arguments.py``
(``--cuda-graph-scope`` help: "If not specified, the default scope is to capture the whole
Transformer layer"; ``full`` is the deprecated name of that empty scope; ``--enable-cuda-graph``
is the deprecated ``--cuda-graph-impl local``, ``--external-cuda-graph`` the deprecated
``transformer_engine``).

Effect: host side only (:mod:`sim.program.graphs`, :mod:`sim.engine.host`): a graph replays
the same kernels, so GPU times are unchanged; the host issues one launch per graph replay
instead of one per kernel. With ``--host-dispatch-us 0`` (the default) launches cost nothing,
so the option changes nothing (the report line says so). Not modelled: the graphs' static
input/output buffers and private memory pool (Megatron documents no figure), the warm-up
iterations (``cuda_graph_warmup_steps``) and capture time, which are outside the steady step.
"""

from __future__ import annotations

from sim.assumption import Assumption
from sim.errors import UsageError
from sim.program.graphs import GraphCapture

IMPLS = ("none", "local", "transformer_engine")
#: Megatron-Core's ``CudaGraphScope`` names (enums.py at 54f90af0)
SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba",
          "full_iteration_inference")
_F = "cuda_graph_scope"


def scopes(text: str) -> list[str]:
    """Megatron-Core's normalisation of a ``cuda_graph_scope`` string (comma-separated, as
    ``TransformerConfig`` splits it): ``full`` (deprecated) or empty → ``[]`` (whole layer)."""
    out = [s.strip() for s in text.split(",") if s.strip()]
    if "full" in out:
        if out != ["full"]:
            raise UsageError("full scope cannot be used with other scopes. (Megatron-Core)",
                             field=_F)
        return []
    for s in out:
        if s not in SCOPES:
            raise UsageError(f"unknown scope {s!r} (Megatron-Core's CudaGraphScope: "
                             f"{', '.join(SCOPES)}; 'full' or empty: the whole layer)", field=_F)
    return out


def parse_scope(text: str) -> str:
    """The ``--cuda-graph-scope`` value, checked (:func:`scopes`)."""
    scopes(text)
    return text


def check(model, par) -> None:
    """Megatron-Core's refusals (transformer_config.py ``__post_init__`` at 54f90af0, messages
    quoted), then what simrun does not model; :class:`UsageError` naming the option."""
    impl, given = par.cuda_graph_impl, par.cuda_graph_scope
    if impl not in IMPLS:
        raise UsageError(f"Invalid cuda graph implementation: {impl} (known: "
                         f"{', '.join(IMPLS)})", field="cuda_graph_impl")
    sc = scopes(given)
    if impl == "none":
        return
    moe = model.moe is not None

    def no(msg: str, field: str = _F) -> None:
        raise UsageError(msg, field=field)

    if impl == "local" and ("moe_router" in sc or "moe_preprocess" in sc):
        sc = list(dict.fromkeys([*sc, "moe_router", "moe_preprocess"]))  # local: both
    if impl == "transformer_engine" and "full_iteration" in sc:
        no("To use full iteration cuda graph, please use cuda_graph_impl=local instead of "
           "cuda_graph_impl=transformer_engine. (Megatron-Core)")
    if "moe" in sc and "moe_router" in sc:
        no("cuda_graph_scope must not contain both moe and moe_router. (Megatron-Core)")
    if "moe_preprocess" in sc and "moe_router" not in sc:
        no("moe_preprocess cuda graph is only supported with moe_router cuda graph. "
           "(Megatron-Core)")
    if not moe and ("moe" in sc or "moe_router" in sc):
        no("moe cuda graph is only supported for MoE. (Megatron-Core)")
    if moe and "mlp" in sc and not model.moe.dense_layers:
        no("mlp cuda graph is only supported for dense layers, but not found in the model. "
           "(Megatron-Core)")
    if moe and "moe" in sc:  # simrun has no --moe-pad-expert-input-to-capacity
        no("moe cuda graph is only supported with drop-padding MoE. (Megatron-Core; simrun "
           "does not model moe_pad_expert_input_to_capacity)")
    if (moe and "moe_preprocess" in sc and par.moe_token_dispatcher == "alltoall"
            and par.moe_capacity_factor is not None):
        no("moe_preprocess cuda graph is not supported when there are DtoH copies and "
           "synchronizations in the preprocess step. (Megatron-Core)")
    if par.recompute == "full" and sc != ["full_iteration"]:
        no("full recompute is only supported with full iteration CUDA graph. (Megatron-Core)")
    if par.overlap_moe_expert_parallel_comm and (
            impl != "transformer_engine" or "moe" in sc or "mlp" in sc):
        no("CUDA graph scope on moe and mlp is not supported with "
           "overlap_moe_expert_parallel_comm (Megatron-Core: it needs cuda_graph_impl "
           "transformer_engine)", "cuda_graph_impl")
    _check_modelled(moe, sc)


def _check_modelled(moe: bool, sc: list[str]) -> None:
    """What simrun refuses to model among the scopes Megatron-Core accepts."""

    def no(msg: str) -> None:
        raise UsageError(msg, field=_F)

    if "full_iteration_inference" in sc:
        no("full_iteration_inference captures an inference iteration; simrun simulates "
           "training")
    if "mamba" in sc:
        no("simrun's models have no Mamba layers: the mamba scope captures nothing here")
    if "full_iteration" in sc and len(sc) > 1:
        no("full_iteration with other scopes is not modelled (the whole step is one graph)")
    if moe and (not sc or any(s != "attn" for s in sc)):
        no("not modelled for MoE models: CUDA graphs of MoE layers or of the whole step (the "
           "alltoall dispatcher's host sync of the routing counts cannot be inside a graph; "
           "Megatron-Core then captures the router and the expert MLP apart); attn only")


def capture(par) -> GraphCapture | None:
    """The regions the engine replays as graphs (``None``: eager; checked by :func:`check`)."""
    if par.cuda_graph_impl == "none":
        return None
    sc = scopes(par.cuda_graph_scope)
    if not sc:
        return GraphCapture(frozenset({"layer"}))
    return GraphCapture(frozenset("iteration" if s == "full_iteration" else s for s in sc))


def describe(par, host_ns: int) -> Assumption | None:
    """The report line of ``--cuda-graph-impl`` (``None``: off)."""
    cap = capture(par) if par is not None else None
    if cap is None:
        return None
    what = ("the whole forward-backward step (all microbatches and their collectives) is one "
            "graph: one launch per iteration" if "iteration" in cap.regions else
            "one graph launch per captured " + ("transformer layer" if "layer" in cap.regions
                                                 else " and ".join(sorted(cap.regions)) + " block")
            + " per forward and per backward of each microbatch; the embedding, output layer, "
            "loss and gradient-bucket collectives are issued eagerly")
    host = (f"the host spends {host_ns / 1000:g} µs per graph launch instead of per kernel"
            if host_ns > 0 else "host launch costs are off (--host-dispatch-us 0), so this "
            "changes nothing here")
    scope = par.cuda_graph_scope or "the whole layer"
    return Assumption(
        f"CUDA graphs (--cuda-graph-impl {par.cuda_graph_impl}, --cuda-graph-scope {scope}): "
        f"{what}; graphs change only the host's launch cost, the GPU runs the same kernels: "
        f"{host}; their static buffers and memory pool are not modelled (no published figure) "
        "(sim.models.features.cuda_graphs)", "cuda-graphs")

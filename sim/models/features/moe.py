"""Mixture-of-experts MLP rows (Megatron-Core ``MoELayer`` with the all-to-all dispatcher).

Assumptions (stated in every generated program): routing is balanced up to the stated load
factor (:func:`moe_load_factor`: the busiest GPU's experts receive ``load × n·top_k/experts``
tokens per expert; dropless unless a capacity factor caps it); the busiest GPU is the one
simulated (every EP peer waits for it at the all-to-alls); expert weights are split by the
expert tensor-parallel size ``ETP`` (Megatron-Core ``--expert-tensor-parallel-size``, default
TP; its groups: :mod:`sim.parallel.placement`); the router is replicated; shared experts
(``moe.shared_experts``) run as a TP-split dense MLP before the router; the first
``moe.dense_layers`` layers are dense.
Per GPU and microbatch, with ``nt`` residual-stream tokens (``n/t`` with SP) and ``E_l =
experts/ep`` local experts:

- router: GEMM ``nt × h × experts``; top-k softmax (fp32, reads and writes nt·experts: 8 bytes);
  permute (reads and writes nt·top_k·h: 2A)
- dispatch all-to-all in the EP group (``nt·top_k·h·A`` bytes) forward and backward (ep > 1);
  with Megatron-Core's flex dispatcher (``--moe-token-dispatcher-type flex``, DeepEP) and an EP
  group spanning ``N`` nodes, ``nt·D·h·A`` bytes, ``D`` = the expected number of distinct nodes
  a token's ``top_k`` experts live on (:func:`distinct_nodes`): DeepEP sends a token once per
  destination node over RDMA and fans it out inside the node over NVLink. The scenario runs
  these all-to-alls with the network's hierarchical algorithm (intra-node, then inter-node
  among GPUs of the same local index), so the inter-node phase carries exactly the
  deduplicated ``nt·D·h·A·(N−1)/N`` bytes per GPU; with the group inside one node, DeepEP
  sends a token once per destination rank: ``nt·D_r·h·A``, ``D_r`` the expected number of
  distinct EP ranks among its ``top_k`` experts (:func:`dispatch_ranks`)
- tokens enter the expert MLP through Megatron's ``f``/``ḡ`` operator in the TP group, sized
  ``n·top_k·h·A``; expert fc1/fc2 as grouped GEMMs over ``n·top_k`` tokens
- with the alltoall dispatcher and more than one local expert, the received copies sorted by
  local expert before fc1 and back after fc2 (reads and writes m·h each way,
  :func:`sorts_by_local_expert`)
- combine all-to-all (same size) and unpermute (reads nt·top_k·h, writes nt·h)

With ``ETP ≠ TP`` the expert MLP follows Megatron-Core's ``MoEAlltoAllTokenDispatcher``
(megatron/core/transformer/moe/token_dispatcher.py): after the EP all-to-all,
``dispatch_postprocess`` all-gathers the tokens in the expert tensor-parallel group
(``gather_from_sequence_parallel_region(..., group=self.tp_group)``, ``tp_group =
pg_collection.expt_tp``) and ``combine_preprocess`` reduce-scatters them back, so one GPU's
expert shards process the token copies of its ``ETP`` group, ``nt·ETP·top_k`` (× the load
factor), with weights ``h × f/ETP``; the all-gather / reduce-scatter run in the ETP group
(``GroupKind.ETP``; none at ETP 1) with ``nt·ETP·top_k·h·A`` bytes. With ``ETP = TP`` this is
exactly the TP-group form above (``nt·TP = n``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import UsageError
from sim.models.vocab.dims import Dims, linear_params, tp_enter, tp_exit
from sim.models.vocab.ops import ACT_BYTES as A
from sim.models.vocab.ops import Op, OpKind, elementwise, gemm, wgrad
from sim.models.vocab.rows import Block, Conj
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig


def expert_tp_enter(dm: Dims, tokens: int) -> Conj:
    """The dispatcher's all-gather of ``tokens·h`` activations into the expert shards
    (reduce-scatter in backward): in the TP group when ETP = TP (Megatron's ``ḡ``, as for a
    dense column-parallel linear), else in the ETP group; nothing at ETP 1."""
    if dm.expert_t == dm.t:
        return tp_enter(dm, tokens=tokens)
    if dm.expert_t == 1:
        return Conj()
    size = tokens * dm.h * A
    return Conj(Comm(CollKind.ALLGATHER, GroupKind.ETP, size, blocking=True),
                Comm(CollKind.REDUCESCATTER, GroupKind.ETP, size, blocking=True))


def expert_tp_exit(dm: Dims, tokens: int) -> Conj:
    """The combine's reduce-scatter out of the expert shards (all-gather in backward); see
    :func:`expert_tp_enter`."""
    if dm.expert_t == dm.t:
        return tp_exit(dm, tokens=tokens)
    if dm.expert_t == 1:
        return Conj()
    size = tokens * dm.h * A
    return Conj(Comm(CollKind.REDUCESCATTER, GroupKind.ETP, size, blocking=True),
                Comm(CollKind.ALLGATHER, GroupKind.ETP, size, blocking=True))


def grouped_gemm(name: str, m_total: int, k: int, n: int, count: int, eg: int,
                 weight_grad: bool = False) -> Op:
    """``count`` GEMMs (one per local expert) over ``m_total`` tokens in total, weights ``k×n``.
    ``shape`` ``(m_total, k, n)`` records the operands for the FP8 casts
    (:mod:`sim.models.features.fp8`);
    no ``kernel``: the roofline times it (a kernel table's single GEMMs are not grouped ones)."""
    flops = 2 * m_total * k * n
    if weight_grad:
        nbytes = eg * (m_total * k + m_total * n) + 8 * count * k * n
    else:
        nbytes = eg * (m_total * k + count * k * n) + A * m_total * n
    return Op(name, OpKind.GEMM, flops, nbytes, count=count, shape=(m_total, k, n))


def moe_load_factor(par: ParallelConfig) -> float:
    """Token copies the busiest GPU's experts process ÷ the balanced share: the stated load
    imbalance (``--moe-load-imbalance``, 1 = perfectly balanced), capped by the capacity factor
    when tokens beyond capacity are dropped (``--moe-expert-capacity-factor``)."""
    f = par.moe_load_imbalance
    if par.moe_capacity_factor is not None:
        f = min(f, par.moe_capacity_factor)
    return f


def distinct_nodes(experts: int, top_k: int, nodes: int) -> float:
    """Expected number of distinct nodes holding a token's ``top_k`` experts when the experts
    are spread evenly over ``nodes`` nodes and routing is uniform (balanced):
    ``N · (1 − C(E − E/N, k) / C(E, k))`` — each node is missed with the probability that all
    ``k`` experts fall elsewhere. 256 experts, top-8, 2 nodes: 1.993; 8 nodes: 5.295."""
    if nodes <= 1:
        return 1.0
    miss = math.comb(experts - experts // nodes, top_k) / math.comb(experts, top_k)
    return nodes * (1.0 - miss)


def dispatch_nodes(par: ParallelConfig) -> int:
    """Nodes whose duplicate token copies the dispatcher merges: the nodes one EP group spans
    with the flex dispatcher (DeepEP), 1 otherwise (no deduplication)."""
    if par.moe_token_dispatcher == "flex" and par.ep > 1:
        return par.ep_nodes
    return 1


def dispatch_ranks(par: ParallelConfig) -> int:
    """EP ranks whose duplicate token copies the flex dispatcher merges inside one node: DeepEP's
    intranode dispatch sends a token once to each rank that holds one of its experts
    (deepseek-ai/DeepEP deep_ep/buffer.py at 04b06f7a, ``Buffer.dispatch``: ``is_token_in_rank``
    "whether a token be sent to a rank", ``num_tokens_per_rank``; the receiver gets the token
    with its top-k indices); the EP size when the group lies inside one node, 1 otherwise (the
    alltoall dispatcher sends every copy; across nodes :func:`dispatch_nodes` applies)."""
    if par.moe_token_dispatcher == "flex" and par.ep > 1 and dispatch_nodes(par) == 1:
        return par.ep
    return 1


def dispatcher_syncs_host(par: ParallelConfig) -> bool:
    """Whether each MoE layer's forward blocks the host until the router's kernels have run:
    Megatron-Core's ``MoEAlltoAllTokenDispatcher`` (NVIDIA/Megatron-LM, megatron/core/
    transformer/moe/token_dispatcher.py at commit 0014f13713bfa38a8bab4ae11edd6917d35165ce)
    copies the tokens-per-expert counts to the CPU on a side stream at ``cuda_dtoh_point``
    ("before_permutation_1", after ``preprocess``) and, unless it pads to capacity, waits for
    that copy (``_maybe_dtoh_and_synchronize``: ``self.d2h_event.synchronize()``) at
    ``cuda_sync_point``: "before_ep_alltoall" when EP or TP > 1 ("A synchronization is needed
    before expert parallel AlltoAll communication to get the `input_splits` and
    `output_splits` CPU values"), "before_finish" otherwise, "before_permutation_1" with a
    capacity factor. Its backward reuses the split sizes already on the CPU: no wait. simrun
    has no pad-to-capacity option, so every alltoall run syncs; the flex (DeepEP) dispatcher is
    not modelled as syncing."""
    return par.moe_token_dispatcher == "alltoall"


def sorts_by_local_expert(model: ModelSpec, par: ParallelConfig) -> bool:
    """Whether the dispatcher re-sorts the received token copies by local expert: Megatron-Core's
    ``MoEAlltoAllTokenDispatcher`` (NVIDIA/Megatron-LM megatron/core/transformer/moe/
    token_dispatcher.py at d98e8a64), with more than one local expert, runs "Permutation 2: Sort
    tokens by local expert" in ``dispatch_postprocess`` (after the EP all-to-all and the expert-TP
    all-gather, ``sort_chunks_by_idxs``: the copies arrive grouped by source rank, the grouped
    GEMM wants them grouped by expert) and "Unpermutation 2" in ``combine_preprocess`` before the
    combine; each reads and writes every copy (Transformer Engine's fused
    ``moe_sort_chunks_by_index`` with ``moe_permute_fusion``, else a split and a cat), and its
    backward is the inverse sort of the gradient. The flex (DeepEP) dispatcher permutes once,
    on arrival (``get_permuted_hidden_states_by_experts``): simrun's permute before the
    all-to-all stands for that one."""
    return (par.moe_token_dispatcher == "alltoall" and model.moe is not None
            and model.moe.experts // par.ep > 1)


def _sort_blocks(name: str, elements: int, on: bool) -> tuple[Block, ...]:
    """One sort of ``elements`` activations (2A bytes per element each way), or none."""
    if not on:
        return ()
    return (Block(name, fwd=(elementwise(name, 2 * A * elements),),
                  ig=(elementwise(name + "_grad", 2 * A * elements),)),)


def moe_mlp_items(model: ModelSpec, dm: Dims, load: float = 1.0, nodes: int = 1,
                  host_sync: bool = False, sort_chunks: bool = False,
                  ranks: int = 1) -> list[Block | Conj]:
    """Blocks and operators of an MoE MLP (see the module docstring); ``load``:
    :func:`moe_load_factor`; ``nodes``: :func:`dispatch_nodes`; ``ranks``:
    :func:`dispatch_ranks`; ``host_sync``: the alltoall
    dispatcher's host synchronisation (:func:`dispatcher_syncs_host`), marked on the top-k
    kernel whose routing counts the host waits for; ``sort_chunks``: the alltoall dispatcher's
    second permutation (:func:`sorts_by_local_expert`)."""
    assert model.moe is not None
    n_exp, k = model.moe.experts, model.moe.top_k
    local = n_exp // dm.ep
    h, t, eg = dm.h, dm.expert_t, dm.eg
    f = model.moe.expert_ffn_hidden
    f1 = 2 * f if model.gated_mlp else f
    routed = dm.nt * k  # token copies leaving this GPU
    gathered = dm.n if t == dm.t else dm.nt * t  # tokens of the GPU's expert-TP group
    m = math.ceil(gathered * k * load)  # token copies processed by this GPU's expert shards
    arriving = math.ceil(routed * load)  # token copies the busiest GPU receives
    act_f, act_b = (3, 5) if model.gated_mlp else (2, 3)
    e = m * f // t
    # Megatron-Core's TopKRouter is a plain torch linear (outside Transformer Engine): its
    # GEMMs stay bf16 in an fp8 run, like the output layer's
    rg, rd = (A, "bf16") if eg == 1 else (eg, "")
    items: list[Block | Conj] = [
        Block("moe_router",
              fwd=(gemm("router", dm.nt, h, n_exp, rg, dtype=rd),
                   replace(elementwise("router_topk", 8 * dm.nt * n_exp), host_waits=host_sync),
                   elementwise("moe_permute", 2 * A * routed * h)),
              ig=(elementwise("moe_permute_grad", 2 * A * routed * h),
                  elementwise("router_topk_grad", 12 * dm.nt * n_exp),
                  gemm("router_dgrad", dm.nt, n_exp, h, rg, dtype=rd)),
              wg=(wgrad("router_wgrad", dm.nt, h, n_exp, rg, dtype=rd),),
              params=h * n_exp),
    ]
    a2a = Conj()
    if dm.ep > 1:
        if nodes > 1:  # DeepEP: one copy per destination node (module docstring)
            arriving = math.ceil(dm.nt * distinct_nodes(n_exp, k, nodes) * load)
        elif ranks > 1:  # DeepEP inside one node: one copy per destination rank
            arriving = math.ceil(dm.nt * distinct_nodes(n_exp, k, ranks) * load)
        c = Comm(CollKind.ALLTOALL, GroupKind.EP, arriving * h * A, blocking=True)
        a2a = Conj(c, c)
    fc1_params = local * linear_params(model, h, f1, t, True)
    fc2_params = local * linear_params(model, f, h, t, False)
    items += [
        a2a,
        expert_tp_enter(dm, m),
        *_sort_blocks("moe_sort_by_expert", m * h, sort_chunks),
        Block("moe_fc1",
              fwd=(grouped_gemm("expert_fc1", m, h, f1 // t, local, eg),
                   elementwise("expert_act", act_f * A * e)),
              ig=(elementwise("expert_act_grad", act_b * A * e),
                  grouped_gemm("expert_fc1_dgrad", m, f1 // t, h, local, eg)),
              wg=(grouped_gemm("expert_fc1_wgrad", m, h, f1 // t, local, eg, True),),
              expert_params=fc1_params),
        Block("moe_fc2",
              fwd=(grouped_gemm("expert_fc2", m, f // t, h, local, eg),),
              ig=(grouped_gemm("expert_fc2_dgrad", m, h, f // t, local, eg),),
              wg=(grouped_gemm("expert_fc2_wgrad", m, f // t, h, local, eg, True),),
              expert_params=fc2_params),
        *_sort_blocks("moe_unsort_by_expert", m * h, sort_chunks),
        expert_tp_exit(dm, m),
        a2a,
        Block("moe_unpermute",
              fwd=(elementwise("moe_unpermute", A * (routed + dm.nt) * h),),
              ig=(elementwise("moe_unpermute_grad", A * (routed + dm.nt) * h),)),
    ]
    return items


_A2A_FLAG = "--overlap-moe-expert-parallel-comm"
_A2A_OPTION = "overlap_moe_expert_parallel_comm"  # errors name the option (the CLI, its flag)


def check_ep_a2a_overlap(model: ModelSpec, par: ParallelConfig) -> None:
    """Megatron-Core's ``overlap_moe_expert_parallel_comm`` asserts (megatron/core/transformer/
    transformer_config.py, ``__post_init__``): expert parallelism (an MoE model, EP > 1), the
    alltoall or flex dispatcher (simrun's two), no full recomputation, and with pipeline
    parallelism a virtual pipeline (the interleaved schedule; :meth:`sim.pipeline.types.
    Schedule.combined_ops`). Raises :class:`UsageError` naming the flag."""
    if not par.overlap_moe_expert_parallel_comm:
        return
    if model.moe is None or par.ep < 2:
        raise UsageError("needs a mixture-of-experts model with expert parallelism (--ep > 1):"
                         " it overlaps the EP all-to-alls", field=_A2A_OPTION)
    if par.recompute == "full":
        raise UsageError("Megatron-Core refuses it with full recomputation", field=_A2A_OPTION)
    if not par.layout.schedule_type.supports_combined_1f1b(par.pp):
        raise UsageError("with pipeline parallelism it needs the interleaved schedule (set "
                         f"--vpp > 1), got {par.schedule_name}", field=_A2A_OPTION)


def describe_ep_a2a_overlap(par: ParallelConfig) -> str:
    """The assumption line of ``--overlap-moe-expert-parallel-comm`` (empty when off)."""
    if not par.overlap_moe_expert_parallel_comm:
        return ""
    return ("--overlap-moe-expert-parallel-comm (Megatron-Core combined 1F1B): one more "
            "warm-up forward, then each steady-state forward and the backward after it run as "
            "one op: both passes' compute back to back, their EP all-to-alls on the EP stream "
            "beside it (a layer's compute does not wait for its own all-to-all inside the op: "
            "the hiding Megatron's per-layer interleaving buys), TP collectives blocking as "
            "usual; the op ends when its compute and all-to-alls are done; delay_wgrad_compute "
            "(the weight gradients moved behind the combine all-to-all) is within that bound")

"""Mixture-of-experts MLP rows (Megatron-Core ``MoELayer`` with the all-to-all dispatcher).

Assumptions (stated in every generated program): routing is perfectly balanced (each expert
receives ``n·top_k/experts`` tokens of a microbatch, no capacity dropping); expert weights are
split by the tensor-parallel size like the dense MLP; the router is replicated.
Per GPU and microbatch, with ``nt`` residual-stream tokens (``n/t`` with SP) and ``E_l =
experts/ep`` local experts:

- router: GEMM ``nt × h × experts``; top-k softmax (fp32, reads and writes nt·experts: 8 bytes);
  permute (reads and writes nt·top_k·h: 2A)
- dispatch all-to-all in the EP group (``nt·top_k·h·A`` bytes) forward and backward (ep > 1)
- tokens enter the expert MLP through Megatron's ``f``/``ḡ`` operator in the TP group, sized
  ``n·top_k·h·A``; expert fc1/fc2 as grouped GEMMs over ``n·top_k`` tokens
- combine all-to-all (same size) and unpermute (reads nt·top_k·h, writes nt·h)
"""

from __future__ import annotations

from sim.comm import CollKind, Comm, GroupKind
from sim.models.dims import Dims, linear_params, tp_enter, tp_exit
from sim.models.ops import ACT_BYTES as A
from sim.models.ops import Op, OpKind, elementwise, gemm, wgrad
from sim.models.rows import Block, Conj
from sim.models.spec import ModelSpec


def grouped_gemm(name: str, m_total: int, k: int, n: int, count: int, eg: int,
                 weight_grad: bool = False) -> Op:
    """``count`` GEMMs (one per local expert) over ``m_total`` tokens in total, weights ``k×n``."""
    flops = 2 * m_total * k * n
    if weight_grad:
        nbytes = eg * (m_total * k + m_total * n) + 8 * count * k * n
    else:
        nbytes = eg * (m_total * k + count * k * n) + A * m_total * n
    return Op(name, OpKind.GEMM, flops, nbytes, count=count)


def moe_mlp_items(model: ModelSpec, dm: Dims) -> list[Block | Conj]:
    """Blocks and operators of an MoE MLP (see the module docstring)."""
    assert model.moe is not None
    n_exp, k = model.moe.experts, model.moe.top_k
    local = n_exp // dm.ep
    h, t, eg, f, f1 = dm.h, dm.t, dm.eg, dm.f, dm.f1
    routed = dm.nt * k  # token copies leaving this GPU
    m = dm.n * k  # token copies processed by this GPU's expert shards
    act_f, act_b = (3, 5) if model.gated_mlp else (2, 3)
    e = m * f // t
    items: list[Block | Conj] = [
        Block("moe_router",
              fwd=(gemm("router", dm.nt, h, n_exp, eg),
                   elementwise("router_topk", 8 * dm.nt * n_exp),
                   elementwise("moe_permute", 2 * A * routed * h)),
              ig=(elementwise("moe_permute_grad", 2 * A * routed * h),
                  elementwise("router_topk_grad", 12 * dm.nt * n_exp),
                  gemm("router_dgrad", dm.nt, n_exp, h, eg)),
              wg=(wgrad("router_wgrad", dm.nt, h, n_exp, eg),),
              params=h * n_exp),
    ]
    a2a = Conj()
    if dm.ep > 1:
        c = Comm(CollKind.ALLTOALL, GroupKind.EP, routed * h * A, blocking=True)
        a2a = Conj(c, c)
    fc1_params = local * linear_params(model, h, f1, t, True)
    fc2_params = local * linear_params(model, f, h, t, False)
    items += [
        a2a,
        tp_enter(dm, tokens=m),
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
        tp_exit(dm, tokens=m),
        a2a,
        Block("moe_unpermute",
              fwd=(elementwise("moe_unpermute", A * (routed + dm.nt) * h),),
              ig=(elementwise("moe_unpermute_grad", A * (routed + dm.nt) * h),)),
    ]
    return items

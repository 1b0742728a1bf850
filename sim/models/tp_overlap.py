"""Megatron-Core ``--tp-comm-overlap``: which tensor-parallel collectives of a transformer layer
Transformer Engine's userbuffers pipeline with which GEMM, and how.

Megatron-Core hands ``tp_comm_overlap`` to Transformer Engine (``megatron/training/
initialize.py`` ``_initialize_tp_communicators`` → ``transformer_engine.pytorch.module.base.
initialize_ub``), which registers one communicator per GEMM of the layer's four TE linears,
with its default method and SM count (``get_default_config``):

=============  ==============================  ==============  =================================
TE name        collective (sequence parallel)  method          simrun row / GEMM op
=============  ==============================  ==============  =================================
qkv_fprop      all-gather of the LN output      ring_exchange   attn_qkv forward, ``qkv``
proj_fprop     reduce-scatter of proj output    pipeline (4)    attn_proj forward, ``proj``
fc1_fprop      all-gather of the LN output      ring_exchange   mlp_fc1 forward, ``fc1``
fc2_fprop      reduce-scatter of fc2 output     pipeline (4)    mlp_fc2 forward, ``fc2``
fc2_dgrad      all-gather of the output grad    ring_exchange   mlp_fc2 input-grad, ``fc2_dgrad``
fc1_dgrad      all-gather of the input (wgrad)  bulk            mlp_fc1 input-grad, ``fc1_dgrad``
fc1_wgrad      reduce-scatter of the dgrad      bulk            mlp_fc1 weight-grad, ``fc1_wgrad``
proj_dgrad     all-gather of the output grad    ring_exchange   attn_proj input-grad
qkv_dgrad      all-gather of the input (wgrad)  bulk            attn_qkv input-grad, ``qkv_dgrad``
qkv_wgrad      reduce-scatter of the dgrad      bulk            attn_qkv weight-grad
=============  ==============================  ==============  =================================

``ring_exchange``: ``num_splits`` = TP size, copy-engine transfers (``use_ce``), no SM margin
for the GEMM; ``pipeline`` and ``bulk``: 16 communication SMs (``num_sm``) that the GEMM leaves
free (``set_sm_margin``), ``pipeline`` in 4 splits. The timing is :mod:`sim.engine.overlap`.

Only dense transformer layers with sequence parallelism have these linears as TE modules;
Megatron-LM asserts ``--sequence-parallel`` with ``--tp-comm-overlap`` (``megatron/training/
arguments.py``). The embedding's and the output layer's collectives, the MoE MLP's, and with
context parallelism the attention rows' stay as they are (stated in the assumptions).
"""

from __future__ import annotations

from sim.comm import CollKind, Comm
from sim.models.compute import Timer
from sim.models.ops import Op
from sim.models.rows import Row
from sim.workload.model import GemmOverlap

_AG, _RS = CollKind.ALLGATHER, CollKind.REDUCESCATTER
#: (row holding the collective, its phase, its kind) → (row of the GEMM, its phase, GEMM op,
#: method)
MOVES = (
    (("attn_norm", "fwd", _AG), ("attn_qkv", "fwd", "qkv", "ring_exchange")),
    (("attn_proj", "fwd", _RS), ("attn_proj", "fwd", "proj", "pipeline")),
    (("mlp_norm", "fwd", _AG), ("mlp_fc1", "fwd", "fc1", "ring_exchange")),
    (("mlp_fc2", "fwd", _RS), ("mlp_fc2", "fwd", "fc2", "pipeline")),
    (("mlp_out", "ig", _AG), ("mlp_fc2", "ig", "fc2_dgrad", "ring_exchange")),
    (("mlp_fc2", "ig", _AG), ("mlp_fc1", "ig", "fc1_dgrad", "bulk")),
    (("mlp_fc1", "ig", _RS), ("mlp_fc1", "wg", "fc1_wgrad", "bulk")),
    (("mlp_norm", "ig", _AG), ("attn_proj", "ig", "proj_dgrad", "ring_exchange")),
    (("attn_proj", "ig", _AG), ("attn_qkv", "ig", "qkv_dgrad", "bulk")),
    (("attn_qkv", "ig", _RS), ("attn_qkv", "wg", "qkv_wgrad", "bulk")),
)
#: Transformer Engine's default splits and communication SMs per method (``num_splits``:
#: TP size for ring_exchange; ``num_sm`` 16 with the SM margin for pipeline and bulk)
PIPELINE_SPLITS = 4
COMM_SMS = {"ring_exchange": 0, "pipeline": 16, "bulk": 16}


def apply(rows: list[Row]) -> int:
    """Move the TP collectives of one dense layer's ``rows`` (names without the layer prefix)
    from their serial slot onto the GEMM Transformer Engine overlaps them with (in place).
    Returns how many were moved (0 where the layer does not have the expected collectives)."""
    by_name = {r.name: r for r in rows}
    plan = []
    for (src, sph, kind), (dst, dph, op, method) in MOVES:
        s, d = by_name.get(src), by_name.get(dst)
        if s is None or d is None:
            return 0
        comm = getattr(s, f"{sph}_comm")
        if comm is None or comm.kind is not kind or op not in {o.name for o in getattr(d, dph)}:
            return 0
        plan.append((s, sph, d, dph, comm, op, method))
    for s, sph, d, dph, comm, op, method in plan:
        setattr(s, f"{sph}_comm", None)
        setattr(d, f"{dph}_ovl", getattr(d, f"{dph}_ovl") + ((comm, op, method),))
    return len(plan)


def splits(method: str, tp: int) -> int:
    """Chunks of ``method`` at TP size ``tp`` (Transformer Engine's defaults)."""
    if method == "ring_exchange":
        return tp
    return PIPELINE_SPLITS if method == "pipeline" else 1


#: SMs assumed when the GPU catalogue has no count for the topology's GPU (an H100 SXM's)
DEFAULT_SMS = 132


def gemm_overlaps(ovl: tuple[tuple[Comm, str, str], ...], ops: tuple[Op, ...], tp: int,
                  timer: Timer, dtype: str, sms: int) -> tuple[GemmOverlap, ...]:
    """The :class:`GemmOverlap` of a phase's overlapped collectives, each GEMM timed alone by
    ``timer`` (not tallied again: the phase's compute already counts it)."""
    out = []
    for comm, name, method in ovl:
        gemm = [o for o in ops if o.name == name]
        out.append(GemmOverlap(comm, timer.ops_ns(gemm, dtype, 0), method, splits(method, tp),
                               COMM_SMS[method], sms))
    return tuple(out)


def describe(sms: int, sms_known: bool) -> str:
    """The assumption line of ``--tp-comm-overlap``."""
    return ("--tp-comm-overlap (Transformer Engine userbuffers, its default configuration): "
            "in each dense layer the sequence-parallel all-gathers before qkv/fc1 and the "
            "output-gradient all-gathers before proj/fc2 dgrad run as ring exchanges pipelined "
            "with their GEMM in TP chunks; the reduce-scatters after proj/fc2 are pipelined in "
            f"{PIPELINE_SPLITS} chunks (the last one exposed); the backward input all-gather and "
            "dgrad reduce-scatter of qkv/fc1 run in bulk beside the dgrad/wgrad GEMM; a "
            f"pipelined or bulk overlap's kernel holds {COMM_SMS['pipeline']} of the GPU's "
            f"{sms} SMs ({'GPU catalogue' if sms_known else 'assumed: not in the catalogue'}) "
            "and slows the GEMM to the rest while it runs (ring exchanges use copy engines); "
            "embedding, output-layer and MoE-MLP collectives stay serial")

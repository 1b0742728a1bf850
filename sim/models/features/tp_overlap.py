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

Megatron-LM asserts ``--sequence-parallel`` with ``--tp-comm-overlap`` (``megatron/training/
arguments.py``).

**Context parallelism.** Megatron-Core registers the userbuffers for ``seq_length ·
micro_batch_size / context_parallel_size`` tokens (``megatron/training/initialize.py``
``_initialize_tp_communicators``, NVIDIA/Megatron-LM at d98e8a64): each CP rank's TP group
overlaps the same collectives around the same four linears, on its ``s/CP`` tokens. The
ring-attention steps (:mod:`sim.models.features.context`) sit between the qkv and proj linears and
keep their peer-to-peer KV exchanges in the CP group; nothing of them changes.

**MoE layers.** The attention part is a dense attention: its five collectives overlap as above.
The routed experts' linears are built with Transformer Engine's userbuffer overlap switched
off: ``TELinear.__init__`` sets ``ub_overlap_ag`` / ``ub_overlap_rs`` to False for
``is_expert`` ("Disable ub overlap for experts"), and ``TEGroupedLinear`` makes TE agnostic of
the TP group ("The comms between TP and EP group is explicitly handled by MoE token
dispatcher"; ``megatron/core/extensions/transformer_engine.py``, same commit): the expert
MLP's TP all-gather / reduce-scatter (and the EP all-to-alls) are the token dispatcher's NCCL
collectives and stay serial. Shared experts (``SharedExpertMLP``, an ``MLP`` of
``TEColumnParallelLinear`` / ``TERowParallelLinear`` named fc1/fc2, not ``is_expert``) overlap
fc1_fprop, fc2_fprop and fc2_dgrad; a plain ``TEColumnParallelLinear`` has no
``ub_bulk_dgrad`` / ``ub_bulk_wgrad`` (those are ``TELayerNormColumnParallelLinear``'s), so
the shared fc1's backward input all-gather and dgrad reduce-scatter stay serial. With
``--moe-shared-expert-overlap`` Megatron-Core turns the shared experts' TP communication off
in TE and runs it in the dispatcher instead; simrun does not model that flag.

The embedding's and the output layer's collectives stay as they are (stated).
"""

from __future__ import annotations

from sim.comm import CollKind, Comm
from sim.models.compute import Timer
from sim.models.vocab.ops import Op
from sim.models.vocab.rows import Row
from sim.program.workload import GemmOverlap

_AG, _RS = CollKind.ALLGATHER, CollKind.REDUCESCATTER
#: (row holding the collective, its phase, its kind) → (row of the GEMM, its phase, GEMM op,
#: method). The attention part of every transformer layer (dense or MoE, with or without
#: context parallelism: the ring-attention rows ``attn_cp{k}`` sit between ``attn_qkv`` and
#: ``attn_proj`` and keep their CP exchanges)
ATTENTION_MOVES = (
    (("attn_norm", "fwd", _AG), ("attn_qkv", "fwd", "qkv", "ring_exchange")),
    (("attn_proj", "fwd", _RS), ("attn_proj", "fwd", "proj", "pipeline")),
    (("mlp_norm", "ig", _AG), ("attn_proj", "ig", "proj_dgrad", "ring_exchange")),
    (("attn_proj", "ig", _AG), ("attn_qkv", "ig", "qkv_dgrad", "bulk")),
    (("attn_qkv", "ig", _RS), ("attn_qkv", "wg", "qkv_wgrad", "bulk")),
)


def mlp_moves(prefix: str = "", after: str = "mlp_out", bulk: bool = True) -> tuple:
    """The moves of a TP-split MLP whose rows are ``{prefix}mlp_fc1`` / ``{prefix}mlp_fc2``,
    followed by row ``after`` (whose input-gradient slot holds the output-gradient all-gather).
    ``bulk``: fc1 is Megatron-Core's ``TELayerNormColumnParallelLinear`` (dense layers), whose
    ``ub_bulk_dgrad`` / ``ub_bulk_wgrad`` overlap the backward input all-gather and dgrad
    reduce-scatter; a plain ``TEColumnParallelLinear`` (shared experts) has no bulk overlap."""
    fc1, fc2 = prefix + "mlp_fc1", prefix + "mlp_fc2"
    moves = [
        (("mlp_norm", "fwd", _AG), (fc1, "fwd", "fc1", "ring_exchange")),
        ((fc2, "fwd", _RS), (fc2, "fwd", "fc2", "pipeline")),
        ((after, "ig", _AG), (fc2, "ig", "fc2_dgrad", "ring_exchange")),
    ]
    if bulk:
        moves += [((fc2, "ig", _AG), (fc1, "ig", "fc1_dgrad", "bulk")),
                  ((fc1, "ig", _RS), (fc1, "wg", "fc1_wgrad", "bulk"))]
    return tuple(moves)


#: the dense layer's moves (Transformer Engine's ten communicators)
MOVES = ATTENTION_MOVES + mlp_moves()
#: a MoE layer's shared experts (Megatron-Core ``SharedExpertMLP``: TE linears without
#: ``is_expert``, named fc1/fc2), run before the router in simrun's rows
SHARED_MOVES = mlp_moves("shared_", "moe_router", bulk=False)


#: Transformer Engine's default splits and communication SMs per method (``num_splits``:
#: TP size for ring_exchange; ``num_sm`` 16 with the SM margin for pipeline and bulk)
PIPELINE_SPLITS = 4
#: (``nccl``: an asynchronous NCCL collective beside its GEMM, :mod:`sim.models.features.tp_async`;
# the engine sets its SMs from the NCCL channels it runs on)
COMM_SMS = {"ring_exchange": 0, "pipeline": 16, "bulk": 16, "nccl": 0}


def plan_moves(rows: list[Row], moves: tuple) -> list | None:
    """The moves of ``moves`` as (source row, phase, GEMM row, phase, comm, op, method), or
    ``None`` where one of them does not find its collective or GEMM."""
    by_name = {r.name: r for r in rows}
    plan = []
    for (src, sph, kind), (dst, dph, op, method) in moves:
        s, d = by_name.get(src), by_name.get(dst)
        if s is None or d is None:
            return None
        comm = getattr(s, f"{sph}_comm")
        if comm is None or comm.kind is not kind or op not in {o.name for o in getattr(d, dph)}:
            return None
        plan.append((s, sph, d, dph, comm, op, method))
    return plan


def apply(rows: list[Row], moe: bool = False) -> int:
    """Move the TP collectives of one layer's ``rows`` (names without the layer prefix) from
    their serial slot onto the GEMM Transformer Engine overlaps them with (in place). A dense
    layer (``moe`` false) moves all ten; a MoE layer its attention's five and, with shared
    experts, their three; the routed experts' collectives stay serial (Megatron-Core builds
    expert linears with Transformer Engine's userbuffer overlap off: see the module
    docstring). Returns how many were moved (0 where the layer lacks the expected collectives).
    """
    groups = (ATTENTION_MOVES, SHARED_MOVES) if moe else (MOVES,)
    # plan every group before moving anything: the shared experts' fc1 all-gather sits in
    # mlp_norm's forward slot, which the attention group does not touch
    return move([plan_moves(rows, g) for g in groups])


def move(plans: list) -> int:
    """Carry out the complete ``plans`` of :func:`plan_moves` (``None``: a group the layer
    lacks): each collective leaves its serial slot for its GEMM's phase. Returns how many."""
    done = [p for p in plans if p is not None]
    for plan in done:
        for s, sph, d, dph, comm, op, method in plan:
            setattr(s, f"{sph}_comm", None)
            setattr(d, f"{dph}_ovl", getattr(d, f"{dph}_ovl") + ((comm, op, method),))
    return sum(len(p) for p in done)


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
            "in each layer the sequence-parallel all-gathers before qkv/fc1 and the "
            "output-gradient all-gathers before proj/fc2 dgrad run as ring exchanges pipelined "
            "with their GEMM in TP chunks; the reduce-scatters after proj/fc2 are pipelined in "
            f"{PIPELINE_SPLITS} chunks (the last one exposed); the backward input all-gather and "
            "dgrad reduce-scatter of qkv/fc1 run in bulk beside the dgrad/wgrad GEMM; a "
            f"pipelined or bulk overlap's kernel holds {COMM_SMS['pipeline']} of the GPU's "
            f"{sms} SMs ({'GPU catalogue' if sms_known else 'assumed: not in the catalogue'}) "
            "and slows the GEMM to the rest while it runs (ring exchanges use copy engines); "
            "with context parallelism on each CP rank's s/cp tokens, the ring-attention "
            "exchanges unchanged; in MoE layers the attention's and the shared experts' "
            "fc1/fc2 forward and fc2 dgrad overlap, the routed experts' TP collectives stay "
            "serial (Megatron-Core turns userbuffers off for expert linears); embedding and "
            "output-layer collectives stay serial")

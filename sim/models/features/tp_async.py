"""Asynchronous tensor-parallel communication in the backward of a column-parallel linear:
``--async-tensor-model-parallel-allreduce`` (Megatron-LM's flag of September 2021; later
Megatron-LM turned it on by default, ``--no-async-tensor-model-parallel-allreduce``, and
Transformer Engine's linears do the same without userbuffers). Off by default in simrun: see
"Why off by default" below.

Sources:

- NVIDIA/Megatron-LM ``megatron/mpu/layers.py`` since commit 16c90445 (2021-09-02; not in the
  SC'21 scripts' commit 6985e589 of 2021-08-18), ``LinearWithGradAccumulationAndAsync
  Communication`` (02bb1f5c, 2022-03-02, and megatron/core/tensor_parallel/layers.py after it):
  without sequence parallelism the input-gradient all-reduce is issued with ``async_op=True``
  after the dgrad GEMM and waited for after the weight-gradient GEMM; with sequence parallelism
  the all-gather of the saved input (for the weight gradient) runs beside the dgrad GEMM and
  the reduce-scatter of the input gradient beside the weight-gradient GEMM.
- NVIDIA/TransformerEngine ``transformer_engine/pytorch/module/linear.py`` at v1.8
  (2024-07-24), ``_Linear.backward``: "Overlap input AG with dgrad" (``gather_along_first_dim
  (..., async_op=ctx.requires_dgrad)`` for a column-parallel linear with sequence
  parallelism), then "Overlap dgrad-RS/AR with wgrad" (``reduce_scatter_along_first_dim`` /
  ``allreduce`` with ``async_op=True`` before the wgrad GEMM); ``layernorm_linear.py`` and
  ``layernorm_mlp.py`` (fc1) likewise. Megatron-Core's qkv and fc1 are such linears.

simrun: in each transformer layer, the collectives of the two column-parallel linears' backward
(qkv, fc1; a MoE layer's shared-expert fc1 too) move from their serial slot onto the GEMM they
run beside (method ``nccl`` of :mod:`sim.engine.overlap`): the NCCL kernel holds one SM per
channel (:func:`sim.engine.interference.overlap_ctas`) and the GEMM runs on the rest while it
lasts. The row-parallel linears' output-gradient all-gathers (SP) stay serial: the dgrad GEMM
needs them. The routed experts' TP collectives are the token dispatcher's (serial), the
embedding's and the output layer's stay serial, and ``--tp-comm-overlap`` replaces all of this
by Transformer Engine's userbuffers (:mod:`sim.models.features.tp_overlap`). PyTorch eager runs
(``--no-compile``, torchtitan's DTensor tensor parallelism) are refused.

Why off by default. The A100 calibration measurements (Korthikanti et al., arXiv:2205.05198,
Table 4: one 22B layer, TP 8, the 2022 Megatron-LM that issues these collectives
asynchronously) were matched by the blocking model when the A100 efficiencies were first set
(backward 11.84 ms against 11.9 measured, η_gemm 0.80, TP collectives by docs/calibration.md
§A's formula); since 2026-11-29 η_gemm is fitted to Table 4 with this overlap on, as the run
had it (0.69, :mod:`sim.validation.table4`), the default not revisited. Timed as an overlap
with the SM-share interference of :mod:`sim.engine.interference` (24 CTAs of 108 SMs), the
same code's end-to-end iterations (at η_gemm 0.80) came out 2–7% faster than measured
(``simrun validate`` with the option on in the Korthikanti cases:
22B −0.1% → −5.8% and +2.0% → −6.6%, 175B −2.6% → −6.9%, 530B −2.1% → −4.7%, 1T −0.5% →
−2.6%): the asynchronous issue gains far less than an SM share predicts (an NCCL kernel beside
a GEMM also takes memory bandwidth and lengthens the GEMM's last wave, which the SM share does
not count). So the default times these collectives as the calibration data behave, and the
flag gives the SM-share overlap: an upper bound on what the asynchronous issue saves. Because
those end-to-end errors shaped this choice, the eight Korthikanti cases are calibration cases
(docs/validation.md, "Calibration and evaluation cases"), and every validation case sets the
flag as its run's framework did (on for the 2022 Megatron-LM and for Transformer Engine's
linears without userbuffers; docs/validation.md, "Source-faithful settings").
"""

from __future__ import annotations

from sim.comm import CollKind
from sim.errors import UsageError
from sim.models.features.tp_overlap import move, plan_moves
from sim.models.vocab.rows import Row

FLAG = "--async-tensor-model-parallel-allreduce"
OPTION = "async_tensor_model_parallel_allreduce"  # errors name the option (the CLI, its flag)
_AG, _RS, _AR = CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLREDUCE


#: Megatron-Core's column-parallel linears of a layer: (linear row, GEMM op prefix, row whose
#: input-gradient slot holds the linear's sequence-parallel re-gather)
QKV = ("attn_qkv", "qkv", "attn_proj")
FC1 = ("mlp_fc1", "fc1", "mlp_fc2")
SHARED_FC1 = ("shared_mlp_fc1", "fc1", "shared_mlp_fc2")


def _moves(linears: tuple, sp: bool) -> tuple:
    """(row holding the collective, phase, kind) → (GEMM row, phase, GEMM op, method) for the
    column-parallel ``linears``."""
    out = []
    for lin, gemm, regather in linears:
        if sp:
            out += [((regather, "ig", _AG), (lin, "ig", f"{gemm}_dgrad", "nccl")),
                    ((lin, "ig", _RS), (lin, "wg", f"{gemm}_wgrad", "nccl"))]
        else:
            out.append(((lin, "ig", _AR), (lin, "wg", f"{gemm}_wgrad", "nccl")))
    return tuple(out)


def check(par) -> None:
    """Refuse the flag where it changes nothing (a what-if that does not happen)."""
    if not par.async_tensor_model_parallel_allreduce or applies(par):
        return
    why = ("TP 1 has no TP communication" if par.tp == 1 else
           "--tp-comm-overlap runs them through userbuffers instead" if par.tp_comm_overlap else
           "eager PyTorch (--no-compile) is not Megatron's linear layer")
    raise UsageError(f"changes nothing here: {why}", field=OPTION)


def applies(par) -> bool:
    """Whether a run's layers overlap so: TP > 1, the flag on, no userbuffers
    (``--tp-comm-overlap`` replaces it), Megatron-Core's fused kernels (not ``--no-compile``)."""
    return (par.tp > 1 and par.async_tensor_model_parallel_allreduce
            and not par.tp_comm_overlap and par.compile)


def apply(rows: list[Row], sp: bool, moe: bool = False) -> int:
    """Move the backward collectives of one layer's column-parallel linears (row names without
    the layer prefix) onto the GEMMs they run beside (in place): qkv and, in a dense layer, fc1;
    in a MoE layer qkv and the shared experts' fc1 (if any). Returns how many were moved."""
    groups = ((QKV,), (SHARED_FC1,)) if moe else ((QKV, FC1),)
    return move([plan_moves(rows, _moves(g, sp)) for g in groups])


def describe() -> str:
    """The assumption line of a run where :func:`applies`."""
    return ("TP backward (Megatron-LM async_tensor_model_parallel_allreduce, Transformer "
            f"Engine's linears; on with {FLAG}, off by default): the column-parallel "
            "linears' (qkv, fc1) input all-gather for the weight gradient runs beside the "
            "dgrad GEMM and their "
            "input-gradient reduce-scatter (all-reduce without sequence parallelism) beside the "
            "wgrad GEMM, as NCCL kernels holding one SM per channel (see 'interference'); the "
            "other TP collectives stay serial")

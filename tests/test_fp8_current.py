"""Transformer Engine's current scaling (sim/models/features/fp8_current.py): the TP amax
all-reduces of sequence-parallel operands placed by hand (TE v2.9 linear.py / layernorm_linear.py
_customize_quantizers_float8_current_scaling, quantizer.cpp quantize_impl), a hand-worked
(time, what) timeline of one forward and one backward reduction, the per-expert scale kernels
of a grouped linear, and the assumption line."""

from __future__ import annotations

import math

from par_support import make_par

from sim.comm import CollKind, GroupKind
from sim.engine import simulate
from sim.models import generate
from sim.models.compute import H100, op_time_ns
from sim.models.compute_setup import ComputeSetup
from sim.models.features.fp8 import describe
from sim.models.layers import transformer_layer_rows
from sim.models.vocab.dims import Dims
from sim.models.vocab.spec import ModelSpec, MoESpec
from sim.network.simple import AlphaBetaNetwork
from sim.topology.gpu import GpuSpec

H100_80 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
ROOFLINE = ComputeSetup(H100, None, [], None)
TINY = ModelSpec("tiny", layers=2, hidden=64, heads=4, vocab=1024, seq_len=32)
BW = 0.8 * 3350e9 / 1e9  # roofline bytes per ns (80% of 3.35 TB/s)
OVH = 2000.0  # H100 element-wise overhead per kernel (ns)


def _rows(recipe="tensorwise", tp=2, sp=True, **kw):
    par = make_par(tp=tp, micro_batch=2, global_batch=2, dtype="fp8", fp8_recipe=recipe,
                         sequence_parallel=sp, **kw)
    return transformer_layer_rows(TINY, par, Dims.of(TINY, par), 0)


def _names(rows):
    return [r.name.removeprefix("layer0_") for r in rows]


def test_reductions_sit_around_the_gathered_operands():
    rows = _rows()
    names = _names(rows)
    red = [n for n in names if n.endswith("amax_reduction")]
    assert red == ["attn_qkv_input_amax_reduction", "attn_proj_grad_output_amax_reduction",
                   "mlp_fc1_input_amax_reduction", "mlp_fc2_grad_output_amax_reduction"]
    # forward: just before the column-parallel linear; backward: just after the row-parallel
    # one in the list, so walked right before its dgrad
    assert names.index("attn_qkv_input_amax_reduction") == names.index("attn_qkv") - 1
    assert names.index("mlp_fc1_input_amax_reduction") == names.index("mlp_fc1") - 1
    assert names.index("attn_proj_grad_output_amax_reduction") == names.index("attn_proj") + 1
    assert names.index("mlp_fc2_grad_output_amax_reduction") == names.index("mlp_fc2") + 1
    by = dict(zip(names, rows, strict=True))
    for n in red:
        r = by[n]
        comm = r.fwd_comm if n.endswith("input_amax_reduction") else r.ig_comm
        assert (comm.kind, comm.group, comm.size_bytes, comm.blocking) == (
            CollKind.ALLREDUCE, GroupKind.TP, 4, True)
    # the norm computes the qkv input's amax: only the zeroing precedes the reduction
    assert [o.name for o in by["attn_qkv_input_amax_reduction"].fwd] == [
        "attn_qkv_input_amax_zero"]
    assert [o.name for o in by["attn_proj_grad_output_amax_reduction"].ig] == [
        "attn_proj_grad_output_amax_zero", "attn_proj_grad_output_amax"]
    # scale kernel and cast stay with the linear, before its GEMM
    assert [o.name for o in by["attn_qkv"].fwd][:3] == ["attn_qkv_input_scale",
                                                        "attn_qkv_input_cast", "qkv"]
    assert [o.name for o in by["attn_proj"].ig] == ["attn_proj_grad_output_scale",
                                                    "attn_proj_grad_output_cast", "proj_dgrad"]


def test_no_reduction_without_a_gathered_current_scaled_operand():
    for kw in ({"recipe": "delayed"}, {"sp": False}, {"tp": 1, "sp": False}):
        assert not any("amax_reduction" in n for n in _names(_rows(**kw))), kw


def test_tp_comm_overlap_keeps_the_reductions():
    names = _names(_rows(tp_comm_overlap=True))
    assert sum(n.endswith("amax_reduction") for n in names) == 4


def test_full_recompute_reruns_the_forward_reductions():
    rows = _rows(recompute="full")
    again = [r for r in rows if r.name.startswith("layer0_recompute_")
             and r.name.endswith("input_amax_reduction")]
    assert len(again) == 2
    assert all((r.ig_comm.group, r.ig_comm.size_bytes) == (GroupKind.TP, 4) for r in again)


def test_timeline_by_hand():
    """TP 2 with SP, one microbatch, α = 1000 ns per ring step, 1 byte/ns. The forward: the
    norm's SP all-gather of 64·64 elements in FP8, 1 B each (TE gathers the quantised
    operand: α + ½·4096 = 3048 ns), the zeroing kernel (4 B:
    2000 + 4/2680 ns → 2001), the blocking 4-byte amax all-reduce (2α + ½·2·4 = 2004 ns)
    while the compute stream waits, then the qkv row. The backward: zeroing + amax pass over
    the local 32 × 64 output gradient of proj (4 + 4096 B: 2·2000 + 4100/2680 → 4002), the
    all-reduce (2004), then proj's dgrad row starts."""
    par = make_par(tp=2, micro_batch=2, global_batch=2, dtype="fp8",
                         fp8_recipe="tensorwise", sequence_parallel=True)
    prog = generate(TINY, par, H100_80, compute=ROOFLINE)
    res = simulate(prog, AlphaBetaNetwork(1000, {g: 1.0 for g in GroupKind}), record_spans=True)
    spans = sorted((s.start_ns, s.end_ns, s.stream, s.label) for s in res.spans if s.rank == 0)
    i = next(k for k, s in enumerate(spans) if s[3] == "layer0_attn_norm.forward")
    t = spans[i][0]
    zero = math.ceil(OVH + 4 / BW - 1e-6)
    expected = [(t, t + 3048, "TP", "layer0_attn_norm.forward"),
                (t + 3048, t + 3048 + zero, "compute", "layer0_attn_qkv_input_amax_reduction"),
                (t + 3048 + zero, t + 5052 + zero, "TP",
                 "layer0_attn_qkv_input_amax_reduction.forward")]
    assert spans[i:i + 3] == expected
    assert spans[i + 3][0] == t + 5052 + zero
    assert spans[i + 3][2:] == ("compute", "layer0_attn_qkv")
    j = next(k for k, s in enumerate(spans)
             if s[3] == "layer0_attn_proj_grad_output_amax_reduction")
    b = spans[j][0]
    pre = math.ceil(2 * OVH + (4 + 2 * 32 * 64) / BW - 1e-6)
    assert spans[j] == (b, b + pre, "compute", "layer0_attn_proj_grad_output_amax_reduction")
    nxt = spans[j + 1:j + 3]
    assert nxt[0][:3] == (b + pre, b + pre + 2004, "TP")
    assert nxt[1][0] == b + pre + 2004 and nxt[1][2:] == ("compute", "layer0_attn_proj")


def test_grouped_linear_scale_kernels_per_expert():
    moe = ModelSpec("m", layers=2, hidden=64, heads=4, vocab=1024, seq_len=32,
                    moe=MoESpec(experts=4, top_k=2, expert_ffn_hidden=96))
    par = make_par(tp=2, micro_batch=2, global_batch=2, dtype="fp8",
                         fp8_recipe="tensorwise", sequence_parallel=True)
    ops = [o for r in transformer_layer_rows(moe, par, Dims.of(moe, par), 0)
           for o in r.fwd + r.ig + r.first_fwd if o.name.startswith("moe_")
           and o.kernel in ("fp8_amax_zero", "fp8_scale")]
    assert len(ops) == 12 and {o.count for o in ops} == {4}
    # 4 kernels of 4 B (zeroing) or 8 B (scale): 4 launches by the roofline
    zero = next(o for o in ops if o.name == "moe_fc1_input_amax_zero")
    assert op_time_ns(zero, H100_80, H100, "fp8") == 16 / BW + 4 * OVH


def test_assumption_line_states_the_tp_reduction():
    assert "all-reduce their 4-byte amax in the TP group" in describe("tensorwise", True)
    assert "TP group" not in describe("tensorwise", False)

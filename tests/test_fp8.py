"""Transformer Engine's FP8 casts (sim/models/features/fp8.py): byte counts of a tiny layer derived
by hand from the tensor shapes, their times (the measured H100 table's streaming bandwidth, else the
roofline), once-per-iteration weight casts, the recipes' closed-form difference, the delayed
recipe's amax all-reduces, the bf16 output layer, and the flag's refusals."""

from __future__ import annotations

import math

import pytest
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, GroupKind
from sim.engine import simulate
from sim.kernels.lookup import TableLookup
from sim.kernels.table import shipped_table
from sim.models import generate
from sim.models.compute import H100, op_time_ns
from sim.models.compute_setup import ComputeSetup
from sim.models.layers import output_rows, transformer_layer_rows
from sim.models.plan import build_model_plan
from sim.models.vocab.dims import Dims
from sim.models.vocab.spec import ModelSpec, MoESpec
from sim.network.simple import AlphaBetaNetwork
from sim.topology.gpu import GpuSpec

H100_80 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
ROOFLINE = ComputeSetup(H100, None, [], None)  # no kernel table: every op by the roofline
# h = 64, 4 heads, ffn 256, 32 tokens per sequence
TINY = ModelSpec("tiny", layers=2, hidden=64, heads=4, vocab=1024, seq_len=32)
H, F, QKV = 64, 256, 3 * 64


def _casts(rows) -> dict[str, tuple[str, int]]:
    """{op name: (phase, bytes)} of the FP8 kernels among ``rows`` (layer prefix dropped)."""
    out = {}
    for r in rows:
        for phase in ("fwd", "ig", "wg", "first_fwd"):
            for op in getattr(r, phase):
                if op.kernel.startswith("fp8_"):
                    out[op.name] = (phase, op.bytes)
    return out


def _layer(recipe: str, tp: int = 1, sp: bool = False, micro_batch: int = 2):
    par = make_par(tp=tp, micro_batch=micro_batch, global_batch=micro_batch,
                         dtype="fp8", fp8_recipe=recipe, sequence_parallel=sp)
    return transformer_layer_rows(TINY, par, Dims.of(TINY, par), 0)


def test_delayed_tp1_bytes_by_hand():
    n = 64  # 2 sequences × 32 tokens
    got = _casts(_layer("delayed"))
    assert got == {
        # LayerNormLinear inputs: the norm writes FP8, only the transpose (1 B read + 1 B write)
        "attn_qkv_input_transpose": ("fwd", 2 * n * H),
        "mlp_fc1_input_transpose": ("fwd", 2 * n * H),
        # Linear inputs: cast + transpose (2 B read, 1 + 1 B written)
        "attn_proj_input_cast_transpose": ("fwd", 4 * n * H),
        "mlp_fc2_input_cast_transpose": ("fwd", 4 * n * F),
        # output gradients before each dgrad GEMM
        "attn_qkv_grad_output_cast_transpose": ("ig", 4 * n * QKV),
        "attn_proj_grad_output_cast_transpose": ("ig", 4 * n * H),
        "mlp_fc1_grad_output_cast_transpose": ("ig", 4 * n * F),
        "mlp_fc2_grad_output_cast_transpose": ("ig", 4 * n * H),
        # weights: 4 B per parameter, once per iteration
        "attn_qkv_weight_cast_transpose": ("first_fwd", 4 * H * QKV),
        "attn_proj_weight_cast_transpose": ("first_fwd", 4 * H * H),
        "mlp_fc1_weight_cast_transpose": ("first_fwd", 4 * H * F),
        "mlp_fc2_weight_cast_transpose": ("first_fwd", 4 * F * H),
    }


def _scale_kernels(names: dict[str, str]) -> dict[str, tuple[str, int]]:
    """TE's two single-thread kernels of each current-scaling quantisation (operand → phase):
    amax zeroing (4 B written) and the scale from the amax (4 B read, 4 B written)."""
    out = {}
    for operand, phase in names.items():
        out[f"{operand}_amax_zero"] = (phase, 4)
        out[f"{operand}_scale"] = (phase, 8)
    return out


def test_tensorwise_tp2_sp_bytes_by_hand():
    n, t = 64, 2  # with SP each rank casts n/t rows of a gathered operand
    got = _casts(_layer("tensorwise", tp=2, sp=True))
    operands = {f"{lin}_{x}": ph for lin in ("attn_qkv", "attn_proj", "mlp_fc1", "mlp_fc2")
                for x, ph in (("input", "fwd"), ("grad_output", "ig"), ("weight", "first_fwd"))}
    assert got == _scale_kernels(operands) | {
        # the norm computes the amax; cast of the local shard, transpose after the gather
        "attn_qkv_input_cast": ("fwd", 3 * n // t * H),
        "attn_qkv_input_transpose": ("wg", 2 * n * H),
        "mlp_fc1_input_cast": ("fwd", 3 * n // t * H),
        "mlp_fc1_input_transpose": ("wg", 2 * n * H),
        # row-parallel inputs (not gathered): amax pass, then cast + transpose
        "attn_proj_input_amax": ("fwd", 2 * n * H // t),
        "attn_proj_input_cast_transpose": ("fwd", 4 * n * H // t),
        "mlp_fc2_input_amax": ("fwd", 2 * n * F // t),
        "mlp_fc2_input_cast_transpose": ("fwd", 4 * n * F // t),
        # column-parallel output gradients: not gathered
        "attn_qkv_grad_output_amax": ("ig", 2 * n * QKV // t),
        "attn_qkv_grad_output_cast_transpose": ("ig", 4 * n * QKV // t),
        "mlp_fc1_grad_output_amax": ("ig", 2 * n * F // t),
        "mlp_fc1_grad_output_cast_transpose": ("ig", 4 * n * F // t),
        # row-parallel output gradients: gathered (amax + cast local, transpose gathered)
        "attn_proj_grad_output_amax": ("ig", 2 * n // t * H),
        "attn_proj_grad_output_cast": ("ig", 3 * n // t * H),
        "attn_proj_grad_output_transpose": ("wg", 2 * n * H),
        "mlp_fc2_grad_output_amax": ("ig", 2 * n // t * H),
        "mlp_fc2_grad_output_cast": ("ig", 3 * n // t * H),
        "mlp_fc2_grad_output_transpose": ("wg", 2 * n * H),
        # weights (this rank's shard): amax 2 B + cast-transpose 4 B per parameter
        "attn_qkv_weight_amax": ("first_fwd", 2 * H * QKV // t),
        "attn_qkv_weight_cast_transpose": ("first_fwd", 4 * H * QKV // t),
        "attn_proj_weight_amax": ("first_fwd", 2 * H // t * H),
        "attn_proj_weight_cast_transpose": ("first_fwd", 4 * H // t * H),
        "mlp_fc1_weight_amax": ("first_fwd", 2 * H * F // t),
        "mlp_fc1_weight_cast_transpose": ("first_fwd", 4 * H * F // t),
        "mlp_fc2_weight_amax": ("first_fwd", 2 * F // t * H),
        "mlp_fc2_weight_cast_transpose": ("first_fwd", 4 * F // t * H),
    }


def test_grouped_linear_casts_of_the_routed_experts_by_hand():
    """TE's GroupedLinear (split_quantize over the experts' token splits) under current
    scaling, TP 2 with SP, ETP = TP, EP 1: 4 experts of 96, top-2 → the expert shards see the
    gathered n·top_k = 64·2 = 128 token copies; fc1 is 64 → 2·96/2 = 96 wide (SwiGLU off),
    fc2 48 → 64. Every operand: amax 2 B + cast-transpose 4 B per element, on all 128 rows
    (the dispatcher gathers bf16 tokens: no FP8 gather); weights: 4 local experts' shards."""
    moe = ModelSpec("m", layers=2, hidden=64, heads=4, vocab=1024, seq_len=32,
                    moe=MoESpec(experts=4, top_k=2, expert_ffn_hidden=96))
    par = make_par(tp=2, micro_batch=2, global_batch=2, dtype="fp8",
                         fp8_recipe="tensorwise", sequence_parallel=True)
    got = _casts(transformer_layer_rows(moe, par, Dims.of(moe, par), 0))
    m, fc1, fc2 = 128, 96 // 2, 96 // 2  # token copies; fc1 output and fc2 input per rank
    experts = {k: v for k, v in got.items() if k.startswith("moe_")}
    # current scaling quantises each expert's split and weight one by one (split_quantize →
    # multi_tensor_quantize_impl): 4 zeroing (4 B) and 4 scale (8 B) kernels per operand
    per_expert = {f"moe_{lin}_{x}_{k}": (ph, 4 * b) for lin in ("fc1", "fc2")
                  for x, ph in (("input", "fwd"), ("grad_output", "ig"), ("weight", "first_fwd"))
                  for k, b in (("amax_zero", 4), ("scale", 8))}
    assert experts == per_expert | {
        "moe_fc1_input_amax": ("fwd", 2 * m * H),
        "moe_fc1_input_cast_transpose": ("fwd", 4 * m * H),
        "moe_fc1_grad_output_amax": ("ig", 2 * m * fc1),
        "moe_fc1_grad_output_cast_transpose": ("ig", 4 * m * fc1),
        "moe_fc2_input_amax": ("fwd", 2 * m * fc2),
        "moe_fc2_input_cast_transpose": ("fwd", 4 * m * fc2),
        "moe_fc2_grad_output_amax": ("ig", 2 * m * H),
        "moe_fc2_grad_output_cast_transpose": ("ig", 4 * m * H),
        "moe_fc1_weight_amax": ("first_fwd", 2 * 4 * H * fc1),
        "moe_fc1_weight_cast_transpose": ("first_fwd", 4 * 4 * H * fc1),
        "moe_fc2_weight_amax": ("first_fwd", 2 * 4 * fc2 * H),
        "moe_fc2_weight_cast_transpose": ("first_fwd", 4 * 4 * fc2 * H),
    }


def test_casts_sit_before_their_gemms():
    rows = {r.name.removeprefix("layer0_"): r for r in _layer("delayed")}
    assert [o.name for o in rows["attn_proj"].fwd] == ["attn_proj_input_cast_transpose", "proj"]
    fc1_ig = [o.name for o in rows["mlp_fc1"].ig]
    assert fc1_ig == ["mlp_act_grad", "mlp_fc1_grad_output_cast_transpose", "fc1_dgrad"]


def test_bf16_has_no_casts():
    par = make_par(micro_batch=2, global_batch=2)
    assert _casts(transformer_layer_rows(TINY, par, Dims.of(TINY, par), 0)) == {}


def test_cast_time_roofline_exact():
    op = next(o for r in _layer("delayed") for o in r.fwd
              if o.name == "attn_proj_input_cast_transpose")
    assert op.bytes == 4 * 64 * 64
    # bytes / (80% of 3.35 TB/s) + the 2 µs per-kernel overhead of H100's element-wise kernels
    assert op_time_ns(op, H100_80, H100, "fp8") == pytest.approx(
        4 * 64 * 64 / (0.8 * 3350e9) * 1e9 + 2000.0, rel=1e-12)


def test_cast_time_from_the_measured_add_bandwidth():
    """A cast-transpose of 8192 × 4096 (134,217,728 bytes) at the measured add kernel's
    bandwidth (sim/data/kernels/h100-sxm.csv, 2026-11-22): between the add rows of 8192 × 1024
    (6 × 8,388,608 B in 22.66 µs) and 2048 × 12288 (6 × 25,165,824 B in 56.66 µs), linear in
    log-bytes."""
    look = TableLookup(shipped_table("h100-sxm.csv"), slots=132)
    b0, t0 = 6 * 8192 * 1024, 22.66e3
    b1, t1 = 6 * 2048 * 12288, 56.66e3
    b = 4 * 8192 * 4096
    w = (math.log(b) - math.log(b0)) / (math.log(b1) - math.log(b0))
    bw = b0 / t0 + w * (b1 / t1 - b0 / t0)
    hit = look.memory_ns("fp8_cast_transpose", 8192 * 4096, shape=(8192, 4096))
    assert hit.time_ns == pytest.approx(b / bw, rel=1e-9)
    assert hit.how == "measured add bandwidth"


def _iteration(recipe: str, microbatches: int = 1, **kw) -> tuple[int, object]:
    par = make_par(micro_batch=2, global_batch=2 * microbatches, dtype="fp8",
                         fp8_recipe=recipe, **kw)
    prog = generate(TINY, par, H100_80, compute=ROOFLINE)
    return simulate(prog, AlphaBetaNetwork(0, {})).iteration_ns, prog


def test_weight_casts_run_once_per_iteration():
    it1, prog = _iteration("delayed", 1)
    it3, _ = _iteration("delayed", 3)
    layers = prog.stages[0].chunks[0]
    per_mb = sum(x.forward.compute_ns + x.input_grad.compute_ns + x.weight_grad.compute_ns
                 for x in layers)
    once = sum(x.first_forward_ns for x in layers)
    opt = sum(t.compute_ns for t in prog.stages[0].epilogue)
    plan = build_model_plan(TINY, make_par(micro_batch=2, global_batch=2, dtype="fp8"))
    rows = [r for r in plan.stages[0].chunks[0] if r.first_fwd]
    assert sum(len(r.first_fwd) for r in rows) == 2 * 4  # 2 layers × 4 linears
    assert once == sum(math.ceil(_op_ns(r.first_fwd) - 1e-6) for r in rows)
    assert it1 == per_mb + once + opt  # one GPU: compute back to back
    assert it3 - it1 == 2 * per_mb  # later microbatches reuse the cached FP8 weights


def _op_ns(ops) -> float:
    return math.fsum(op_time_ns(o, H100_80, H100, "fp8") for o in ops)


def test_recipes_differ_by_the_closed_form():
    """tensorwise − delayed on one GPU (no amax group): per microbatch and layer the qkv/fc1
    inputs are cast (4 B) instead of transposed (2 B), an amax pass reads the proj/fc2 inputs
    and every output gradient (2 B/element, 6 kernels), each of the 8 quantisations adds
    TE's amax-zeroing and scale kernels (4 + 8 B, 2 kernels), the delayed recipe's two
    amax/scale update kernels per chunk are gone; once per iteration an amax pass reads
    every weight, with its zeroing and scale kernels."""
    m = 3
    n, layers = 64, TINY.layers
    bw = 0.8 * 3350e9 / 1e9  # bytes per ns
    o = H100.elementwise_overhead_ns
    scale = (4 + 8) / bw + 2 * o  # zeroing + scale kernels of one quantisation
    per_layer = (2 * (2 * n * H) + 2 * n * H + 2 * n * F + 2 * n * (QKV + H + F + H)) / bw \
        + 6 * o + 8 * scale
    linears = 4 * layers
    updates = 2 * (linears * 3 * 4) / bw + o + 2 * (linears * 2 * 4) / bw + o
    weights = 2 * (H * QKV + H * H + H * F + F * H) * layers / bw + linears * (o + scale)
    expected = m * (layers * per_layer - updates) + weights
    tw, _ = _iteration("tensorwise", m)
    dl, _ = _iteration("delayed", m)
    phases = 3 * 40  # each phase is rounded up to whole ns
    assert abs((tw - dl) - expected) <= m * phases


def test_delayed_amax_all_reduce_per_chunk():
    par = make_par(pp=2, vpp=1, dp=2, micro_batch=2, global_batch=8, dtype="fp8")
    plan = build_model_plan(TINY, par)
    for st in plan.stages:
        rows = st.chunks[0]
        amax = [r for r in rows if "fp8_amax_reduction" in r.name]
        assert [r.name.split("_", 1)[1] for r in amax] == ["fp8_amax_reduction_bwd",
                                                          "fp8_amax_reduction_fwd"]
        bwd, fwd = amax
        # one layer (4 linears) per stage: 3 forward and 2 backward amaxes of 4 B each
        assert (fwd.fwd_comm.kind, fwd.fwd_comm.group, fwd.fwd_comm.size_bytes) == (
            CollKind.ALLREDUCE, GroupKind.DP, 4 * 3 * 4)
        assert (bwd.ig_comm.kind, bwd.ig_comm.group, bwd.ig_comm.size_bytes) == (
            CollKind.ALLREDUCE, GroupKind.DP, 4 * 2 * 4)
        assert fwd.fwd_comm.blocking and bwd.ig_comm.blocking
        layer_rows = [r for r in rows if r.name.startswith("layer") and r not in amax]
        first = rows.index(layer_rows[0])
        assert rows.index(bwd) == first - 1  # walked right after the chunk's first layer
    tensorwise = build_model_plan(TINY, make_par(dp=2, micro_batch=2, global_batch=4,
                                                       dtype="fp8", fp8_recipe="tensorwise"))
    assert not any("amax_reduction" in r.name for r in tensorwise.stages[0].rows())


def test_output_layer_runs_in_bf16():
    par = make_par(micro_batch=2, global_batch=2, dtype="fp8")
    dm = Dims.of(TINY, par)
    rows = output_rows(TINY, dm, True)
    gemms = [o for r in rows for o in r.ops() if o.kernel == "gemm"]
    assert {o.dtype for o in gemms} == {"bf16"}
    logits = gemms[0]
    assert logits.bytes == 2 * (64 * 64 + 64 * 1024) + 2 * 64 * 1024  # bf16 operands
    # timed at the bf16 peak, not the fp8 one
    assert op_time_ns(logits, H100_80, H100, "fp8") == op_time_ns(logits, H100_80, H100, "bf16")


RUN = ["--model", "gpt2-medium", "--topo", "dgx-h100-1024", "--gpus", "8", "--tp", "2",
       "--global-batch", "8", "--quiet"]


@pytest.mark.parametrize(("args", "needle"), [
    (["--fp8-recipe", "tensorwise"], "--fp8-recipe: applies to --dtype fp8 runs"),
    (["--dtype", "fp8", "--fp8-recipe", "mxfp8"], "GPU H100-SXM5-80GB (family H100) has no "
                                                  "MXFP8 path"),
    (["--dtype", "fp8", "--fp8-recipe", "blockwise"], "blockwise (block scaling) is a "
                                                      "Megatron-Core"),
    (["--dtype", "fp8", "--fp8-recipe", "current"], "expected delayed, tensorwise or mxfp8"),
])
def test_recipe_refusals(args, needle, capsys):
    assert main([*RUN, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_recipe_refused_with_a_workload_file(capsys):
    rc = main(["--workload", "aicb-gpt-h16384-tp8-pp16-dp8-1024gpu", "--topo", "dgx-a100-1024",
               "--fp8-recipe", "delayed", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--fp8-recipe" in err[0], err


def test_default_recipe_is_stated(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main([*RUN, "--dtype", "fp8", "--json", str(out)]) == 0
    text = out.read_text()
    assert "--fp8-recipe delayed (Megatron-Core's default)" in text


def test_aicb_text_carries_the_weight_casts_once():
    from sim.models.aicb_writer import FIRST_FORWARD_ROW, aicb_text
    par = make_par(micro_batch=2, global_batch=6, dtype="fp8")
    prog = generate(TINY, par, H100_80, compute=ROOFLINE)
    once = sum(x.first_forward_ns for x in prog.stages[0].chunks[0])
    lines = aicb_text(prog).splitlines()
    rows = [ln.split("\t") for ln in lines[2:]]
    casts = [r for r in rows if r[0] == FIRST_FORWARD_ROW]
    assert len(casts) == 1 and int(casts[0][2]) == once > 0  # after the 3 unrolled blocks
    assert rows.index(casts[0]) == len(rows) - 1 - sum(r[0].startswith("optimizer")
                                                        for r in rows)


def test_sweep_refuses_the_recipe_without_fp8(tmp_path, capsys):
    rc = main(["sweep", "--model", "gpt2-medium", "--topo", "tiny-fattree-8", "--tp", "1",
               "--pp", "1", "--global-batch", "16", "--fp8-recipe", "tensorwise", "--out",
               str(tmp_path / "s"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--fp8-recipe: applies to --dtype fp8" in err[0], err

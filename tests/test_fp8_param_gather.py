"""Megatron-Core's --fp8-param-gather (sim/models/features/fp8_params.py): which weights are FP8,
the parameter all-gather's bytes derived by hand, a hand-worked (time, what) timeline of the
optimizer step, the first forward without weight casts, never slower with DP ≥ 2, and the
refusals."""

from __future__ import annotations

import json
import math

import pytest
from conftest import ROOT
from par_support import make_par
from test_fp8 import H100_80, QKV, ROOFLINE, TINY, F, H, _casts

from sim.cli import main
from sim.comm import CollKind, GroupKind
from sim.engine import simulate
from sim.models import ParallelConfig, generate, load_model
from sim.models.layers import transformer_layer_rows
from sim.models.plan import build_model_plan
from sim.models.vocab.dims import Dims
from sim.network.simple import AlphaBetaNetwork

#: the FP8 weights of one TINY layer: qkv 64×192, proj 64×64, fc1 64×256, fc2 256×64
LAYER_FP8 = H * QKV + H * H + H * F + F * H  # 49,152
#: TINY's bf16 parameters: word embedding 1024×64 and learned positions 32×64, per layer two
#: LayerNorms (weight + bias, 2·128) and the linears' biases (192 + 64 + 256 + 64), the final
#: LayerNorm (128); the output layer is tied to the embedding
BF16 = 1024 * 64 + 32 * 64 + 2 * (2 * 128 + 192 + 64 + 256 + 64) + 128  # 69,376
HBM_B_PER_NS = 0.8 * 3350  # the roofline's element-wise bandwidth (80% of 3.35 TB/s)
OVERHEAD_NS = 2000  # the roofline's per element-wise kernel overhead on H100


def _par(**kw) -> ParallelConfig:
    base = dict(dp=2, micro_batch=2, global_batch=4, dtype="fp8", distributed_optimizer=True,
                fp8_param_gather=True)
    return make_par(**{**base, **kw})


def test_the_te_linear_weights_are_fp8_and_not_cast_in_forward():
    par = _par(overlap_param_gather=True)
    rows = transformer_layer_rows(TINY, par, Dims.of(TINY, par), 0)
    fp8 = {r.name.split("_", 1)[1]: r.fp8_params for r in rows if r.fp8_params}
    assert fp8 == {"attn_qkv": H * QKV, "attn_proj": H * H, "mlp_fc1": H * F, "mlp_fc2": F * H}
    weights = {k: v for k, v in _casts(rows).items() if "weight" in k}
    # no cast: the FP8 transpose after the all-gather, 1 B read + 1 B written per parameter
    assert weights == {"attn_qkv_weight_transpose": ("first_fwd", 2 * H * QKV),
                       "attn_proj_weight_transpose": ("first_fwd", 2 * H * H),
                       "mlp_fc1_weight_transpose": ("first_fwd", 2 * H * F),
                       "mlp_fc2_weight_transpose": ("first_fwd", 2 * F * H)}
    # without --overlap-param-gather the transpose follows the all-gather in the step
    par = _par()
    rows = transformer_layer_rows(TINY, par, Dims.of(TINY, par), 0)
    assert not any("weight" in k for k in _casts(rows))
    # norms, embedding and output layer stay bf16
    plan = build_model_plan(TINY, par)
    other = [r for r in plan.stages[0].rows() if r.params and not r.fp8_params]
    assert sum(r.params for r in other) + sum(
        r.params - r.fp8_params for r in plan.stages[0].rows() if r.fp8_params) == BF16


def test_overlapped_all_gather_bytes_by_hand():
    """One stage, buckets far below 40M parameters: the embedding's bucket (2 B/parameter),
    the transformer layers' bucket (1 B per FP8 weight, 2 per other parameter) and the
    output rows' (the final LayerNorm; the output weight is tied)."""
    on = generate(TINY, _par(overlap_param_gather=True), H100_80, compute=ROOFLINE)
    off = generate(TINY, _par(overlap_param_gather=True, fp8_param_gather=False), H100_80,
                   compute=ROOFLINE)
    sizes = [t.comm.size_bytes for t in on.stages[0].prologue]
    layers_bf16 = 2 * (2 * 128 + 192 + 64 + 256 + 64)
    assert sorted(sizes) == sorted([2 * (1024 * 64 + 32 * 64),
                                    2 * LAYER_FP8 * 1 + 2 * layers_bf16, 2 * 128])
    assert all(t.comm.kind is CollKind.ALLGATHER and t.comm.group is GroupKind.DP
               for t in on.stages[0].prologue)
    before = sum(t.comm.size_bytes for t in off.stages[0].prologue)
    assert before - sum(sizes) == 2 * LAYER_FP8  # one byte saved per FP8 parameter


def _kernel_ns(nbytes: int) -> int:
    return math.ceil(nbytes / HBM_B_PER_NS + OVERHEAD_NS)


@pytest.mark.parametrize("recipe", ["delayed", "tensorwise"])
def test_optimizer_step_timeline_by_hand(recipe):
    """DP 2, one microbatch, every group at 1 GB/s (1 byte/ns), no latency. After the Adam
    step each rank quantises its half of the 98,304 FP8 weights (49,152 elements): delayed —
    the cast (3 B/element), then the MAX all-reduce of 8 fp32 amaxes (2·(1/2)·32 B = 32 ns);
    tensorwise — an amax pass (2 B/element), the all-reduce, then the cast. Then the blocking
    all-gather of 2·69,376 + 98,304 = 237,056 B ((1/2)·237,056 = 118,528 ns) and the FP8
    transposes of the gathered weights (2 B/parameter)."""
    prog = generate(TINY, _par(fp8_recipe=recipe), H100_80, compute=ROOFLINE)
    res = simulate(prog, AlphaBetaNetwork(0, {g: 1.0 for g in GroupKind}), record_spans=True)
    spans = sorted((s.start_ns, s.end_ns, s.stream, s.label) for s in res.spans
                   if s.rank == 0 and s.start_ns >= 0)
    t0 = next(e for _s, e, _st, label in spans if label == "optimizer")
    log = [(s - t0, e - t0, stream, label) for s, e, stream, label in spans if s >= t0]
    shard = 2 * LAYER_FP8 // 2
    cast, amax = _kernel_ns(3 * shard), _kernel_ns(2 * shard)
    ag = (2 * BF16 + 2 * LAYER_FP8) // 2
    tr = _kernel_ns(2 * 2 * LAYER_FP8)
    if recipe == "delayed":
        expected = [(0, cast, "compute", "fp8_param_cast"),
                    (cast, cast + 32, "DP", "fp8_param_cast")]
        t = cast + 32
    else:
        expected = [(0, amax, "compute", "fp8_param_amax"),
                    (amax, amax + 32, "DP", "fp8_param_amax"),
                    (amax + 32, amax + 32 + cast, "compute", "fp8_param_cast")]
        t = amax + 32 + cast
    expected += [(t, t + ag, "DP", "param_allgather"),
                 (t + ag, t + ag + tr, "compute", "fp8_param_transpose")]
    assert log == expected
    assert res.iteration_ns == t0 + t + ag + tr


def test_no_weight_cast_in_the_first_forward():
    """With --overlap-param-gather the first forward's once-per-iteration work per weight is
    the 2-byte transpose instead of the 4-byte cast+transpose."""
    layers = {}
    for fp in (False, True):
        prog = generate(TINY, _par(overlap_param_gather=True, fp8_param_gather=fp), H100_80,
                        compute=ROOFLINE)
        layers[fp] = sum(x.first_forward_ns for x in prog.stages[0].chunks[0])
    per = [H * QKV, H * H, H * F, F * H]
    assert layers[False] == 2 * sum(_kernel_ns(4 * w) for w in per)
    assert layers[True] == 2 * sum(_kernel_ns(2 * w) for w in per)


@pytest.mark.parametrize("tp,pp,dp,vpp,gb", [(1, 1, 8, 1, 16), (2, 2, 2, 1, 16),
                                             (1, 4, 2, 1, 32), (2, 2, 2, 2, 16)])
@pytest.mark.parametrize("recipe", ["delayed", "tensorwise"])
@pytest.mark.parametrize("overlap", [False, True])
def test_fp8_param_gather_never_slows_the_iteration(tp, pp, dp, vpp, gb, recipe, overlap):
    """DP ≥ 2: the step's quantisation reads 2 (+2) B of 1/DP of each weight where the first
    forward read 2 (+2) B more of all of it, and the all-gathers carry a byte less per
    weight; the amax all-reduce is one latency. (At DP 1 the shard is the whole weight and
    the cast + transpose, 3 + 2 B, cost more than the cast+transpose's 4 B.)"""
    model = load_model(ROOT / "workloads/models/gpt2-medium.yaml")
    net = AlphaBetaNetwork(5000, {g: 200.0 if g is GroupKind.TP else 20.0 for g in GroupKind})
    times = []
    for fp in (False, True):
        par = make_par(tp=tp, pp=pp, dp=dp, vpp=vpp, global_batch=gb, dtype="fp8",
                             fp8_recipe=recipe, distributed_optimizer=True,
                             overlap_param_gather=overlap, fp8_param_gather=fp)
        times.append(simulate(generate(model, par, H100_80, compute=ROOFLINE), net).iteration_ns)
    assert times[1] < times[0]


def _model_args(*flags: str) -> list[str]:
    return ["--model", str(ROOT / "workloads/models/gpt2-medium.yaml"), "--topo",
            str(ROOT / "topologies/dgx-h100-1024.yaml"), "--gpus", "8", "--tp", "2",
            "--global-batch", "8", *flags]


@pytest.mark.parametrize("flags,needle", [
    (["--distributed-optimizer"], "--dtype fp8"),
    (["--dtype", "fp8"], "--distributed-optimizer"),
    (["--dtype", "fp8", "--fsdp"], "not modelled"),
    (["--dtype", "fp8", "--zero", "1"], "not modelled"),
])
def test_refusals_are_one_line(capsys, flags, needle):
    assert main(_model_args("--fp8-param-gather", *flags)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--fp8-param-gather" in err and needle in err


def test_stated_in_the_assumptions(tmp_path):
    out = tmp_path / "r.json"
    assert main(_model_args("--dtype", "fp8", "--distributed-optimizer",
                            "--overlap-param-gather", "--fp8-param-gather", "--json",
                            str(out), "--quiet")) == 0
    got = json.loads(out.read_text())["assumptions"]
    assert any(a.startswith("--fp8-param-gather") for a in got)
    assert any("weights FP8 parameters" in a for a in got)  # the recipe line defers to it
    assert any("1 byte per FP8 weight, 2 per other/parameter" in a for a in got)

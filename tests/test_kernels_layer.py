"""A whole transformer layer's forward + backward compute on an H100, predicted with the
shipped kernel table, against a layer composed from the measured H100 kernels (±7%).

The reference layer here is *composed* from the kernels measured on one H100 SXM on
2026-11-22 (sim/data/kernels/h100-sxm.csv), independently of the simulator's lookup rules (the
comparison with a real layer timed on an H100 is tests/test_kernels_layer_measured.py):

* each linear layer runs three GEMMs over the same (tokens, in, out) triple (forward, input
  gradient, weight gradient); each takes the measured time of the measured GEMM whose sorted
  triple is nearest (sum of |log| ratios of the sorted sizes), scaled by the FLOP ratio
  (measured efficiency kept); for GPT-3 175B at TP 8 every triple was measured;
* attention forward and backward: the measured kernel of the backend at the same shape;
* norms, activation and residual kernels: measured at the same [tokens × width] where
  measured; a backward pass that was not measured (activation, residual, RMSNorm) is its bytes
  (bf16: activation backward reads x and dy, writes dx; residual backward reads dy and the
  mask, writes dx) at the measured bandwidth of the same kernel's forward.

The simulator's layer is the model generator's own operator list (sim/models/layers.py),
timed by :class:`sim.models.compute.Timer` with the table (interpolating where the table has
no exact shape, roofline for what it lacks).
"""

import math

import pytest
from conftest import WORKLOADS
from par_support import make_par

from sim.kernels.lookup import TableLookup
from sim.kernels.table import shipped_table
from sim.models import load_model
from sim.models.compute import H100, Timer
from sim.models.layers import transformer_layer_rows
from sim.models.vocab.dims import Dims
from sim.topology.gpu import GpuSpec

TABLE = shipped_table("h100-sxm.csv")
H100_SXM = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)


def _rows(kind):
    return TABLE.of_kind(kind)


def _gemm_ms(tokens, k, n):
    want = sorted((tokens, k, n))
    best = min(_rows("gemm_bf16"), key=lambda r: sum(
        abs(math.log(a / b)) for a, b in zip(want, sorted((r.get("m"), r.get("k"), r.get("n"))),
                                             strict=True)))
    return best.time_ms * (tokens * k * n) / (best.get("m") * best.get("k") * best.get("n"))


def _mem_ms(kind, tokens, h):
    for r in _rows(kind):
        if (r.get("tokens"), r.get("h")) == (tokens, h):
            return r.time_ms
    raise KeyError((kind, tokens, h))


def _bandwidth(kind, bytes_per_elem, tokens, h):
    """Bytes per ms of ``kind`` measured at [tokens × h] (or the nearest measured size)."""
    best = min(_rows(kind), key=lambda r: abs(math.log(r.get("tokens") * r.get("h")
                                                       / (tokens * h))))
    return bytes_per_elem * best.get("tokens") * best.get("h") / best.time_ms


def _attn_ms(backend, b, hq, hkv, s, d, way):
    for r in _rows(f"attn_{backend}_{way}"):
        if (r.get("b"), r.get("hq"), r.get("hkv"), r.get("s"), r.get("d")) == (b, hq, hkv, s, d):
            return r.time_ms
    raise KeyError((backend, b, hq, hkv, s, d))


def composed_layer_ms(model, t, b, backend):
    n, h, s, d = b * model.seq_len, model.hidden, model.seq_len, model.head_dim
    q_out = (h + 2 * model.kv_heads * d) // t
    f = model.ffn_hidden // t
    f1 = 2 * f if model.gated_mlp else f
    gemms = 3 * (_gemm_ms(n, h, q_out) + _gemm_ms(n, h // t, h) + _gemm_ms(n, h, f1)
                 + _gemm_ms(n, f, h))
    hkv = max(1, model.kv_heads // t)
    attn = _attn_ms(backend, b, model.heads // t, hkv, s, d, "fwd") + _attn_ms(
        backend, b, model.heads // t, hkv, s, d, "bwd")
    if model.norm == "layernorm":
        norms = 2 * (_mem_ms("layernorm_fwd", n, h) + _mem_ms("layernorm_bwd", n, h))
    else:  # RMSNorm backward not measured: its 6 bytes/element at the forward's bandwidth
        bw = _bandwidth("rmsnorm_fwd", 4, n, h)
        norms = 2 * (_mem_ms("rmsnorm_fwd", n, h) + 6 * n * h / bw)
    if model.gated_mlp:  # SwiGLU not measured: 6 / 10 bytes per element at GeLU's bandwidth
        bw = _bandwidth("gelu_fwd", 4, n, f)
        act = (6 + 10) * n * f / bw
    else:
        bw = _bandwidth("gelu_fwd", 4, n, f)
        act = (4 + 6) * n * f / bw
    res_kind, res_b = ("dropout_add", 7) if model.position_embedding == "learned" else ("add", 6)
    res_f = _mem_ms(res_kind, n, h)
    res_b_ms = 5 * n * h / _bandwidth(res_kind, res_b, n, h)
    return gemms + attn + norms + act + 2 * (res_f + res_b_ms)


def simulated_layer_ms(model, t, b, backend):
    par = make_par(tp=t, micro_batch=b, global_batch=b, attention_backend=backend)
    rows = transformer_layer_rows(model, par, Dims.of(model, par), 0)
    # the reference writes weight gradients in bf16 (no fp32 main-grad accumulation)
    timer = Timer(H100_SXM, H100, TableLookup(TABLE, slots=132), par.backend,
                  main_grad_fp32=False)
    ops = [op for r in rows for op in (*r.fwd, *r.ig, *r.wg)]
    return timer.ops_ns(ops, "bf16") / 1e6, timer


CASES = [("gpt3-175b.yaml", 8, 4), ("llama3-8b.yaml", 1, 1)]


@pytest.mark.parametrize("backend", ["flash", "fused"])
@pytest.mark.parametrize("name, t, b", CASES)
def test_layer_compute_within_7_percent_of_the_composed_measured_layer(name, t, b, backend):
    model = load_model(WORKLOADS / "models" / name)
    table_backend = "cudnn" if backend == "fused" else "flash"
    ref = composed_layer_ms(model, t, b, table_backend)
    got, timer = simulated_layer_ms(model, t, b, backend)
    assert got == pytest.approx(ref, rel=0.07), (name, backend, got, ref)
    assert timer.table_ns > 0.9 * (timer.table_ns + timer.roofline_ns)

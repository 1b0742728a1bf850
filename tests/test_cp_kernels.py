"""Context-parallel ring attention runs the kernels TransformerEngine's AttnFuncWithCPAndKVP2P
runs (sim.models.features.context): step 0 the causal call of the rank's s/N tokens, later steps the
slower of the two half-size non-causal calls, and the element-wise merge/accumulation kernels,
each with hand-derived bytes and times read off the shipped H100 table."""

import math

import pytest
from conftest import ROOT
from par_support import make_par

from sim.kernels.attention import BLOCK
from sim.models.compute_setup import resolve_compute, timer_for
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import ModelSpec
from sim.topology import load_topology

# Llama-3-8B-like layer with a 16,384-token sequence: at CP 2 every rank attends with 8,192
# queries, 32 heads, 8 KV heads, head dim 128 — a shape the shipped H100 table measured.
M = ModelSpec("cp-test", layers=2, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
              gated_mlp=True, bias=False, norm="rmsnorm", position_embedding="rope",
              tied_embeddings=False, vocab=128256, seq_len=16384)
# sim/data/kernels/h100-sxm.csv, rows attn_{cudnn,flash}_{fwd,bwd} b=1 s=8192 hq=32 hkv=8
# d=128 causal (ms)
MEASURED_MS = {"fused": (0.90394, 2.86904), "flash": (1.73782, 4.99936)}
TABLE_KIND = {"fused": "cudnn", "flash": "flash"}
# the same table's add rows [tokens × h] bf16, 6 bytes per element (ms)
ADD_MS = {(8192, 1024): 0.02266, (8192, 4096): 0.07251, (2048, 12288): 0.05666}
Q = 8192 * 4096  # elements of Q (and of the output) on the rank: 8192 tokens × 32 heads × 128
KV = 8192 * 2048  # elements of K and V together: 8192 tokens × 2 × 8 heads × 128


def _add_bandwidth(nbytes):
    """The add rows' bandwidth (bytes/ns), linear in log-bytes between the two measured sizes
    that bracket ``nbytes`` (8192×1024: 50.3 MB, 2048×12288: 151.0 MB)."""
    (b0, t0), (b1, t1) = [(6 * r * c, ADD_MS[(r, c)] * 1e6) for r, c in
                          ((8192, 1024), (2048, 12288))]
    assert b0 <= nbytes <= b1
    w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
    return b0 / t0 + w * (b1 / t1 - b0 / t0)


def _rows(backend):
    par = make_par(cp=2, dp=2, global_batch=2, attention_backend=backend)
    rows = build_model_plan(M, par).stages[0].chunks[0]
    gpu = load_topology(str(ROOT / "topologies/dgx-h100-scalable.yaml"), nodes=1).gpu
    timer = timer_for(gpu, resolve_compute(gpu), par.backend)
    return {r.name[len("layer0_"):]: r for r in rows if r.name.startswith("layer0_attn_cp")}, timer


@pytest.mark.parametrize("backend", ["fused", "flash"])
def test_ring_attention_rows_run_transformer_engines_kernels(backend):
    rows, timer = _rows(backend)
    assert list(rows) == ["attn_cp0_dkv", "attn_cp0", "attn_cp1_dkv", "attn_cp1",
                          "attn_cp_merge"]

    def ns(op):
        return timer.op_ns(op, "bf16")[0]

    fwd_ms, bwd_ms = MEASURED_MS[backend]
    # step 0: the causal call of the rank's two chunks, the measured kernel
    attn, = rows["attn_cp0"].fwd
    assert attn.shape == (1, 32, 8, 8192, 128, 1)
    assert ns(attn) == pytest.approx(fwd_ms * 1e6, abs=1)
    grad, part, dq = rows["attn_cp0"].ig
    assert ns(grad) == pytest.approx(bwd_ms * 1e6, abs=1) and ns(part) == 0
    # dq.add_ over Q (bf16: 6 bytes per element): the measured add of 8192 × 4096
    assert (dq.kernel, dq.shape, dq.bytes) == ("add", (8192, 4096), 6 * Q)
    assert ns(dq) == pytest.approx(ADD_MS[(8192, 4096)] * 1e6)
    # step 1: the slower of 8192 queries × 4096 keys and 4096 queries × 8192 keys; greedy on
    # 132 SMs with equal tiles the makespan is ceil(tiles/132) waves of one tile
    attn, lse = rows["attn_cp1"].fwd
    assert attn.shape == (1, 32, 8, 8192, 128, 0, 4096) and attn.flops == 4 * 32 * 8192**2 * 128
    fit_f = timer.lookup.attention_model(f"attn_{TABLE_KIND[backend]}_fwd")
    fit_b = timer.lookup.attention_model(f"attn_{TABLE_KIND[backend]}_bwd")
    nq, nk = 8192 // BLOCK, 4096 // BLOCK  # 64 and 32 blocks

    def waves(fit, tiles, walk):
        c0, cb = fit.params(128)
        return fit.launch_us + math.ceil(32 * tiles / 132) * (c0 + walk * cb)

    fwd_us = max(waves(fit_f, nq, nk), waves(fit_f, nk, nq))  # 16·(c0+32cb), 8·(c0+64cb)
    assert ns(attn) == pytest.approx(fwd_us * 1e3, rel=1e-9)
    grad, part, dq = rows["attn_cp1"].ig
    bwd_us = max(waves(fit_b, nk, nq), waves(fit_b, nq, nk))  # key tiles walk the queries
    assert ns(grad) == pytest.approx(bwd_us * 1e3, rel=1e-9) and ns(part) == 0
    # the LSE merge (fp32, 12 bytes per query row and head): 3.1 MB, below the smallest
    # measured add, so the roofline times it
    assert (lse.kernel, lse.bytes) == ("cp_lse_correction", 12 * 8192 * 32)
    # first backward step: dq.copy_ over Q (4 bytes per element: 134 MB, between measured adds)
    assert (dq.kernel, dq.bytes) == ("cp_copy", 4 * Q)
    assert ns(dq) == pytest.approx(4 * Q / _add_bandwidth(4 * Q))
    # dK/dV: copies at the first backward step, adds at the last (two kernels each)
    dkv, = rows["attn_cp1_dkv"].ig
    assert (dkv.kernel, dkv.count, dkv.shape, dkv.bytes) == ("cp_copy", 2, (8192, 1024), 4 * KV)
    dkv, = rows["attn_cp0_dkv"].ig
    assert (dkv.kernel, dkv.count, dkv.shape, dkv.bytes) == ("add", 2, (8192, 1024), 6 * KV)
    assert ns(dkv) == pytest.approx(2 * ADD_MS[(8192, 1024)] * 1e6)
    # forward: K and V concatenated into the send buffer (67 MB); after the last step the
    # output merge of step 0 (4 bytes per element) and of step 1 (6: the measured add's bytes)
    cat, = rows["attn_cp0_dkv"].fwd
    assert (cat.kernel, cat.bytes) == ("cp_copy", 4 * KV)
    assert ns(cat) == pytest.approx(4 * KV / _add_bandwidth(4 * KV))
    init, corr = rows["attn_cp_merge"].fwd
    assert (init.bytes, corr.bytes, corr.shape) == (4 * Q, 6 * Q, (8192, 4096))
    assert ns(corr) == pytest.approx(ADD_MS[(8192, 4096)] * 1e6)
    send, = rows["attn_cp_merge"].ig
    assert (send.kernel, send.bytes) == ("cp_copy", 4 * KV)
    assert rows["attn_cp1_dkv"].fwd == ()


def test_half_steps_execute_the_work_of_the_causal_step():
    """Every ring step counts the same model FLOPs; the half calls' executed blocks (sq·sq/2)
    equal the causal call's executed triangle, and the tile model prices them apart."""
    rows, timer = _rows("fused")
    a0, a1 = rows["attn_cp0"].fwd[0], rows["attn_cp1"].fwd[0]
    assert a0.flops == a1.flops
    assert timer.op_ns(a1, "bf16")[0] != pytest.approx(timer.op_ns(a0, "bf16")[0], rel=0.01)

"""Context-parallel attention steps are timed by the kernel table as the causal attention
kernel of the rank's s/N tokens (not by the roofline's median small-kernel efficiency)."""

import pytest
from conftest import ROOT

from sim.models.compute_setup import resolve_compute, timer_for
from sim.models.parallel import ParallelConfig
from sim.models.plan import build_model_plan
from sim.models.spec import ModelSpec
from sim.topology import load_topology

# Llama-3-8B-like layer with a 16,384-token sequence: at CP 2 every rank attends with 8,192
# queries, 32 heads, 8 KV heads, head dim 128 — a shape the shipped H100 table measured.
M = ModelSpec("cp-test", layers=2, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
              gated_mlp=True, bias=False, norm="rmsnorm", position_embedding="rope",
              tied_embeddings=False, vocab=128256, seq_len=16384)
# sim/data/kernels/h100-sxm.csv, rows attn_{cudnn,flash}_{fwd,bwd} b=1 s=8192 hq=32 hkv=8
# d=128 causal (ms)
MEASURED_MS = {"fused": (0.90394, 2.86904), "flash": (1.73782, 4.99936)}


@pytest.mark.parametrize("backend", ["fused", "flash"])
def test_ring_attention_step_is_the_measured_kernel(backend):
    par = ParallelConfig(cp=2, dp=2, global_batch=2, attention_backend=backend)
    rows = build_model_plan(M, par).stages[0].chunks[0]
    steps = [r for r in rows if r.name.startswith("layer0_attn_cp")]
    assert [r.name for r in steps] == ["layer0_attn_cp0", "layer0_attn_cp1"]
    gpu = load_topology(str(ROOT / "topologies/dgx-h100-scalable.yaml"), nodes=1).gpu
    timer = timer_for(gpu, resolve_compute(gpu), par.backend)
    fwd_ms, bwd_ms = MEASURED_MS[backend]
    for r in steps:
        (op,) = r.fwd
        assert op.shape == (1, 32, 8, 8192, 128, 1)
        assert timer.op_ns(op, "bf16")[0] == pytest.approx(fwd_ms * 1e6, abs=1)
        grad, recompute_qk = r.ig
        assert timer.op_ns(grad, "bf16")[0] == pytest.approx(bwd_ms * 1e6, abs=1)
        assert timer.op_ns(recompute_qk, "bf16")[0] == 0  # inside the backward kernel

"""Megatron-Core's fused cross entropy (sim/models/features/cross_entropy.py): the TP
all-reduces of one microbatch's loss in closed form (unfused: 3 of 4·b·s bytes; fused native:
the max, 4·b·s, then predicted logits and exp sums batched, 8·b·s), the loss kernels' bytes and
their roofline time worked by hand on a tiny model, the report's line and the refusals."""

import pytest
from conftest import run_json
from par_support import make_par

from sim.comm import CollKind
from sim.models import build_model_plan
from sim.models.compute import A100, ops_time_ns
from sim.models.vocab.spec import ModelSpec
from sim.topology.gpu import GpuSpec

# a GPU of round bandwidth: at 80% of 2000 GB/s, 1600 bytes per ns (as tests/test_models_rope)
GPU = GpuSpec("round", {"bf16": 100.0}, 80, 2000)
# seq 8, vocab 128; Megatron pads the vocabulary to a multiple of 128·TP
TINY = ModelSpec("tiny-ce", layers=2, hidden=16, heads=4, vocab=128, seq_len=8, ffn_hidden=32,
                 gated_mlp=True, bias=False, norm="rmsnorm", position_embedding="rope",
                 tied_embeddings=False)


def loss_rows(tp, b, **kw):
    par = make_par(tp=tp, micro_batch=b, global_batch=b, **kw)
    rows = build_model_plan(TINY, par).stages[-1].rows()
    return [r for r in rows if r.name.startswith("output_cross_entropy")]


def all_reduces(rows):
    return [r.fwd_comm.size_bytes for r in rows
            if r.fwd_comm is not None and r.fwd_comm.kind == CollKind.ALLREDUCE]


@pytest.mark.parametrize("tp, b", [(2, 1), (2, 3), (4, 2)])
def test_tp_all_reduces_of_the_loss_in_closed_form(tp, b):
    n = b * 8  # tokens of one microbatch: b·s
    assert all_reduces(loss_rows(tp, b)) == [4 * n] * 3
    assert all_reduces(loss_rows(tp, b, cross_entropy_loss_fusion=True)) == [4 * n, 8 * n]
    # the same count and bytes in all: 12n unfused, 12n fused, in 3 and 2 calls
    assert all_reduces(loss_rows(1, b)) == all_reduces(
        loss_rows(1, b, cross_entropy_loss_fusion=True)) == []


def test_loss_kernels_bytes_and_time_by_hand():
    # TP 2, b 2: n = 16 tokens; vocabulary 128 padded to 256 (multiple of 128·2), 128 per GPU:
    # e = 16·128 = 2048 logits per GPU; A = 2 (bf16), fp32 4
    e = 2048
    unfused = loss_rows(2, 2)
    fused = loss_rows(2, 2, cross_entropy_loss_fusion=True)
    listing = [[op.bytes for r in rows for op in r.fwd] for rows in (unfused, fused)]
    assert listing == [[14 * e, 8 * e, 8 * e], [6 * e, 8 * e, 8 * e]]
    grads = [[op.bytes for r in rows for op in r.ig] for rows in (unfused, fused)]
    assert grads == [[14 * e], [6 * e]]
    # roofline: 2 µs per element-wise kernel + bytes at 1600 bytes/ns
    # unfused forward 3 × 2000 + 30·2048/1600 = 6038.4 → 6039; fused 6000 + 22·2048/1600
    # = 6028.16 → 6029; backward 2000 + 28672/1600 = 2017.92 → 2018 and 2000 + 12288/1600
    # = 2007.68 → 2008
    fwd = [ops_time_ns([op for r in rows for op in r.fwd], GPU, A100, "bf16")
           for rows in (unfused, fused)]
    bwd = [ops_time_ns([op for r in rows for op in r.ig], GPU, A100, "bf16")
           for rows in (unfused, fused)]
    assert fwd == [6039, 6029] and bwd == [2018, 2008]


def test_te_reads_the_logits_once_and_gathers_three_values_per_token():
    # TP 1, b 1: n = 8, vocabulary padded to 128: e = 1024 logits; no collective
    rows = loss_rows(1, 1, cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te")
    assert [op.bytes for r in rows for op in r.fwd] == [2 * 1024, 16 * 8]
    assert [op.bytes for r in rows for op in r.ig] == [4 * 1024]
    assert [r.fwd_comm for r in rows if r.fwd_comm] == []
    # TP 2, b 2: n = 16, e = 16·128 = 2048; one all-gather of max, sum, target logit (3 fp32)
    # per token from each of the 2 ranks: 12·16·2 = 384 bytes gathered; the loss kernel reads
    # the 2 triples and writes the loss: (24 + 4)·16
    rows = loss_rows(2, 2, cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te")
    assert [op.bytes for r in rows for op in r.fwd] == [2 * 2048, 28 * 16]
    assert [(r.fwd_comm.kind, r.fwd_comm.size_bytes) for r in rows if r.fwd_comm] == [
        (CollKind.ALLGATHER, 384)]
    assert all_reduces(rows) == []


def test_report_says_which_loss_and_the_fusion_is_faster(tmp_path):
    base = ["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "2", "--global-batch", "8"]
    off = run_json(base, tmp_path, "off")
    on = run_json([*base, "--cross-entropy-loss-fusion"], tmp_path, "on")
    assert any("3 all-reduces of n fp32 values" in a for a in off["assumptions"])
    assert any("fused vocab-parallel cross entropy (--cross-entropy-loss-fusion, native)" in a
               and "2 TP all-reduces" in a for a in on["assumptions"])
    assert on["iteration_time_s"] < off["iteration_time_s"]

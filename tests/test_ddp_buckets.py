"""Megatron DDP gradient buckets of a generated Llama 3 8B (``--overlap-grad-reduce``).

Megatron-Core's default bucket size is ``max(40,000,000, 1,000,000 · dp)`` with ``dp`` the
data-parallel size *without* context parallelism (``get_data_parallel_world_size()``,
``with_context_parallel=False``; NVIDIA/Megatron-LM distributed_data_parallel.py at ee6737da);
NeMo 2.0's MegatronCommOverlapCallback sets 134,217,728 (``--ddp-bucket-size``). Buckets fill in
backward order and close once they hold at least the bucket size.

Llama 3 8B, TP 1, parameters per layer (hidden 4096, 8 KV heads of 128, FFN 14336 gated):
attention norm 4096, qkv 4096·6144 = 25,165,824, proj 4096² = 16,777,216, MLP norm 4096,
fc1 4096·28672 = 117,440,512, fc2 14336·4096 = 58,720,256 (layer 218,112,000). Walking a layer
backward (fc2, fc1, MLP norm, proj, qkv, attention norm) with limit L:

- L = 40,000,000 (DP 4): fc2 58,720,256 ≥ L closes alone; fc1 117,440,512 alone; MLP norm +
  proj + qkv = 41,947,136 ≥ L closes at qkv; the attention norm's 4096 joins the next layer's
  fc2 (58,724,352);
- L = 64,000,000 (DP 64, CP 2: not 128,000,000): fc2 + fc1 = 176,160,768; then the rest of the
  layer 41,951,232 + the next layer's fc2 = 100,671,488; then that layer's fc1 117,440,512 alone,
  and 100,671,488 / 117,440,512 alternate;
- L = 134,217,728: 176,160,768, then 41,951,232 + 58,720,256 + 117,440,512 = 218,112,000 per
  layer.

The output layer (128256 · 4096 = 525,336,576) and the final norm are buckets of their own
(simrun does not let buckets span the embedding / output rows and the layers).
"""

from __future__ import annotations

import pytest
from par_support import make_par

from sim.comm import CollKind
from sim.models import generate, load_model
from sim.models.optimizer import bucket_params
from sim.topology.gpu import GpuSpec

H100 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
LAYER = 218_112_000


def _buckets(dp: int, cp: int, ddp_bucket_size: int | None = None) -> list[tuple[str, int]]:
    """(row, parameters) of each gradient reduce-scatter in backward order (bf16: 2 B each)."""
    par = make_par(dp=dp, cp=cp, global_batch=dp, micro_batch=1, dtype="bf16",
                         distributed_optimizer=True, grad_reduce_in_bf16=True,
                         ddp_bucket_size=ddp_bucket_size)
    (chunk,) = generate(load_model("llama3-8b"), par, H100).stages[0].chunks
    return [(lay.name, lay.weight_grad.comm.size_bytes // 2) for lay in reversed(chunk)
            if lay.weight_grad.comm is not None
            and lay.weight_grad.comm.kind is CollKind.REDUCESCATTER]


def test_default_bucket_size_counts_dp_without_context_parallelism():
    assert bucket_params(4) == 40_000_000
    assert bucket_params(64) == 64_000_000  # DP 64 of a DP 64 x CP 2 run, not 128,000,000
    assert bucket_params(64, 134_217_728) == 134_217_728


def test_llama3_8b_buckets_dp64_cp2_default():
    got = _buckets(64, 2)
    assert got[:7] == [("output_logits", 525_336_576), ("final_norm", 4096),
                       ("layer31_mlp_fc1", 176_160_768), ("layer30_mlp_fc2", 100_671_488),
                       ("layer30_mlp_fc1", 117_440_512), ("layer29_mlp_fc2", 100_671_488),
                       ("layer29_mlp_fc1", 117_440_512)]
    assert sum(n for _, n in got) == 2 * 525_336_576 + 4096 + 32 * LAYER  # each once


def test_llama3_8b_buckets_dp4_cp2_default():
    got = _buckets(4, 2)
    assert got[2:7] == [("layer31_mlp_fc2", 58_720_256), ("layer31_mlp_fc1", 117_440_512),
                        ("layer31_attn_qkv", 41_947_136), ("layer30_mlp_fc2", 58_724_352),
                        ("layer30_mlp_fc1", 117_440_512)]
    assert len(got) == 100  # 2 + 32 · 3 + the last layer's remainder and the embedding


@pytest.mark.parametrize("dp", [4, 64])
def test_nemo_bucket_size_is_independent_of_dp(dp):
    got = _buckets(dp, 2, 134_217_728)
    assert got[2:5] == [("layer31_mlp_fc1", 176_160_768), ("layer30_mlp_fc1", LAYER),
                        ("layer29_mlp_fc1", LAYER)]
    assert len(got) == 36

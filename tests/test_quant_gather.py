"""Sequence-parallel all-gathers of the TE linears carry the quantised operand
(:mod:`sim.models.features.quant_gather`), worked out by hand for one TP 8 SP layer.

Model: hidden h = 256, 4 heads, sequence 64, micro-batch 2: n = 128 tokens per microbatch, so
every full all-gather output holds n·h = 128 · 256 = 32768 elements.

* bf16: 2 B per element → 65536 B for each of the six all-gathers (qkv and fc1 inputs in
  forward, their re-gathers for the wgrad GEMMs, the proj and fc2 output gradients).
* FP8 (delayed; TE ``_all_gather_fp8`` gathers the row-wise E4M3/E5M2 data, the fp32 scale
  stays local): 1 B → 32768 B each.
* MXFP8 (1 B + one E8M0 byte per 32 values): one copy 32768 + 32768/32 = 33792 B (inputs and
  re-gathers); the output gradients gather the row- and column-wise copies: 2 · 33792 =
  67584 B.
* NVFP4 (1/2 B + one E4M3 byte per 16 values): one copy 16384 + 32768/16 = 18432 B; output
  gradients both copies: 36864 B.

The reduce-scatters (proj/fc2 outputs, qkv/fc1 input gradients) stay bf16: 65536 B each, in
every precision.
"""

from __future__ import annotations

import pytest
from par_support import make_par

from sim.comm import CollKind
from sim.models.layers import output_rows, transformer_layer_rows
from sim.models.vocab.dims import Dims
from sim.models.vocab.spec import ModelSpec

SMALL = ModelSpec("small", layers=2, hidden=256, heads=4, vocab=1024, seq_len=64)
BF16 = 2 * 128 * 256


def _sizes(rows, kind: CollKind) -> dict[str, list[int]]:
    """Per direction, the sizes of the TP collectives of ``kind`` in the rows' order."""
    out: dict[str, list[int]] = {"fwd": [], "bwd": []}
    for r in rows:
        for d, c in (("fwd", r.fwd_comm), ("bwd", r.ig_comm)):
            if c is not None and c.kind == kind:
                out[d].append(c.size_bytes)
    return out


def _par(**kw):
    return make_par(tp=8, micro_batch=2, global_batch=2, sequence_parallel=True, **kw)


@pytest.mark.parametrize(("kw", "one", "grad"), [
    ({}, 65536, 65536),
    ({"dtype": "fp8", "fp8_recipe": "delayed"}, 32768, 32768),
    ({"dtype": "fp8", "fp8_recipe": "mxfp8"}, 33792, 67584),
    ({"fp4": "e2m1"}, 18432, 36864),
])
def test_one_tp8_sp_layer_all_gather_sizes(kw, one, grad):
    par = _par(**kw)
    rows = transformer_layer_rows(SMALL, par, Dims.of(SMALL, par), 0)
    ag = _sizes(rows, CollKind.ALLGATHER)
    assert ag["fwd"] == [one, one]  # qkv, fc1 inputs
    # backward (rows in forward order): qkv re-gather, proj output gradient, fc1 re-gather,
    # fc2 output gradient
    assert ag["bwd"] == [one, grad, one, grad]
    rs = _sizes(rows, CollKind.REDUCESCATTER)
    assert rs["fwd"] == [BF16, BF16] and rs["bwd"] == [BF16, BF16]


def test_output_layer_gathers_stay_bf16():
    """Megatron-Core's output layer is not a TE module: its gathers keep 2 B per element."""
    par = _par(dtype="fp8", fp8_recipe="mxfp8")
    ag = _sizes(output_rows(SMALL, Dims.of(SMALL, par), True), CollKind.ALLGATHER)
    assert ag["fwd"] == [BF16] and ag["bwd"] == [BF16]

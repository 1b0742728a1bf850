"""Assemble sim/data/kernels/h100-sxm.csv from the H100 measurements of 2026-11-28 and the
rows of the 2026-11-22 table that were not re-measured (docs/kernel-tables.md, "The shipped
H100 table").

    python scripts/assemble_h100_table.py OLD_TABLE docs/measured/h100-2026-11-28 OUT

``OLD_TABLE``: the table as shipped before (git show 96719e5:sim/data/kernels/h100-sxm.csv).
Taken from the 2026-11-28 ``simrun profile`` run (``profile-standard.csv``, unedited): the bf16,
fp8 and fast-accumulation fp8 GEMMs, flash and cuDNN attention, ``add``, GeLU backward and the
compiled SwiGLU. ``gemm_bf16_acc32``: the in-place ``torch.addmm(C, A, B, out_dtype=float32,
out=C)`` of ``behaviour-3.json`` (one cuBLAS kernel with ``beta = 1``, listed there by the
profiler). ``gemm_fp8_acc32``: the profile's fp32-out fp8 GEMM plus the time reading C adds to
the bf16 GEMM of the same shape (``acc32_inplace_ms − out32_ms`` of ``behaviour-3.json``, ≥ 0):
``_scaled_mm`` cannot add into a buffer, and the C read is the same bytes whatever the
operands' type. ``rmsnorm_bwd`` is left out: PyTorch's ``rms_norm`` backward (0.24–0.72 ms at
the measured shapes, far from the HBM rate and not monotonic in size) is not the fused kernel
Transformer Engine runs. The sustained-load factors are the layer loops of
``behaviour-2.json`` (bf16: the mean of its two layers) and ``behaviour-3.json`` (fp8).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.kernels.table import KernelRow, KernelTable, read_table, write_table  # noqa: E402

FROM_PROFILE = ("gemm_bf16", "gemm_fp8", "gemm_fp8_fastacc", "attn_flash_fwd", "attn_flash_bwd",
                "attn_cudnn_fwd", "attn_cudnn_bwd", "add", "gelu_bwd", "swiglu_fwd",
                "swiglu_bwd")


def sustained(measured: Path) -> tuple[float, float]:
    """``(bf16, fp8)`` factors: last-quarter ÷ first-10 median iteration of the layer loops."""
    layers = json.loads((measured / "behaviour-2.json").read_text())["layer_sustained"]
    bf16 = [v["last_quarter_ms"] / v["first10_ms"] for v in layers.values()]
    fp8 = json.loads((measured / "behaviour-3.json").read_text())["fp8_layer_sustained"]
    return sum(bf16) / len(bf16), fp8["last_quarter_ms"] / fp8["first10_ms"]


def assemble(old: KernelTable, measured: Path) -> KernelTable:
    prof = read_table(measured / "profile-standard.csv")
    acc = json.loads((measured / "behaviour-3.json").read_text())["accumulate_in_place"]
    by = {(r["m"], r["k"], r["n"]): r for r in acc}
    rows = [r for r in old.rows if r.kind not in FROM_PROFILE]
    rows += [r for r in prof.rows if r.kind in FROM_PROFILE]
    for r in prof.rows:
        if r.kind == "gemm_fp8_acc32":
            b = by[(r.get("m"), r.get("k"), r.get("n"))]
            c_read = max(0.0, b["acc32_inplace_ms"] - b["out32_ms"])
            rows.append(KernelRow("gemm_fp8_acc32", r.shape, round(r.time_ms + c_read, 6)))
    for (m, k, n), b in sorted(by.items()):
        rows.append(KernelRow("gemm_bf16_acc32", (("m", m), ("k", k), ("n", n)),
                              b["acc32_inplace_ms"]))
    bf16, fp8 = sustained(measured)
    meta = {
        "date": "2026-11-28 (GEMMs, flash and cuDNN attention, add, GeLU backward, SwiGLU); "
                "2026-11-22 (the other rows)",
        "source": "one NVIDIA H100 80GB HBM3 (SXM, 132 SMs, 700 W), PyTorch 2.11.0+cu130, "
                  "clocks as found; each time the median of triton.testing.do_bench (L2 flushed "
                  "between runs, 10 ms warm-up, 40 ms timed), random inputs. 2026-11-28: "
                  "simrun profile --standard (docs/measured/h100-2026-11-28/profile-standard.csv"
                  ") and scripts/measure_gpu_behaviour.py (behaviour-*.json there), assembled "
                  "by scripts/assemble_h100_table.py. 2026-11-22: the simrun project's shared "
                  "reference measurements (h100-sxm-kernels.csv): LayerNorm, RMSNorm forward, "
                  "GeLU forward, dropout+add, cross entropy, fused AdamW, PyTorch's "
                  "memory-efficient attention",
        "sms": "132",
        "sustained_slowdown_bf16": f"{bf16:.3f}",
        "sustained_slowdown_fp8": f"{fp8:.3f}",
        "note": old.meta.get("note", "") + ". gemm_fp8 is the split accumulator (TE's dgrad "
                "and wgrad), gemm_fp8_fastacc fast accumulation (TE's forward); "
                "gemm_bf16_acc32 is torch.addmm into an fp32 buffer in place (one cuBLAS "
                "kernel, beta 1); gemm_fp8_acc32 the fp32-out fp8 GEMM plus the bf16 "
                "measurement's cost of reading the buffer; no rmsnorm_bwd (PyTorch's is not "
                "TE's fused kernel)",
    }
    return KernelTable("H100-SXM5-80GB", rows, meta=meta)


def main() -> None:
    old, measured, out = read_table(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    write_table(assemble(old, measured), out)


if __name__ == "__main__":
    main()

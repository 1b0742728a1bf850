"""Assemble sim/data/kernels/h100-sxm.csv from the table measured on 2026-11-22 and the H100
measurements of 2026-11-28 (docs/kernel-tables.md, "The shipped H100 table").

    python scripts/assemble_h100_table.py OLD_TABLE docs/measured/h100-2026-11-28 OUT

``OLD_TABLE``: the table as shipped before (``git show 96719e5:sim/data/kernels/h100-sxm.csv``).
Its rows stay as they were. The 2026-11-28 measurements add:

* kinds that are variants of a measured kind, as that kind's 2026-11-22 row times the ratio of
  the two measured in the same run at the same shape (the run-to-run spread of single rows,
  up to ±10-30% between the two days, would otherwise swamp the few per cent a variant
  differs by): ``gemm_fp8_fastacc`` (÷ ``gemm_fp8``, the ``simrun profile`` run,
  ``profile-standard.csv``); ``gemm_bf16_acc32`` (the in-place ``torch.addmm(C, A, B,
  out_dtype=float32, out=C)`` of ``behaviour-3.json``, one cuBLAS kernel with ``beta = 1`` as
  its profiler listing shows, ÷ that run's bf16 ``A @ B``); ``gemm_fp8_acc32`` (the profile's
  fp32-out fp8 GEMM plus the time reading C adds to the bf16 GEMM of the same shape,
  ``acc32_inplace_ms − out32_ms`` of ``behaviour-3.json`` clipped at 0 — ``_scaled_mm`` cannot
  add into a buffer, and the read is the same bytes whatever the operands — ÷ the profile's
  ``gemm_fp8``); the MHA twins of three GQA attention shapes (÷ the GQA row of the run);
  attention without the causal mask at the four shapes of ``profile-attention-mask.csv`` that
  the old table has with it (÷ the causal row of that run: the ring-attention calls of context
  parallelism are unmasked);
* a kind the old table had none of, as measured: GeLU backward.

Left out: ``rmsnorm_bwd`` (PyTorch's ``rms_norm`` backward, 0.24-0.72 ms at the measured shapes,
far from the HBM rate and not monotonic in size, is not the fused kernel Transformer Engine
runs) and the SwiGLU rows (``torch.compile`` of SwiGLU alone: its backward at [8192 × 14336]
took 0.92 ms, 1.27 TB/s, and with it the Llama 3 8B layer is predicted 0.48 ms slower than
the compiled real layer of h100-sxm-layers.csv, which the roofline's 80% of HBM already
exceeds; the fused backward inside a compiled layer is evidently faster than the function
compiled alone). The sustained-load factors are the layer loops of ``behaviour-2.json`` (bf16: the
mean of its two layers) and ``behaviour-3.json`` (fp8): last-quarter ÷ first-10 median
iteration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.kernels.table import KernelRow, KernelTable, read_table, write_table  # noqa: E402

NEW_KINDS = ("gelu_bwd",)  # as measured


def sustained(measured: Path) -> tuple[float, float]:
    """``(bf16, fp8)`` factors: last-quarter ÷ first-10 median iteration of the layer loops."""
    layers = json.loads((measured / "behaviour-2.json").read_text())["layer_sustained"]
    bf16 = [v["last_quarter_ms"] / v["first10_ms"] for v in layers.values()]
    fp8 = json.loads((measured / "behaviour-3.json").read_text())["fp8_layer_sustained"]
    return sum(bf16) / len(bf16), fp8["last_quarter_ms"] / fp8["first10_ms"]


def _key(r: KernelRow, kind: str | None = None, **change) -> tuple:
    return (kind or r.kind, tuple((c, change.get(c, v)) for c, v in r.shape))


#: the sustained-load factors' uncertainty as the measurement files state it
UNCERTAINTY_BF16 = (
    "1.042 (GPT-3 175B layer) and 1.051 (Llama 3 8B layer), one 20 s run each on one "
    "H100 SXM at its 700 W power limit with clocks as found "
    "(docs/measured/h100-2026-11-28/behaviour-2.json): +-0.005 between the two; the "
    "spread of repeated runs and between chips was not measured")
UNCERTAINTY_FP8 = (
    "one 20 s run of one FP8 layer (TE's recipe emulated) on one H100 SXM at its 700 "
    "W power limit with clocks as found "
    "(docs/measured/h100-2026-11-28/behaviour-3.json): the spread of repeated runs "
    "and between chips was not measured; bounded by 1 (burst timing) and 1.129 (an "
    "8192^3 FP8 GEMM loop; behaviour-1.json)")

def assemble(old: KernelTable, measured: Path) -> KernelTable:
    prof = read_table(measured / "profile-standard.csv")
    acc = json.loads((measured / "behaviour-3.json").read_text())["accumulate_in_place"]
    by = {(r["m"], r["k"], r["n"]): r for r in acc}
    was = {_key(r): r.time_ms for r in old.rows}
    now = {_key(r): r.time_ms for r in prof.rows}
    rows = list(old.rows) + [r for r in prof.rows if r.kind in NEW_KINDS]

    def add(kind: str, shape: tuple, base: tuple, ratio: float) -> None:
        rows.append(KernelRow(kind, shape, round(was[base] * ratio, 6)))

    for r in prof.rows:
        mkn = tuple(v for _, v in r.shape)
        if r.kind == "gemm_fp8_fastacc":
            add(r.kind, r.shape, _key(r, "gemm_fp8"), r.time_ms / now[_key(r, "gemm_fp8")])
        elif r.kind == "gemm_fp8_acc32":
            c_read = max(0.0, by[mkn]["acc32_inplace_ms"] - by[mkn]["out32_ms"])
            add(r.kind, r.shape, _key(r, "gemm_fp8"),
                (r.time_ms + c_read) / now[_key(r, "gemm_fp8")])
        elif r.kind.startswith("attn_") and r.get("hkv") == r.get("hq") and _key(r) not in was:
            gqa = _key(r, hkv=8)
            add(r.kind, r.shape, gqa, r.time_ms / now[gqa])
    mask = read_table(measured / "profile-attention-mask.csv")
    masked = {_key(r): r.time_ms for r in mask.rows}
    for r in mask.rows:
        twin = _key(r, causal=1)
        if r.get("causal") == 0 and twin in was:
            add(r.kind, r.shape, twin, r.time_ms / masked[twin])
    for (m, k, n), b in sorted(by.items()):
        shape = (("m", m), ("k", k), ("n", n))
        add("gemm_bf16_acc32", shape, ("gemm_bf16", shape), b["acc32_inplace_ms"] / b["bf16_ms"])
    bf16, fp8 = sustained(measured)
    meta = {
        "date": "2026-11-22; 2026-11-28 (GeLU backward, and the ratios of the GEMM variants "
                "and of the MHA and unmasked attention rows to their measured kinds)",
        "source": "one NVIDIA H100 80GB HBM3 (SXM, 132 SMs, 700 W), PyTorch 2.11.0+cu130, "
                  "clocks as found; each time the median of triton.testing.do_bench (L2 flushed "
                  "between runs, 10 ms warm-up, 40 ms timed), random inputs. 2026-11-22: the "
                  "simrun project's shared reference measurements (h100-sxm-kernels.csv). "
                  "2026-11-28: simrun profile --standard (docs/measured/h100-2026-11-28/"
                  "profile-standard.csv) and scripts/measure_gpu_behaviour.py (behaviour-*.json "
                  "there); the table assembled by scripts/assemble_h100_table.py",
        "sms": "132",
        "sustained_slowdown_bf16": f"{bf16:.3f}",
        "sustained_slowdown_fp8": f"{fp8:.3f}",
        # as the measurement files state them (docs/kernel-tables.md, "Sustained load")
        "sustained_uncertainty_bf16": UNCERTAINTY_BF16,
        "sustained_uncertainty_fp8": UNCERTAINTY_FP8,
        "note": old.meta.get("note", "") + ". gemm_fp8 is the split accumulator (TE's dgrad "
                "and wgrad), gemm_fp8_fastacc fast accumulation (TE's forward); "
                "gemm_bf16_acc32 is torch.addmm into an fp32 buffer in place (one cuBLAS "
                "kernel, beta 1); gemm_fp8_acc32 the fp32-out fp8 GEMM plus the bf16 "
                "measurement's cost of reading the buffer; variants and MHA attention rows are "
                "the 2026-11-22 row of their measured kind times the ratio measured in one run "
                "on 2026-11-28; no rmsnorm_bwd (PyTorch's is not TE's fused kernel)",
    }
    return KernelTable("H100-SXM5-80GB", rows, meta=meta)


def main() -> None:
    old, measured, out = read_table(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    write_table(assemble(old, measured), out)


if __name__ == "__main__":
    main()

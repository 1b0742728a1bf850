"""Fused attention on B200, GB200 and GB300 as simrun's transfer rule times it, against NVIDIA's
published cuDNN SDPA training benchmarks (sim/validation/attention_blackwell.py; the rows and
their sources: docs/data/cudnn-sdpa-blackwell.csv).

    python scripts/check_attention_blackwell.py

Prints, per published run and length (batch 1, 128 query heads, 8 KV heads, head dim 128,
causal, bf16): the published forward / backward ms, simrun's, the error simrun / published − 1
and how H100's kernel table answered; then the spread of the errors per run over the compared
lengths (s ≥ 8192), how the forward time grows from s 8192 to 32768, the ratio of GB300's to
GB200's times published (cuDNN 9.17 both) and in simrun, and the share of fused attention in
one layer of the Llama 3 8B validation cases.
Changes nothing in simrun; deterministic; takes about a second.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.validation.attention_blackwell import (  # noqa: E402
    COMPARED_FROM,
    LLAMA3_8B_CASES,
    SOURCES,
    check,
    layer_attention_share,
    simrun_times,
)


def _pct(e: float) -> str:
    return f"{e * 100:+.1f}%"


def main() -> int:
    rows = check()
    print("| published run (timing) | s | published fwd / bwd (ms) | simrun fwd / bwd (ms) | "
          "error fwd / bwd | H100 table |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        p, (ef, eb) = r.pub, r.errors
        s = f"{p.s}" if r.compared else f"{p.s} (info)"
        how = r.how[0] if r.how[0] == r.how[1] else f"{r.how[0]} / {r.how[1]}"
        print(f"| {p.source} ({p.timing}) | {s} | {p.forward_ms:.3f} / {p.backward_ms:.3f} | "
              f"{r.simrun[0]:.3f} / {r.simrun[1]:.3f} | {_pct(ef)} / {_pct(eb)} | {how} |")
    print(f"\nerrors over s >= {COMPARED_FROM}:")
    for src in SOURCES:
        got = [r for r in rows if r.pub.source == src and r.compared]
        if not got:
            continue
        fwd, bwd = ([r.errors[k] for r in got] for k in (0, 1))
        print(f"  {src}: forward {_pct(min(fwd))} .. {_pct(max(fwd))}, "
              f"backward {_pct(min(bwd))} .. {_pct(max(bwd))}")
    pub = {(r.pub.source, r.pub.s): r for r in rows}
    print(f"\nforward time s 32768 / s {COMPARED_FROM} (x16 the scores), published -> simrun:")
    for src in SOURCES:
        a, b = pub.get((src, 32768)), pub.get((src, COMPARED_FROM))
        if a is not None and b is not None:
            print(f"  {src}: {a.pub.forward_ms / b.pub.forward_ms:.2f} -> "
                  f"{a.simrun[0] / b.simrun[0]:.2f}")
    print("\nGB300 / GB200 time (cuDNN 9.17 both), published -> simrun:")
    for s in sorted({r.pub.s for r in rows if r.compared}):
        a, b = pub.get(("GB300 cuDNN 9.17", s)), pub.get(("GB200 cuDNN 9.17", s))
        if a is None or b is None:
            continue
        print(f"  s {s}: forward {a.pub.forward_ms / b.pub.forward_ms:.3f} -> "
              f"{a.simrun[0] / b.simrun[0]:.3f}, backward "
              f"{a.pub.backward_ms / b.pub.backward_ms:.3f} -> {a.simrun[1] / b.simrun[1]:.3f}")
    (h_f, _), (h_b, _) = simrun_times("H100-SXM5-80GB", 32768)
    print(f"\nH100 SXM, the transfer's source, s 32768 (tile model): {h_f:.3f} / {h_b:.3f} ms")
    print("\nfused attention in one layer of the Llama 3 8B validation cases (one microbatch, "
          "fwd + bwd, as the case's run times it):")
    for path, name in LLAMA3_8B_CASES:
        attn, total, shape, backend = layer_attention_share(path, name)
        print(f"  {name}: {attn / 1e3:.0f} of {total / 1e3:.0f} us ({attn / total:.1%}), "
              f"shape (b, hq, hkv, s, d, causal) {shape}, backend {backend}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

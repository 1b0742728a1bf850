"""The transfer rule checked on A100 against Korthikanti et al. Table 4
(sim/validation/transfer_a100.py).

    python scripts/check_transfer_on_a100.py

Prints the ten Table 4 layer times (one 22B GPT layer, TP 8, forward / backward ms): measured,
A100's shipped roofline (its GEMM efficiency fitted to these ten numbers) and the transfer
rule (H100 SXM's kernel table rescaled to A100 by the MAMF and HBM ratios; not fitted), their
errors, and the share of the transferred layer compute timed by H100's table rows (the rest by
the rule's roofline fallback); then, per configuration and direction, the layer's compute by
part under both models, and the baseline layer operator by operator. Changes nothing in
simrun; deterministic; takes a few seconds.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.validation import table4  # noqa: E402
from sim.validation.transfer_a100 import (  # noqa: E402
    A100_MAMF_BF16,
    PARTS,
    check,
    layer_ops,
    layer_parts,
    transfer_setup,
)


def _pct(e: float) -> str:
    return f"{e * 100:+.1f}%"


def main() -> int:
    setup = transfer_setup()
    tr = setup.transfer
    print(f"transfer rule on {setup.entry.name}: bf16 compute x "
          f"{tr.source_mamf.fraction('bf16') * tr.source.peak_tflops['bf16']:g} / "
          f"{A100_MAMF_BF16:g} (MAMF, TFLOP/s), memory-bound x {tr.source.hbm_GBps:g} / "
          f"{setup.entry.hbm_GBps:g} (HBM GB/s), fixed part min(t, "
          f"{setup.cm.gemm_overhead_ns / 1e3:g} / {setup.cm.elementwise_overhead_ns / 1e3:g} µs) "
          "unscaled; no table answer: roofline at H100's efficiencies on A100's peaks\n")
    rows = check()
    print("| configuration | measured fwd / bwd (ms) | A100 roofline, fitted (ms) | error | "
          "transfer rule, not fitted (ms) | error | from H100's table rows fwd / bwd |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        es, et = r.errors(r.roofline), r.errors(r.transfer)
        print(f"| {r.label} | {r.measured[0]:g} / {r.measured[1]:g} | "
              f"{r.roofline[0]:.2f} / {r.roofline[1]:.2f} | {_pct(es[0])} / {_pct(es[1])} | "
              f"{r.transfer[0]:.2f} / {r.transfer[1]:.2f} | {_pct(et[0])} / {_pct(et[1])} | "
              f"{r.table_share[0]:.1%} / {r.table_share[1]:.1%} |")
    for name, pick in (("A100 roofline", lambda r: r.roofline), ("transfer", lambda r: r.transfer)):
        errs = [e for r in rows for e in r.errors(pick(r))]
        rms = math.sqrt(math.fsum(e * e for e in errs) / len(errs))
        print(f"{name}: errors {_pct(min(errs))} .. {_pct(max(errs))}, RMS {rms * 100:.1f}%")
    print("\nlayer compute (µs, one microbatch), A100 roofline -> transfer, by part and by where "
          "the transfer timed it (table: H100's rows rescaled; fallback: roofline)")
    parts = {label: layer_parts(sp, rc, setup) for label, sp, rc, _, _ in table4.TABLE_4}
    cols = [(p, s) for p in PARTS for s in ("table", "roofline")
            if any((d, p, s) in got for got in parts.values() for d in ("fwd", "bwd"))]
    print("| configuration | dir | " + " | ".join(
        f"{p} ({'table' if s == 'table' else 'fallback'})" for p, s in cols) + " | total |")
    print("|---|---|" + "---|" * (len(cols) + 1))
    for label, got in parts.items():
        for d in ("fwd", "bwd"):
            cells = []
            for p, s in cols:
                a, b = got.get((d, p, s), (0.0, 0.0))
                cells.append("—" if a == b == 0 else f"{a / 1e3:.0f} -> {b / 1e3:.0f}")
            ta = math.fsum(v[0] for k, v in got.items() if k[0] == d)
            tb = math.fsum(v[1] for k, v in got.items() if k[0] == d)
            print(f"| {label} | {d} | " + " | ".join(cells)
                  + f" | {ta / 1e3:.0f} -> {tb / 1e3:.0f} ({_pct(tb / ta - 1)}) |")
    label, sp, rc = table4.TABLE_4[0][:3]
    print(f"\n{label}, per operator (µs): A100 roofline -> transfer, where the transfer timed it")
    print("| dir | operator | part | A100 roofline | transfer | source | change |")
    print("|---|---|---|---|---|---|---|")
    for (d, part, name, a, _), (_, _, _, b, how) in zip(
            layer_ops(sp, rc, None), layer_ops(sp, rc, setup), strict=True):
        print(f"| {d} | {name} | {part} | {a / 1e3:.1f} | {b / 1e3:.1f} | "
              f"{'fallback' if how == 'roofline' else 'table'} | {_pct(b / a - 1)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

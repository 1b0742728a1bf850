"""Fit the A100 large-GEMM efficiency to Korthikanti et al. Table 4 (sim/validation/table4.py).

    python scripts/calibrate_a100.py                 # before: the shipped value
    python scripts/calibrate_a100.py --before 0.80   # before: another value

Prints Table 4 against the simulated 22B layer (forward / backward ms, error) with the
``--before`` A100 GEMM efficiency, the fitted efficiency (least squared relative error over the
ten times; deterministic golden-section search), and the table again with the fit rounded to
0.01, the value to ship in ``sim/models/compute.py`` (``A100``). Exit 1 when the shipped value
is not that rounded fit. Takes a few seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.models.compute import A100  # noqa: E402
from sim.validation.table4 import SEARCH, fit_gemm_efficiency, objective, table  # noqa: E402


def show(title: str, eta: float) -> None:
    """Print Table 4 against the model with A100 ``η_gemm = eta``."""
    rows = table(eta)
    print(f"{title}: A100 gemm_efficiency {eta:g} (sum of squared relative errors "
          f"{objective(rows):.6f})")
    print("| configuration | measured fwd / bwd (ms) | model fwd / bwd (ms) | error |")
    print("|---|---|---|---|")
    for label, rf, rb, mf, mb in rows:
        print(f"| {label} | {rf:g} / {rb:g} | {mf:.2f} / {mb:.2f} | "
              f"{(mf / rf - 1) * 100:+.1f}% / {(mb / rb - 1) * 100:+.1f}% |")
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=float, default=A100.gemm_efficiency,
                    help="A100 GEMM efficiency of the 'before' table (default: the shipped one)")
    args = ap.parse_args(argv)
    show("before", args.before)
    fit = fit_gemm_efficiency()
    ship = round(fit, 2)
    print(f"fitted A100 gemm_efficiency: {fit:.4f} (search {SEARCH[0]:g}..{SEARCH[1]:g}) "
          f"-> ship {ship:.2f}\n")
    show("after", ship)
    if ship != A100.gemm_efficiency:
        print(f"sim/models/compute.py ships {A100.gemm_efficiency:g}, not {ship:.2f}")
        return 1
    print(f"sim/models/compute.py ships {A100.gemm_efficiency:g}: up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())

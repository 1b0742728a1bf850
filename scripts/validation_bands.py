"""Record or check the accuracy bands of the shipped validation cases (sim/validation/bands.py).

    python scripts/validation_bands.py            # run every case, compare with the file
    python scripts/validation_bands.py --write    # run every case, rewrite the file
    python scripts/validation_bands.py --write --from v.json   # from `simrun validate --json`

Runs every case of ``workloads/validation/*.yaml`` as ``simrun validate`` does (on
``--workers`` local processes, default 2) and either writes each case's error to
``tests/data/validation_bands.json`` or prints every case outside its band (exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.files.outputs import atomic_write  # noqa: E402
from sim.validation.bands import (  # noqa: E402
    MARGIN_PCT,
    band_problem,
    bands_document,
    coverage_problems,
    read_bands,
    shipped_cases,
)
from sim.validation.cases import run_cases  # noqa: E402

BANDS = ROOT / "tests" / "data" / "validation_bands.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the bands file")
    ap.add_argument("--workers", type=int, default=2, help="local processes (default 2)")
    ap.add_argument("--from", dest="source", metavar="JSON",
                    help="take the errors from `simrun validate --json` of every shipped case "
                         "instead of running them")
    args = ap.parse_args()
    cases = shipped_cases()
    if args.source:
        rows = {r["name"]: r for r in json.loads(Path(args.source).read_text())["cases"]}
        if set(rows) != set(cases):
            print(f"{args.source}: not a run of exactly the shipped cases", file=sys.stderr)
            return 2
        rows = {k: rows[k] for k in cases}
    else:
        rows = dict(zip(cases, run_cases(list(cases.values()), args.workers), strict=True))
    if args.write:
        text = json.dumps(bands_document(rows, MARGIN_PCT), indent=1, ensure_ascii=False)
        atomic_write(BANDS, lambda f: f.write(text + "\n"))
        print(f"wrote {BANDS.relative_to(ROOT)}: {len(rows)} cases, margin ±{MARGIN_PCT:g} "
              "points")
        return 0
    data = read_bands(BANDS)
    margin = float(data["margin_pct"])
    recorded = {k: v["error_pct"] for k, v in data["cases"].items()}
    problems = coverage_problems(set(recorded), set(rows))
    problems += [p for k, r in rows.items()
                 if (p := band_problem(k, recorded.get(k), r["error_pct"], margin))]
    print("\n".join(problems) or f"all {len(rows)} cases within ±{margin:g} points of their band")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Convert a measured-kernel CSV (columns kind, ms, m, k, n, s, d, hq, hkv, b, causal, n_tokens,
h, V, params, note; as produced with ``triton.testing.do_bench``) into simrun's kernel-table
format (docs/kernel-tables.md). Rows without a time (kernels that failed to run) are dropped.

    python scripts/convert_measured_kernels.py MEASURED.csv OUT.csv --gpu H100-SXM5-80GB \
        --date 2026-11-22 --source "..."
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.kernels.table import SHAPE_FIELDS, KernelRow, KernelTable, write_table  # noqa: E402

RENAME = {"n_tokens": "tokens", "V": "vocab"}


def convert(src: Path) -> list[KernelRow]:
    rows = []
    with src.open(encoding="utf-8") as f:
        for rec in csv.DictReader(f):
            if not rec["ms"]:
                continue
            rec = {RENAME.get(k, k): v for k, v in rec.items()}
            shape = tuple((c, int(float(rec[c]))) for c in SHAPE_FIELDS[rec["kind"]])
            rows.append(KernelRow(rec["kind"], shape, float(rec["ms"])))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--gpu", required=True)
    p.add_argument("--date", required=True)
    p.add_argument("--source", required=True)
    a = p.parse_args()
    table = KernelTable(a.gpu, convert(a.src), meta={"date": a.date, "source": a.source})
    write_table(table, a.out)
    print(f"{len(table.rows)} kernels written to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

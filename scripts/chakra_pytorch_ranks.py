"""Unpack the shipped Chakra trace converted from PyTorch (tests/data/chakra-pytorch, Chakra's
feeder test trace: one rank of a data-parallel step; NOTICE there) as a folder of N ranks of
the same job, the folder ``simrun --workload DIR`` reads (docs/workload-formats.md).

    python scripts/chakra_pytorch_ranks.py DIR [--ranks N]

Writes ``DIR/chakra.<r>.et`` for r = 0..N-1 (default 8), each the trace's bytes unchanged.
"""

from __future__ import annotations

import argparse
import tarfile
from pathlib import Path

FIXTURE = (Path(__file__).resolve().parent.parent / "tests" / "data" / "chakra-pytorch"
           / "feeder_tests_trace.tar.gz")
MEMBER = "tests/data/chakra.0.et"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="the folder to write (created)")
    ap.add_argument("--ranks", type=int, default=8, help="ranks of the job, 1..4096")
    args = ap.parse_args(argv)
    if not 1 <= args.ranks <= 4096:
        ap.error("--ranks: 1..4096")
    with tarfile.open(FIXTURE) as tar:
        data = tar.extractfile(tar.getmember(MEMBER)).read()
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    for r in range(args.ranks):
        (out / f"chakra.{r}.et").write_bytes(data)
    print(f"wrote {args.ranks} ranks of {MEMBER} to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

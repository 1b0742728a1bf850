"""The README's what-if table and docs/images/whatif-systems.png are what
scripts/whatif_systems.py makes of the three sweeps' rows in docs/data/whatif/."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import ROOT

spec = importlib.util.spec_from_file_location("whatif_systems",
                                              ROOT / "scripts" / "whatif_systems.py")
whatif = importlib.util.module_from_spec(spec)
spec.loader.exec_module(whatif)


def test_readme_table_and_figure_follow_the_rows(tmp_path):
    assert whatif.main(["--check", "--out", str(tmp_path)]) == 0
    made = (tmp_path / whatif.FIGURE).read_bytes()
    assert made == (ROOT / "docs" / "images" / whatif.FIGURE).read_bytes()


def test_table_is_worked_from_the_best_row():
    rows = whatif.load_rows()
    for name, label, _, gpus in whatif.SYSTEMS:
        ok = [r for r in rows[name] if r["status"] == "ok"]
        best = min(ok, key=lambda r: r["iteration_time_s"])
        # the table's tokens/s per GPU: the row's cluster tokens/s over the system's GPUs, and
        # tokens/s = global batch × sequence / iteration time
        assert best["tokens_per_s"] == pytest.approx(
            1152 * 8192 / best["iteration_time_s"], rel=1e-9)
        line = next(x for x in whatif.table(rows).splitlines() if x.startswith(f"| {label}"))
        assert f"| {best['tokens_per_s'] / gpus:,.0f} |" in line
        assert whatif._layout(best) in line

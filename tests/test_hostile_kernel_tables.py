"""Every numeric cell of a kernel table (the first rows of the shipped H100 table: GEMMs of
each kind, attention, element-wise, cross-entropy, optimizer) and its sustained-load header
against the numeric edge cases (issue 31): the reader either accepts the value or refuses it
with an :class:`InputError` naming the file, the line and the column — never an internal error
(the campaign found ``ValueError: cannot convert float NaN`` for ``time_ms`` 1e-308 and
``OverflowError`` for a 400-digit ``n``), and never a value no GPU can have."""

from __future__ import annotations

import pytest
from hostile_support import ROOT

from sim.errors import InputError
from sim.kernels.table import TIME_RANGE_MS, parse_table

EDGES = ["0", "-0", "-1", "nan", "inf", "-inf", "1e308", "1e-308", "4.9e-324", str(2**63),
         str(2**64), "1" * 400, "1_0", "٣", "true", "x", "2.5", "1e400", ""]
LINES = (ROOT / "sim" / "data" / "kernels" / "h100-sxm.csv").read_text().split("\n")
HEAD = next(i for i, t in enumerate(LINES) if t.startswith("kind,"))
KINDS = {}  # the first row of each kind
for _i in range(HEAD + 1, len(LINES)):
    if LINES[_i]:
        KINDS.setdefault(LINES[_i].split(",")[0], _i)
ROWS = sorted(KINDS.values())


@pytest.mark.parametrize("row", ROWS, ids=[LINES[i].split(",")[0] for i in ROWS])
def test_every_cell_of_a_row_takes_an_edge_value_or_names_its_line(row):
    header = LINES[HEAD].split(",")
    cells = LINES[row].split(",")
    for j, cell in enumerate(cells):
        if not cell or j == 0:
            continue
        for edge in EDGES:
            body = [*cells[:j], edge, *cells[j + 1:]]
            text = "\n".join([*LINES[: HEAD + 1], ",".join(body)])
            try:
                table = parse_table(text, "t.csv")
            except InputError as e:
                assert e.file == "t.csv" and e.line == HEAD + 2, str(e)
                assert e.field in (header[j], "kind") and "\n" not in str(e), str(e)
                continue
            r = table.rows[0]  # accepted: a finite time in range, whole positive shapes
            assert TIME_RANGE_MS[0] <= r.time_ms <= TIME_RANGE_MS[1], (header[j], edge)
            assert all(isinstance(v, int) and v >= 0 for _, v in r.shape), (header[j], edge)


@pytest.mark.parametrize("edge", EDGES)
def test_the_sustained_load_header_takes_a_factor_from_1_to_3_or_names_its_line(edge):
    lines = [t if not t.startswith("# sustained_slowdown_bf16:") else
             f"# sustained_slowdown_bf16: {edge}" for t in LINES[: HEAD + 2]]
    no = next(i for i, t in enumerate(lines, 1) if t.startswith("# sustained_slowdown_bf16"))
    try:
        table = parse_table("\n".join(lines), "t.csv")
    except InputError as e:
        assert e.line == no and e.field == "sustained_slowdown_bf16", str(e)
        return
    assert 1 <= float(table.meta["sustained_slowdown_bf16"]) <= 3

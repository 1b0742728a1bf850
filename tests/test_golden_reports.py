"""The JSON reports of the shipped examples are byte-identical to tests/golden/.

The golden files were generated with `python scripts/golden_reports.py --write` before the
architecture rework; a change meant to alter results regenerates them and says so in its commit.
"""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("golden_reports", ROOT / "scripts/golden_reports.py")
golden_reports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden_reports)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return golden_reports.generate(tmp_path_factory.mktemp("golden"))


@pytest.mark.slow
@pytest.mark.parametrize("name", [*golden_reports.CASES, "sweep"])
def test_report_is_byte_identical_to_golden(generated, name):
    golden = ROOT / "tests" / "golden" / generated[name].name
    assert generated[name].read_bytes() == golden.read_bytes(), (
        f"{name}: report differs from {golden}; regenerate only if the change is meant to"
    )

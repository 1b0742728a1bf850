"""``simrun validate``: the measured iterations of docs/calibration.md section B, shipped as data,
predicted end to end; the error table and its accuracy bound."""

from __future__ import annotations

import json
import re

import pytest
from conftest import WORKLOADS

from sim.cli import main
from sim.errors import InputError
from sim.validate import load_cases

CASES = WORKLOADS / "validation" / "korthikanti2022-selene.yaml"
# docs/calibration.md section B, s/iteration: (full recompute, sequence parallel + selective
# recompute)
MEASURED = {"22B": (1.42, 1.10), "175B": (18.13, 13.75), "530B": (49.05, 37.83),
            "1T": (94.42, 71.49)}
# Accuracy bound. Today the mean absolute error is 6.6% (all cases under-predicted, max 9.6%;
# docs/validation.md traces most of it to the network model's bus bandwidth at the 25-100 MB TP
# messages). 10% is the level at which the layout comparisons of a sweep stay meaningful (the
# layouts of one sweep typically differ by 5-20%); it leaves 3.4 points for the network model
# still being refined and fails on any change that degrades the model by more than that.
MEAN_ABS_ERROR_BOUND_PCT = 10.0
CASE_ERROR_BOUND_PCT = 15.0


def test_shipped_cases_are_the_published_measurements():
    source, cases = load_cases(CASES)
    assert "Korthikanti" in source and len(cases) == 8
    for c in cases:
        size = c.name.split()[0]
        full, sel = MEASURED[size]
        if c.recompute == "full":
            assert c.measured_s == full and not c.sequence_parallel
        else:
            assert c.recompute == "selective" and c.sequence_parallel and c.measured_s == sel
        assert c.tp == 8 and c.dp == 1 and c.micro_batch == (4 if size == "22B" else 1)
        assert c.vpp == (3 if size in ("175B", "530B") else 1)
        assert c.global_batch == {"22B": 4, "175B": 64, "530B": 280, "1T": 512}[size]
        assert c.global_batch == c.tp * c.pp if size != "22B" else c.pp == 1


def test_simrun_validate_prints_the_error_table(tmp_path, capsys):
    out = tmp_path / "v.json"
    assert main(["validate", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    head = next(i for i, x in enumerate(lines) if x.split()[:1] == ["case"])
    assert lines[head].split() == ["case", "GPUs", "layout", "measured_s", "predicted_s",
                                   "error_%", "MFU_meas_%", "MFU_pred_%"]
    rows = lines[head + 1: head + 9]
    data = json.loads(out.read_text())
    assert len(data["cases"]) == 8
    for line, case in zip(rows, data["cases"], strict=True):
        assert line.strip().startswith(case["name"])
        err = float(re.search(r"([+-]\d+\.\d)\s+(\S+)\s+(\S+)$", line).group(1))
        assert err == pytest.approx(case["error_pct"], abs=0.051)
        # the error is what it says: predicted vs measured
        assert case["error_pct"] == pytest.approx(
            (case["predicted_s"] - case["measured_s"]) / case["measured_s"] * 100)
        assert case["memory_feasible"]  # every measured run fits in the memory model
        assert abs(case["error_pct"]) < CASE_ERROR_BOUND_PCT, case["name"]
    mean_abs = sum(abs(c["error_pct"]) for c in data["cases"]) / 8
    assert data["mean_abs_error_pct"] == pytest.approx(mean_abs)
    assert f"mean absolute error {mean_abs:.1f}% over 8 cases" in text
    assert mean_abs < MEAN_ABS_ERROR_BOUND_PCT
    # the model reproduces the measured ordering: selective + SP beats full recompute
    by = {c["name"]: c for c in data["cases"]}
    for size in MEASURED:
        assert by[f"{size} SP + selective"]["predicted_s"] < by[f"{size} full recompute"][
            "predicted_s"]


def test_bad_validation_files_name_file_line_and_key(tmp_path):
    bad = tmp_path / "v.yaml"
    bad.write_text("topology: x.yaml\ncases:\n  - {name: a, model: m.yaml, tp: 8, pp: 1,\n"
                   "     global_batch: 4, micro_batch: 4, measured_s: 1.0, tpp: 3}\n")
    with pytest.raises(InputError) as e:
        load_cases(bad)
    assert str(e.value) == f"{bad}:4: cases[0].tpp: unknown key (allowed: name, model, tp, " \
        "pp, dp, vpp, global_batch, micro_batch, recompute, sequence_parallel, dtype, " \
        "distributed_optimizer, flash_attention, measured_s, measured_mfu, source)"
    bad.write_text("topology: x.yaml\ncases:\n  - {name: a, model: m.yaml, tp: 8, pp: 1,\n"
                   "     global_batch: 4, micro_batch: 4, measured_s: -1}\n")
    with pytest.raises(InputError, match=r"v.yaml:4: cases\[0\].measured_s: expected a positive"):
        load_cases(bad)

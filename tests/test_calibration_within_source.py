"""simrun validate --calibrate-within-source K (sim/calibration/within_source.py): on a source
whose measured times are simrun's own predictions under a known GEMM efficiency scale, the
calibration on the smallest case recovers the scale and the other cases' calibrated errors
vanish, while their uncalibrated errors are what the scale makes them."""

import json

from conftest import ROOT

from sim.calibration.knobs import Knobs
from sim.calibration.runs import predict_case
from sim.cli import main
from sim.validation.cases import load_cases

SCALE = 0.8
CASES = [("tp2 gb8", 2, 8), ("tp1 gb16", 1, 16), ("tp4 gb8", 4, 8)]


def _file(tmp_path, times=None):
    lines = [f"source: made by the test (times under gemm_efficiency_scale {SCALE})",
             f"topology: {ROOT / 'topologies' / 'dgx-a100-512.yaml'}", "cases:"]
    for k, (name, tp, gb) in enumerate(CASES):
        t = times[k] if times else 1.0
        lines += [f"  - name: {name}", f"    model: {ROOT / 'workloads/models/gpt2-medium.yaml'}",
                  f"    tp: {tp}", "    pp: 1", f"    global_batch: {gb}", "    micro_batch: 1",
                  f"    measured_s: {t!r}"]
    f = tmp_path / "made.yaml"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_calibrated_on_smallest_evaluated_on_others(tmp_path, capsys):
    probe = _file(tmp_path)
    cases = load_cases(probe)[1]
    truth = [predict_case(c, Knobs(gemm_efficiency_scale=SCALE)) for c in cases]
    plain = [predict_case(c, Knobs()) for c in cases]
    f = _file(tmp_path, truth)
    out = tmp_path / "v.json"
    assert main(["validate", str(f), "--calibrate-within-source", "1", "--workers", "1",
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {r["name"]: r for r in doc["cases"]}
    # the fewest GPUs: TP 1 on one GPU (DP 1), though listed second
    cal = rows["tp1 gb16"]
    assert cal.get("calibrated_on") and "calibrated_error_pct" not in cal
    src = doc["calibration_within_source"]["sources"][0]
    assert src["calibrated_on"] == ["tp1 gb16"] and src["identified"] == ["gemm_efficiency_scale"]
    assert abs(src["knobs"]["gemm_efficiency_scale"] - SCALE) < 0.002
    for k, name in enumerate(n for n, _, _ in CASES):
        if k == 1:
            continue
        r = rows[name]
        assert abs(r["error_pct"] - (plain[k] - truth[k]) / truth[k] * 100) < 1e-6
        assert abs(r["error_pct"]) > 3 and abs(r["calibrated_error_pct"]) < 0.2
    text = capsys.readouterr().out
    assert "made.yaml: on tp1 gb16 -> gemm_efficiency_scale 0.800" in text
    assert "2 evaluated: uncalibrated MAPE" in text


def test_validate_under_a_profile(tmp_path):
    probe = _file(tmp_path)
    cases = load_cases(probe)[1]
    f = _file(tmp_path, [predict_case(c, Knobs(gemm_efficiency_scale=SCALE)) for c in cases])
    prof = tmp_path / "p.yaml"
    prof.write_text("schema: simrun.calibration/1\ngpu: A100-SXM4-80GB\ntopology: dgx-a100-512\n"
                    f"knobs:\n  gemm_efficiency_scale: {{value: {SCALE}, measurement: test}}\n")
    out = tmp_path / "v.json"
    assert main(["validate", str(f), "--calibration", str(prof), "--workers", "1", "--json",
                 str(out)]) == 0
    doc = json.loads(out.read_text())
    assert all(abs(r["calibrated_error_pct"]) < 1e-6 and abs(r["error_pct"]) > 3
               for r in doc["cases"])
    assert doc["calibration"]["overall"]["calibrated"]["cases"] == 3

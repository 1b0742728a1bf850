"""A Megatron-LM log made here (Megatron-LM's own format strings: tests/test_jobs_megatron_log.py)
with the iteration time simrun predicts under a known GEMM efficiency scale: simrun calibrate
recovers the scale from it to within 1%; broken logs are refused with file, line and what."""

import yaml

from sim.calibration.knobs import Knobs
from sim.cli import main
from sim.cli.calibrate_log import log_run
from tests.test_jobs_megatron_log import _print_args, _training_log

TOPO = "dgx-a100-512"
ARGS = {"num_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "seq_length": 1024,
        "max_position_embeddings": 1024, "tensor_model_parallel_size": 2,
        "global_batch_size": 8, "micro_batch_size": 1, "bf16": True, "world_size": 8,
        "data_parallel_size": 4, "rank": 0}


def _log(path, elapsed_ms: float, warmup_ms: float = 5000.0, args=ARGS, upto=100):
    """Warm-up lines at iterations 5 and 10, then every 10 iterations the time ± 0.4%
    (symmetric, so the median is the time)."""
    lines = ["using world size: 8", *_print_args(args)] if args is not None else []
    lines += [_training_log(5, 100, warmup_ms), _training_log(10, 100, warmup_ms * 0.5)]
    for k, it in enumerate(range(20, upto + 1, 10)):
        noise = (-0.004, 0.0, 0.004)[k % 3]
        lines.append(_training_log(it, 100, elapsed_ms * (1 + noise), 150.0))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_known_gemm_scale_recovered_within_1_percent(tmp_path):
    probe = _log(tmp_path / "probe.log", 100.0)
    run, _ = log_run(str(probe), TOPO, 10)
    true = 0.85
    t = run.predict(Knobs(gemm_efficiency_scale=true))
    assert t > run.predict(Knobs()) * 1.05  # the scale matters to this run
    log = _log(tmp_path / "train.log", t * 1e3)
    out = tmp_path / "profile.yaml"
    assert main(["calibrate", "--megatron-log", str(log), "--topo", TOPO, "--out",
                 str(out)]) == 0
    prof = yaml.safe_load(out.read_text())
    got = prof["knobs"]["gemm_efficiency_scale"]["value"]
    assert abs(got - true) / true < 0.01
    assert "train.log" in prof["knobs"]["gemm_efficiency_scale"]["measurement"]
    assert prof["gpu"] == "A100-SXM4-80GB" and len(prof["inputs"][0]["sha256"]) == 64
    # the spread of the kept lines (±0.4%) widens the range
    assert prof["range_pct"][0] < 0 < prof["range_pct"][1]


def _err(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    return err


def test_log_without_arguments_refused(tmp_path, capsys):
    log = _log(tmp_path / "noargs.log", 100.0, args=None)
    assert main(["calibrate", "--megatron-log", str(log), "--topo", TOPO, "--out",
                 str(tmp_path / "p.yaml")]) == 2
    err = _err(capsys)
    assert "noargs.log" in err and "arguments" in err


def test_truncated_log_refused(tmp_path, capsys):
    log = _log(tmp_path / "short.log", 100.0, upto=10)  # killed during warm-up
    assert main(["calibrate", "--megatron-log", str(log), "--topo", TOPO, "--out",
                 str(tmp_path / "p.yaml")]) == 2
    n = len(ARGS) + 2 + 1 + 2  # the world-size line, the block, the two warm-up lines
    assert f"short.log:{n}: iteration:" in _err(capsys)
    text = (tmp_path / "short.log").read_text().splitlines()
    (tmp_path / "cut.log").write_text("\n".join(text[:5]) + "\n")  # cut inside the block
    assert main(["calibrate", "--megatron-log", str(tmp_path / "cut.log"), "--topo", TOPO,
                 "--out", str(tmp_path / "p.yaml")]) == 2
    assert "cut.log:2:" in _err(capsys)


PROFILE = """schema: simrun.calibration/1
gpu: A100-SXM4-80GB
topology: dgx-a100-512
stack: test stack
knobs:
  gemm_efficiency_scale: {value: 0.85, measurement: "test log train.log"}
range_pct: [-1.5, 2.0]
"""
RUN = ["--model", "gpt2-medium", "--nodes", "1", "--tp", "2", "--global-batch", "8"]


def _time(tmp_path, name, *extra):
    import json

    out = tmp_path / f"{name}.json"
    assert main([*RUN, *extra, "--json", str(out), "--quiet"]) == 0
    return json.loads(out.read_text())


def test_profile_applied_with_assumption_line(tmp_path, capsys):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    plain = _time(tmp_path, "plain", "--topo", TOPO)
    cal = _time(tmp_path, "cal", "--topo", TOPO, "--calibration", str(prof))
    assert cal["iteration_time_s"] > plain["iteration_time_s"] * 1.05
    line = [a for a in cal["assumptions"] if "gemm_efficiency_scale = 0.85" in a]
    assert line and "test log train.log" in line[0]
    # another topology: refused, naming the flag; accepted with the override, with a warning
    capsys.readouterr()
    assert main([*RUN, "--topo", "dgx-a100-1024", "--calibration", str(prof), "--quiet"]) == 2
    err = _err(capsys)
    assert "--calibration" in err and "dgx-a100-512" in err
    other = _time(tmp_path, "other", "--topo", "dgx-a100-1024", "--calibration", str(prof),
                  "--calibration-any-cluster")
    assert other["iteration_time_s"] > 0
    warn = _err(capsys)
    assert "warning" in warn and "dgx-a100-512" in warn
    # another GPU: refused
    assert main([*RUN, "--topo", "dgx-h100-1024", "--calibration", str(prof), "--quiet"]) == 2
    assert "A100-SXM4-80GB" in _err(capsys)


def test_bad_profile_names_file_and_line(tmp_path, capsys):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE.replace("0.85", "3.0"))
    assert main([*RUN, "--topo", TOPO, "--calibration", str(prof), "--quiet"]) == 2
    err = _err(capsys)
    assert "p.yaml:6: knobs.gemm_efficiency_scale.value:" in err and "bounds" in err

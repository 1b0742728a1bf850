"""The seeds run end to end from the CLI; outputs are deterministic; errors are one line with
the right exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, SEED_512, SEED_1024, SEED_OPTABLE, TOPOLOGIES

from sim.cli import main

TOPO_1024 = TOPOLOGIES / "dgx-a100-1024.yaml"
TOPO_512 = TOPOLOGIES / "dgx-a100-512.yaml"


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "sim.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, env=e, timeout=300)


def test_seed_1024_reports_16_stages_and_16_microbatches(tmp_path):
    out = tmp_path / "r.json"
    assert main(["--workload", str(SEED_1024), "--topo", str(TOPO_1024), "--json", str(out),
                 "--quiet"]) == 0
    rep = json.loads(out.read_text())
    assert rep["pipeline_stages"] == 16 and rep["microbatches"] == 16
    assert len(rep["stages"]) == 16
    assert rep["parallelism"] == {"tp": 8, "pp": 16, "dp": 8, "ep": 1, "world_size": 1024}
    assert rep["iteration_time_s"] > 0 and rep["assumptions"]
    for st in rep["stages"]:
        total = st["compute_s"] + st["optimizer_s"] + sum(st["exposed_comm_s"].values()) + st[
            "bubble_s"]
        assert total == pytest.approx(rep["iteration_time_s"], rel=1e-9)
    assert rep["ideal_bubble_fraction"] == 15 / 16


@pytest.mark.parametrize("workload,topo,extra", [
    (SEED_512, TOPO_512, []),
    (SEED_512, TOPO_512, ["--microbatches", "8"]),
    (SEED_OPTABLE, TOPO_512, ["--gpus", "8"]),
])
def test_other_seeds_run_end_to_end(tmp_path, workload, topo, extra):
    out = tmp_path / "r.json"
    assert main(["--workload", str(workload), "--topo", str(topo), "--json", str(out),
                 "--quiet", *extra]) == 0
    rep = json.loads(out.read_text())
    assert rep["iteration_time_s"] > 0


def test_two_runs_give_byte_identical_json_across_hash_seeds(tmp_path):
    outs = []
    for seed in ("0", "12345"):
        out = tmp_path / f"r{seed}.json"
        r = run_cli("--workload", SEED_1024, "--topo", TOPO_1024, "--json", out, "--quiet",
                    env={"PYTHONHASHSEED": seed})
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


@pytest.mark.parametrize("args,needle", [
    (["--workload", "nope.txt", "--topo", TOPO_1024], "nope.txt: no such file"),
    (["--workload", SEED_1024, "--topo", TOPO_1024, "--tp", "0"], "--tp"),
    (["--workload", SEED_1024, "--topo", TOPO_1024, "--gpus", "1000"], "not a multiple"),
    (["--workload", SEED_1024, "--topo", TOPO_1024, "--schedule", "interleaved"],
     "virtual pipeline size"),
    (["--workload", SEED_1024, "--topo", TOPO_512], "needs 1024 GPUs"),
    (["--workload", SEED_1024, "--topo", TOPO_1024, "--json", "/nonexistent/dir/r.json"],
     "does not exist"),
    (["--topo", TOPO_1024], "--workload"),
])
def test_bad_input_is_one_line_on_stderr_with_exit_2(args, needle):
    r = run_cli(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simrun: error:")
    assert needle in lines[0]


def test_help_documents_units_and_defaults():
    r = run_cli("--help")
    assert r.returncode == 0
    for flag in ("--workload", "--topo", "--json", "--pp", "--microbatches", "--vpp",
                 "--schedule", "--pp-comm-bytes", "--bytes-per-element", "--per-rank"):
        assert flag in r.stdout
    assert "bytes" in r.stdout and "default" in r.stdout


def test_atomic_write_leaves_nothing_when_interrupted(tmp_path):
    from sim.files.outputs import atomic_write

    target = tmp_path / "out.json"
    target.write_text("old\n")

    def boom(f):
        f.write("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, boom)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    atomic_write(target, lambda f: f.write("new\n"))
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o044  # readable by others as with a plain open()

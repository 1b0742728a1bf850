"""Determinism: identical inputs give byte-identical outputs — report JSON, Chrome trace (plain and
gzip), figures, sweep CSV/JSON, generated AICB text, collective JSON — across runs and across
``PYTHONHASHSEED`` values (so no set or dict-of-hash order can leak into an output).

The one exception is the sweep's resume log ``results.jsonl``: it records each layout as it
completes, with its wall-clock time; its rows (without ``elapsed_s``) must still agree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SEED_512, SEED_OPTABLE, TOPOLOGIES, WORKLOADS

TINY = str(TOPOLOGIES / "tiny-2x2.yaml")
GPT2M = str(WORKLOADS / "models" / "gpt2-medium.yaml")
# Every command writes into the current directory (relative paths), so the outputs of runs in
# different directories are comparable byte for byte.
# The seed-512 run is interleaved at the gallery's small size (PP 4 x VPP 2, 8 microbatches):
# the same code paths as its 8 x 8 chunks at half the CPU, four times over.
COMMANDS = [
    ["--workload", str(SEED_512), "--topo", str(TOPOLOGIES / "dgx-a100-512.yaml"), "--quiet",
     "--pp", "4", "--vpp", "2", "--microbatches", "8", "--json", "seed512.json", "--trace",
     "seed512-trace.json.gz"],
    ["--workload", str(SEED_OPTABLE), "--topo", TINY, "--quiet", "--per-rank", "--json",
     "perrank.json", "--trace", "perrank-trace.json", "--trace-ranks", "all",
     "--plot", "timeline.svg", "--breakdown-plot", "breakdown.png"],
    ["--workload", str(SEED_OPTABLE), "--topo", TINY, "--quiet", "--slow-gpu", "1:1.5",
     "--json", "slow.json"],
    ["--model", GPT2M, "--topo", TINY, "--quiet", "--tp", "2", "--pp", "2", "--global-batch",
     "8", "--json", "model.json", "--trace", "model-trace.json"],
    ["generate", "--model", GPT2M, "--topo", TINY, "--tp", "2", "--global-batch", "8", "--out",
     "generated.txt"],
    ["collective", "--topo", TINY, "--gpus", "4", "--op", "alltoall", "--sizes", "1K:1M",
     "--json", "collective.json"],
    ["sweep", "--model", GPT2M, "--topo", TINY, "--global-batch", "8", "--out", "sweep",
     "--workers", "1", "--quiet", "--no-progress"],
]
DRIVER = ("import sys, json\nfrom sim.cli import main\n"
          "for argv in json.loads(sys.argv[1]):\n"
          "    rc = main(argv)\n"
          "    assert rc == 0, (rc, argv)\n")


LOG = "sweep/results.jsonl"  # the sweep's resume log: completion order and wall times


def _outputs(d: Path) -> dict[str, bytes]:
    """Every output file; the sweep's resume log normalised to its deterministic content."""
    import json

    out = {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}
    rows = [json.loads(line) for line in out[LOG].decode().splitlines()]
    for row in rows:
        assert row.pop("elapsed_s") >= 0  # wall-clock time of that layout: differs run to run
    out[LOG] = json.dumps(sorted(rows, key=lambda r: r["layout"])).encode()
    return out


def _run_in_subprocess(d: Path, hash_seed: str) -> None:
    import json

    env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(COMMANDS)], cwd=d, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """The same commands in three processes: PYTHONHASHSEED 0, 1 and 2**32 − 1."""
    out = {}
    for seed in ("0", "1", "4294967295"):
        d = tmp_path_factory.mktemp(f"hashseed{seed}")
        _run_in_subprocess(d, seed)
        out[seed] = _outputs(d)
    return out


@pytest.mark.slow
def test_every_command_wrote_its_outputs(runs):
    files = set(runs["0"])
    for name in ("seed512.json", "seed512-trace.json.gz", "perrank.json", "perrank-trace.json",
                 "timeline.svg", "breakdown.png", "slow.json", "model.json", "model-trace.json",
                 "generated.txt", "collective.json", "sweep/results.csv", "sweep/results.json",
                 "sweep/results.jsonl", "sweep/ranking.png", "sweep/heatmap.png"):
        assert name in files, sorted(files)
    assert not [f for f in files if f.endswith(".tmp")]


@pytest.mark.parametrize("seed", ["1", "4294967295"])
def test_outputs_are_byte_identical_across_hash_seeds(runs, seed):
    a, b = runs["0"], runs[seed]
    assert sorted(a) == sorted(b)
    differ = [name for name in a if a[name] != b[name]]
    assert differ == [], f"outputs differ between PYTHONHASHSEED=0 and {seed}: {differ}"


def test_outputs_are_byte_identical_in_process(runs, tmp_path, monkeypatch, capsys):
    """A fourth run in this test process (its own hash seed) against the subprocess runs."""
    from sim.cli import main

    monkeypatch.chdir(tmp_path)
    for argv in COMMANDS:
        assert main(argv) == 0, argv
    capsys.readouterr()
    mine = _outputs(tmp_path)
    differ = [name for name in runs["0"] if runs["0"][name] != mine.get(name)]
    assert differ == []

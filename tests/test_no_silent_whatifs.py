"""No silent what-ifs (sim/applicable.py): every flag × input kind either changes the simulation
with an assumption line saying how, or exits 2 with a one-line reason naming the flag."""

from __future__ import annotations

import json

import pytest
from conftest import SEED_512, SEED_OPTABLE

from sim.cli import main

INPUTS = {
    "aicb": ["--workload", str(SEED_512), "--topo", "dgx-a100-512"],
    "optable": ["--workload", str(SEED_OPTABLE), "--topo", "tiny-2x2"],
    "model": ["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "2", "--global-batch",
              "8"],
}
_BASE: dict[str, dict] = {}


def run(tmp_path, kind: str, extra: list[str]) -> dict:
    out = tmp_path / "r.json"
    rc = main([*INPUTS[kind], *extra, "--json", str(out), "--quiet"])
    assert rc == 0, (kind, extra)
    return json.loads(out.read_text())


def base(tmp_path, kind: str) -> dict:
    if kind not in _BASE:
        _BASE[kind] = run(tmp_path, kind, [])
    return _BASE[kind]


MODEL_ONLY = [["--dtype", "fp16"], ["--recompute", "full"], ["--global-batch", "16"],
              ["--dp", "4"], ["--micro-batch", "1"], ["--sequence-parallel"],
              ["--distributed-optimizer"], ["--flash-attention"], ["--no-overlap-grad-reduce"],
              ["--ignore-memory"]]
REFUSED = (
    [("aicb", f, f[0]) for f in MODEL_ONLY]
    + [("optable", f, f[0]) for f in MODEL_ONLY]
    + [("aicb", ["--bytes-per-element", "2"], "--bytes-per-element"),
       ("aicb", ["--missing-backward-ratio", "3"], "--missing-backward-ratio"),
       ("aicb", ["--tp", "4"], "--tp"),  # the file's rows are TP 8
       ("aicb", ["--ep", "2"], "--ep"),
       ("model", ["--format", "aicb"], "--format"),
       ("model", ["--bytes-per-element", "2"], "--bytes-per-element"),
       ("model", ["--missing-backward-ratio", "3"], "--missing-backward-ratio"),
       ("model", ["--pp-comm-bytes", "1000"], "--pp-comm-bytes"),
       ("model", ["--row-placement", "all"], "--row-placement"),
       ("model", ["--tp", "1", "--sequence-parallel"], "--sequence-parallel"),
       ("model", ["--dp", "1", "--gpus", "2", "--distributed-optimizer"],
        "--distributed-optimizer"),
       ("model", ["--dp", "1", "--gpus", "2", "--no-overlap-grad-reduce"],
        "--no-overlap-grad-reduce"),
       ("model", ["--ignore-memory"], "--ignore-memory"),
       ("model", ["--dtype", "fp16"], "--dtype")]  # the test GPU has no fp16 peak
)


@pytest.mark.parametrize("kind,extra,flag", REFUSED,
                         ids=[f"{k}:{' '.join(e)}" for k, e, _ in REFUSED])
def test_refused_with_a_one_line_reason(kind, extra, flag, capsys):
    assert main([*INPUTS[kind], *extra, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simrun: error: ") and f"{flag}:" in err[0]


CHANGES = [
    ("aicb", ["--microbatches", "4"]), ("aicb", ["--schedule", "gpipe", "--microbatches", "8"]),
    ("aicb", ["--pp-comm-bytes", "1048576"]), ("aicb", ["--row-placement", "all"]),
    ("aicb", ["--gpus", "256"]), ("aicb", ["--algorithm", "ring"]),
    ("aicb", ["--protocol", "Simple"]), ("aicb", ["--set", "fabric.link_bandwidth_gbps=100"]),
    ("optable", ["--bytes-per-element", "2"]), ("optable", ["--missing-backward-ratio", "3"]),
    ("optable", ["--tp", "2"]), ("optable", ["--microbatches", "2"]),
    ("optable", ["--per-rank"]), ("optable", ["--slow-gpu", "1:2"]),
    ("model", ["--recompute", "full"]), ("model", ["--sequence-parallel"]),
    ("model", ["--distributed-optimizer"]), ("model", ["--flash-attention"]),
    ("model", ["--no-overlap-grad-reduce"]),
    ("model", ["--micro-batch", "2"]), ("model", ["--pp", "2"]),
    ("model", ["--set", "node.gpu.hbm_GBps=2000"]),
]


@pytest.mark.parametrize("kind,extra", CHANGES, ids=[f"{k}:{' '.join(e)}" for k, e in CHANGES])
def test_accepted_flags_change_the_run_and_say_so(kind, extra, tmp_path):
    before, after = base(tmp_path, kind), run(tmp_path, kind, extra)
    assert set(after["assumptions"]) != set(before["assumptions"])  # an assumption says how
    # --per-rank simulates the same iteration rank by rank (the mode is stated); NCCL's tuner
    # already picks ring for every collective of this file (the forced choice is stated)
    if extra not in (["--per-rank"], ["--algorithm", "ring"]):
        assert (after["iteration_time_s"], after["parallelism"], after["microbatches"]) != (
            before["iteration_time_s"], before["parallelism"], before["microbatches"])

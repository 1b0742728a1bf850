"""The memory error lists only the changes that make the layout fit, each with the memory it
saves, from the memory model run again (sim/models/memory_advice.py)."""

from __future__ import annotations

import re

from conftest import TOPOLOGIES, WORKLOADS
from par_support import make_par

from sim.cli import main
from sim.models.memory import check_memory
from sim.models.vocab.spec import load_model
from sim.topology import load_topology

MODELS = WORKLOADS / "models"
CHANGE = r"--[a-z-]+(?: \w+)?(?: \(DP \d+\))?"


def error(capsys, *args):
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


def listed(err):
    """{changes: (saved GB, after GB)} of the advice."""
    pattern = rf"((?:{CHANGE})(?: with {CHANGE})?) \(saves ([\d.]+) GB → ([\d.]+) GB\)"
    return {m[0]: (float(m[1]), float(m[2])) for m in re.findall(pattern, err)}


def gb(before, after):
    return (round((before.peak.total_bytes - after.peak.total_bytes) / 1e9, 1),
            round(after.peak.total_bytes / 1e9, 1))


def test_llama3_8b_at_tp1_lists_only_what_fits_and_fused_attention_where_it_helps(capsys):
    err = error(capsys, "--model", str(MODELS / "llama3-8b.yaml"), "--topo",
                str(TOPOLOGIES / "dgx-h100-1024.yaml"), "--global-batch", "1024",
                "--distributed-optimizer", "--sequence-parallel", "--attention-backend", "unfused")
    model, gpu = load_model(MODELS / "llama3-8b.yaml"), load_topology(
        TOPOLOGIES / "dgx-h100-1024.yaml").gpu
    base = dict(global_batch=1024, sequence_parallel=True, distributed_optimizer=True)
    before = check_memory(model, make_par(dp=1024, attention_backend="unfused", **base),
                          gpu)
    assert not before.feasible
    flash = check_memory(model, make_par(dp=1024, attention_backend="fused", **base), gpu)
    # fused attention drops the s×s scores (2·a·s²·b per layer without attention dropout:
    # 32 layers · 2·32·8192² = 137.4 GB of the 178.3): 178.3 → 40.9 GB, not enough alone
    assert round(before.peak.activations_bytes / 1e9, 1) == 178.3
    assert round(flash.peak.activations_bytes / 1e9, 1) == 40.9 and not flash.feasible
    expect = {
        "--recompute full": gb(before, check_memory(
            model, make_par(dp=1024, recompute="full", attention_backend="unfused",
                                  **base), gpu)),
        "--attention-backend fused with --tp 2 (DP 512)": gb(before, check_memory(
            model, make_par(tp=2, dp=512, attention_backend="fused", **base), gpu)),
        "--attention-backend fused with --pp 2 (DP 512)": gb(before, check_memory(
            model, make_par(pp=2, dp=512, attention_backend="fused", **base), gpu)),
    }
    got = listed(err)
    for change, numbers in expect.items():
        assert got[change] == numbers, change
    assert "--attention-backend fused" not in got  # alone it does not fit
    # flags already given, or without effect at TP 1, are never suggested
    advice = err.split("GB);", 1)[1]
    for flag in ("--distributed-optimizer", "--sequence-parallel"):
        assert flag not in advice


def test_each_listed_change_fits_and_saves_what_it_says(capsys):
    # the unfused attention of Megatron-LM 2022 (its s×s scores are what does not fit)
    err = error(capsys, "--model", str(MODELS / "gpt3-175b.yaml"), "--topo",
                str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--tp", "8", "--pp", "8",
                "--global-batch", "1536", "--attention-backend", "unfused")
    model = load_model(MODELS / "gpt3-175b.yaml")
    gpu = load_topology(TOPOLOGIES / "dgx-a100-1024.yaml").gpu

    def unfused(**kw):  # the unfused configs of this test
        return make_par(**{"attention_backend": "unfused", **kw})

    par = unfused(tp=8, pp=8, dp=16, global_batch=1536)
    before = check_memory(model, par, gpu)
    singles = {"--recompute full": unfused(tp=8, pp=8, dp=16, global_batch=1536,
                                                  recompute="full"),
               "--tp 16 (DP 8)": unfused(tp=16, pp=8, dp=8, global_batch=1536),
               "--distributed-optimizer": unfused(tp=8, pp=8, dp=16, global_batch=1536,
                                                         distributed_optimizer=True)}
    got = listed(err)
    for flag, p in singles.items():
        m = check_memory(model, p, gpu)
        assert m.feasible and got[flag] == gb(before, m)
    # the single changes come first, largest saving first
    assert list(got)[:3] == ["--recompute full", "--tp 16 (DP 8)", "--distributed-optimizer"]
    # and the ones not listed alone do not fit on their own
    for kw in ({"attention_backend": "fused"}, {"sequence_parallel": True},
               {"recompute": "selective"}):
        assert not check_memory(model, unfused(tp=8, pp=8, dp=16, global_batch=1536,
                                                      **kw), gpu).feasible
    assert not check_memory(model, unfused(tp=8, pp=16, dp=8, global_batch=1536),
                            gpu).feasible
    for change in ("--attention-backend fused", "--sequence-parallel", "--recompute selective",
                   "--pp 16 (DP 8)"):
        assert change not in got


def test_when_no_single_change_fits_pairs_are_listed(capsys):
    err = error(capsys, "--model", str(MODELS / "gpt3-175b.yaml"), "--topo",
                str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--tp", "8", "--pp", "2",
                "--global-batch", "1536")
    got = listed(err)
    assert got and all(" with " in change for change in got)
    model = load_model(MODELS / "gpt3-175b.yaml")
    gpu = load_topology(TOPOLOGIES / "dgx-a100-1024.yaml").gpu
    both = make_par(tp=8, pp=2, dp=64, global_batch=1536, recompute="full",
                          distributed_optimizer=True)
    before = check_memory(model, make_par(tp=8, pp=2, dp=64, global_batch=1536), gpu)
    assert got["--recompute full with --distributed-optimizer"] == gb(
        before, check_memory(model, both, gpu))

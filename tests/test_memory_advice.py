"""The memory error lists only the changes that make the layout fit, each with the memory it
saves, from the memory model run again (sim/models/memory_advice.py)."""

from __future__ import annotations

import dataclasses
import re

from sim.cli import main
from sim.models.memory import check_memory
from sim.models.parallel import ParallelConfig
from sim.models.spec import load_model
from sim.topology import load_topology


def error(capsys, *args):
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


def listed(err):
    """{flag text: (saved GB, after GB)} of the advice."""
    pattern = r"(--[a-z-]+(?: \w+)?(?: \(DP \d+\))?) \(saves ([\d.]+) GB → ([\d.]+) GB\)"
    return {m[0]: (float(m[1]), float(m[2])) for m in re.findall(pattern, err)}


def test_llama3_8b_at_tp1_lists_only_what_fits(capsys):
    err = error(capsys, "--model", "llama3-8b", "--topo", "dgx-h100-1024", "--global-batch",
                "1024", "--distributed-optimizer", "--sequence-parallel")
    model, gpu = load_model("llama3-8b"), load_topology("dgx-h100-1024").gpu
    par = ParallelConfig(tp=1, pp=1, dp=1024, global_batch=1024, sequence_parallel=True,
                         distributed_optimizer=True)
    before = check_memory(model, par, gpu)
    assert not before.feasible
    full = check_memory(model, dataclasses.replace(par, recompute="full"), gpu)
    flash = check_memory(model, dataclasses.replace(par, flash_attention=True), gpu)
    assert full.feasible and not flash.feasible  # fused attention alone is not enough here
    assert listed(err) == {"--recompute full": (
        round((before.peak.total_bytes - full.peak.total_bytes) / 1e9, 1),
        round(full.peak.total_bytes / 1e9, 1))}
    # flags already given, or without effect at TP 1, are never suggested
    for flag in ("--distributed-optimizer", "--sequence-parallel", "--flash-attention"):
        assert flag not in err.split("GB);", 1)[1]


def test_each_listed_change_fits_and_saves_what_it_says(capsys):
    err = error(capsys, "--model", "gpt3-175b", "--topo", "dgx-a100-1024", "--tp", "8", "--pp",
                "8", "--global-batch", "1536")
    model, gpu = load_model("gpt3-175b"), load_topology("dgx-a100-1024").gpu
    par = ParallelConfig(tp=8, pp=8, dp=16, global_batch=1536)
    peak = check_memory(model, par, gpu).peak.total_bytes
    changes = {"--recompute full": dataclasses.replace(par, recompute="full"),
               "--tp 16 (DP 8)": dataclasses.replace(par, tp=16, dp=8),
               "--distributed-optimizer": dataclasses.replace(par, distributed_optimizer=True)}
    expect = {}
    for flag, p in changes.items():
        m = check_memory(model, p, gpu)
        assert m.feasible
        expect[flag] = (round((peak - m.peak.total_bytes) / 1e9, 1),
                        round(m.peak.total_bytes / 1e9, 1))
    assert listed(err) == expect
    # and the ones left out do not fit on their own
    for p in (dataclasses.replace(par, flash_attention=True),
              dataclasses.replace(par, sequence_parallel=True),
              dataclasses.replace(par, recompute="selective"),
              dataclasses.replace(par, pp=16, dp=8)):
        assert not check_memory(model, p, gpu).feasible


def test_when_no_single_change_fits_the_options_are_tried_together(capsys):
    err = error(capsys, "--model", "gpt3-175b", "--topo", "dgx-a100-1024", "--tp", "8", "--pp",
                "2", "--global-batch", "1536")
    assert "no single change fits; it fits with --flash-attention --recompute full " \
           "--sequence-parallel --distributed-optimizer together" in err

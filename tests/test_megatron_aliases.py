"""Megatron-LM's flag names are aliases of simrun's options (declared once, with the option),
shown in --help; an unknown flag gets the nearest known name."""

import pytest

from sim.cli import build_parser, main
from sim.cli.sweep import build_parser as sweep_parser

PAIRS = [("--tensor-model-parallel-size", "--tp", "2"),
         ("--pipeline-model-parallel-size", "--pp", "2"),
         ("--virtual-pipeline-model-parallel-size", "--vpp", "2"),
         ("--expert-model-parallel-size", "--ep", "2"),
         ("--micro-batch-size", "--micro-batch", "2"),
         ("--global-batch-size", "--global-batch", "16"),
         ("--microbatch-group-size-per-virtual-pipeline-stage", "--microbatch-group-size", "2"),
         ("--recompute-granularity", "--recompute", "full"),
         ("--use-distributed-optimizer", "--distributed-optimizer", None),
         ("--use-flash-attn", "--flash-attention", None),
         ("--context-parallel-size", "--cp", "2")]


@pytest.mark.parametrize("megatron, simrun, value", PAIRS)
def test_megatron_name_parses_as_simruns(megatron, simrun, value):
    base = ["--model", "gpt2-medium", "--topo", "tiny-2x2"]
    tail = [value] if value else []
    a = build_parser().parse_args([*base, megatron, *tail])
    b = build_parser().parse_args([*base, simrun, *tail])
    assert vars(a) == vars(b)
    assert megatron in build_parser().format_help()


def test_sweep_takes_the_layout_names_too():
    p = sweep_parser()
    a = p.parse_args(["--model", "m", "--topo", "t", "--global-batch-size", "8",
                      "--tensor-model-parallel-size", "1,2"])
    assert a.tp == "1,2" and a.global_batch == 8


def test_unknown_flag_gets_the_nearest_name(capsys):
    assert main(["--model", "gpt2-medium", "--topo", "tiny-2x2",
                 "--tensor-model-paralel-size", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unrecognized arguments: --tensor-model-paralel-size 2 (did you mean " \
           "--tensor-model-parallel-size?)" in err
    # an error about a flag with aliases names it by its first name, as before
    assert main(["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "two"]) == 2
    assert "argument --tp: expected a positive integer" in capsys.readouterr().err

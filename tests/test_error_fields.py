"""Domain errors name the option (``field="tp"``); only the CLI names the flag (``--tp``).

A Python caller of the library never sees a flag name: an AST scan refuses a flag literal as
an error's field outside ``sim/cli/``, and the same bad layout raises ``field == "tp"``
through :mod:`sim.api` and prints ``--tp: ...`` through ``simrun``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sim
from sim.cli import main
from sim.cli.fields import cli_error, flag_of
from sim.errors import InputError, UsageError

SIM = Path(__file__).resolve().parent.parent / "sim"

# fields that still name a command-line spelling (no option name fits): "--set KEY" (a
# topology override's key) and the NCCL tuner's pair of flags
LEFT = {
    ("sim/options/applicable.py", "--set "),
    ("sim/topology/sections.py", "--set "),
    ("sim/topology/overrides.py", "--set "),
    ("sim/network/tuner.py", "--nccl-algo/--nccl-proto"),
    # a Megatron-LM argument named inside a job file (file and line given): the file's field
    ("sim/jobs/megatron_args.py", "--vocab-size"),
}


def _flag_texts(node: ast.expr) -> list[str]:
    """The string literals (and f-strings' leading text) in ``node`` that start with --."""
    out = []
    parts = {id(v) for sub in ast.walk(node) if isinstance(sub, ast.JoinedStr) for v in sub.values}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and id(sub) not in parts:
            out.append(sub.value)
        elif isinstance(sub, ast.JoinedStr) and sub.values \
                and isinstance(sub.values[0], ast.Constant):
            out.append(str(sub.values[0].value))
    return [t for t in out if t.startswith("--")]


def test_no_flag_literal_as_a_field_outside_the_cli():
    found = []
    for path in sorted(SIM.rglob("*.py")):
        rel = path.relative_to(SIM.parent).as_posix()
        if rel.startswith("sim/cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            kws = {k.arg: k.value for k in node.keywords}
            if "field" not in kws or "file" in kws:  # a file's error names the file's key
                continue
            for text in _flag_texts(kws["field"]):
                if not any(rel == f and text.startswith(t) for f, t in LEFT):
                    found.append(f"{rel}:{node.lineno}: field={text!r}")
    assert found == []


def test_the_scan_sees_a_flag_literal():
    """The scan above is not vacuous: it reports a literal and an f-string flag."""
    tree = ast.parse('UsageError("x", field="--tp")\nUsageError("x", field=f"--{n}")')
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert [t for c in calls for t in _flag_texts(c.keywords[0].value)] == ["--tp", "--"]


def test_library_names_the_option_and_the_cli_the_flag(capsys):
    """TP 3 does not divide GPT-2 medium's 16 heads (sim/models/parallel_checks.py)."""
    with pytest.raises(UsageError) as err:
        sim.prepare_model("gpt2-medium", "tiny-fattree-8", sim.LayoutRequest(tp=3, dp=2),
                          sim.Training(global_batch=8))
    assert err.value.field == "tp"
    assert str(err.value) == "tp: tensor-parallel size 3 must divide the 16 heads"
    code = main(["--model", "gpt2-medium", "--topo", "tiny-fattree-8", "--tp", "3", "--dp", "2",
                 "--global-batch", "8"])
    assert code == 2
    assert capsys.readouterr().err == \
        "simrun: error: --tp: tensor-parallel size 3 must divide the 16 heads\n"


def test_declared_flag_differs_from_the_option_name(capsys):
    """The dispatcher is Training.moe_token_dispatcher; its flag Megatron-Core's
    --moe-token-dispatcher-type (the registry's declaration)."""
    with pytest.raises(UsageError) as err:
        sim.prepare_model("gpt2-medium", "tiny-2x2",
                          training=sim.Training(global_batch=8, moe_token_dispatcher="flex"))
    assert err.value.field == "moe_token_dispatcher"
    assert main(["--model", "gpt2-medium", "--topo", "tiny-2x2", "--global-batch", "8",
                 "--moe-token-dispatcher-type", "flex"]) == 2
    assert capsys.readouterr().err == ("simrun: error: --moe-token-dispatcher-type: applies to "
                                       "mixture-of-experts models\n")


@pytest.mark.parametrize("name, flag", [
    ("tp", "--tp"),
    ("first_stage_layers", "--decoder-first-pipeline-num-layers"),
    ("moe_capacity_factor", "--moe-expert-capacity-factor"),
    ("apply_rope_fusion", "--no-rope-fusion"),
    ("cp", "--cp"),                          # a dest whose first flag is another spelling
    ("max_sim_time_s", "--max-sim-time-s"),
    ("not_an_option", "--not-an-option"),    # no declaration, no parser: the spelling
])
def test_flag_of(name, flag):
    assert flag_of(name) == flag


def test_cli_error_leaves_file_errors_and_flags_alone():
    """A file's error names the file's key; a field that already is a flag stays."""
    in_file = InputError("must be ≥ 1", file="m.yaml", line=3, field="layers")
    assert str(cli_error(in_file)) == "m.yaml:3: layers: must be ≥ 1"
    flagged = UsageError("bad", field="--stage")
    assert str(cli_error(flagged)) == "--stage: bad"
    named = UsageError("bad", field="first_stage_layers")
    assert str(cli_error(named)) == "--decoder-first-pipeline-num-layers: bad"
    assert named.field == "--decoder-first-pipeline-num-layers"

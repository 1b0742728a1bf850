"""The feature registry (sim/options/registry.py): every training option is declared once, and
the parsers, the verdict table, the refusals and the sweep's resume keys come from it."""

from __future__ import annotations

import ast
from dataclasses import fields

import pytest
from conftest import ROOT

from sim.cli import build_parser
from sim.cli.sweep import build_parser as sweep_parser
from sim.cli.training_args import training_of
from sim.options import applicable, declaration, registry
from sim.parallel.config import Training

#: Training fields that are not options of their own: the batch sizes are model-input flags
#: (the sweep takes --micro-batch as a list), ep_nodes is set from the cluster
NOT_OPTIONS = {"global_batch", "micro_batch", "ep_nodes"}


def test_no_module_outside_sim_cli_imports_argparse():
    offenders = []
    for path in sorted((ROOT / "sim").rglob("*.py")):
        if path.parent == ROOT / "sim" / "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "argparse" for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_every_training_field_is_declared_once():
    declared = [o.field for o in registry.registry()]
    assert len(declared) == len(set(declared))
    assert set(declared) == {f.name for f in fields(Training)} - NOT_OPTIONS
    names = [f.name for o in registry.registry() for f in o.flags]
    assert len(names) == len(set(names))
    for o in registry.registry():
        assert o.framework and o.feature.startswith("sim."), o.field
        assert all(f.kind in declaration.KINDS for f in o.flags), o.field


@pytest.mark.parametrize("parser", [build_parser, sweep_parser])
def test_each_declared_flag_is_parsed_with_the_fields_default(parser):
    actions = {a.option_strings[0]: a for a in parser()._actions if a.option_strings}
    for name, (option, flag) in registry.flags().items():
        a = actions[name]
        assert a.dest == flag.key and tuple(a.option_strings[1:]) == flag.aliases
        if flag.kind in ("choice", "float"):  # the default is the Training field's, not a copy
            assert a.default == registry.default(option.target(flag)), name
        if "{default}" in flag.help and not flag.default_text:
            assert str(registry.default(option.target(flag))) in a.help, name


def test_no_training_flag_gives_the_training_defaults():
    args = build_parser().parse_args(["--topo", "tiny-2x2", "--model", "gpt2-medium",
                                      "--global-batch", "8"])
    assert training_of(args) == Training(global_batch=8)


def test_flags_set_their_fields_and_nested_split_parts():
    args = build_parser().parse_args(
        ["--topo", "tiny-2x2", "--model", "gpt2-medium", "--global-batch", "8",
         "--no-overlap-grad-reduce", "--no-rope-fusion", "--decoder-first-pipeline-num-layers",
         "3", "--account-for-loss-in-pipeline-split", "--moe-load-imbalance", "1.5",
         "--fp8-recipe", "tensorwise", "--wgrad-deferral-limit", "0"])
    t = training_of(args)
    assert (t.overlap_grad_reduce, t.apply_rope_fusion, t.moe_load_imbalance, t.fp8_recipe) == (
        False, False, 1.5, "tensorwise")
    assert (t.split.first_stage_layers, t.split.last_stage_layers, t.split.account_for_loss,
            t.split.account_for_embedding) == (3, None, True, False)


def test_verdict_table_rows_of_the_options_come_from_the_declarations():
    for name, row in registry.table_rows().items():
        assert {k: (v.verdict, v.why) for k, v in applicable.TABLE[name].items()} == row


def test_sweep_resume_keys_are_the_options_new_since_resumable_settings():
    later = registry.sweep_later()
    assert set(later) == {o.field for o in registry.registry() if not o.recorded_at_default}
    assert all(later[k] == getattr(Training(), k) for k in later)


def _assumption_keys() -> set[str]:
    """Every constant key given to an Assumption in sim/ (its second argument)."""
    keys = set()
    for path in (ROOT / "sim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "Assumption" and len(node.args) > 1
                    and isinstance(node.args[1], ast.Constant)):
                keys.add(node.args[1].value)
    return keys


def test_each_option_names_the_assumption_line_that_states_it():
    keys = _assumption_keys()
    for o in registry.registry():
        assert o.assumption in keys, (o.field, o.assumption)
    assert registry.option_of_assumption("param-gather-step") == (
        "overlap_param_gather_with_optimizer_step")

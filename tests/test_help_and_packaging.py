"""Help and packaging (issue 12 item 7): every flag of every subcommand has a help line with its
default; `simrun` alone prints the usage and the subcommands; the Dask extra is named when
missing; a header value that does not fit the layout names the file, line and field."""

from __future__ import annotations

import argparse
import importlib

import pytest
from conftest import SEED_1024

from sim.cli import SUBCOMMANDS, build_parser, main

NO_DEFAULT = (None, False, [], argparse.SUPPRESS)


def parsers() -> dict[str, argparse.ArgumentParser]:
    out = {"simrun": build_parser()}
    for name, (module, _) in SUBCOMMANDS.items():
        out[name] = importlib.import_module(module).build_parser()
    return out


def flags_of(p: argparse.ArgumentParser):
    for a in p._actions:
        if not isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
            yield (a.option_strings[0] if a.option_strings else a.dest), a


def test_every_subcommand_has_a_parser():
    assert set(parsers()) == {"simrun", *SUBCOMMANDS}


@pytest.mark.parametrize("name", ["simrun", *SUBCOMMANDS])
def test_every_flag_has_a_help_line_with_its_default(name):
    p = parsers()[name]
    flags = list(flags_of(p))
    assert flags
    for flag, a in flags:
        assert a.help and a.help != argparse.SUPPRESS and len(a.help) > 10, (name, flag)
        if a.default not in NO_DEFAULT and not a.required:
            assert "default" in a.help, (name, flag, a.default)
    text = p.format_help()  # argparse fills %(default)s without error
    for flag, _ in flags:
        assert flag in text


def test_inspect_help_describes_every_flag(capsys):
    with pytest.raises(SystemExit) as e:
        main(["inspect", "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for flag, a in flags_of(parsers()["inspect"]):
        assert flag in out and " ".join(a.help.split())[:40] in out, flag


def test_simrun_alone_prints_usage_and_the_subcommands(capsys):
    assert main([]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("usage: simrun (--workload PATH|NAME")
    for name in SUBCOMMANDS:
        assert f"  simrun {name} " in out.err
    assert "example: simrun --workload" in out.err


def test_a_dask_scheduler_without_the_extra_names_the_extra(tmp_path, capsys, monkeypatch):
    import sim.cli.sweep as sweep_cli

    monkeypatch.setattr(sweep_cli, "dask_installed", lambda: False)
    rc = main(["sweep", "--model", "gpt2-medium", "--topo", "tiny-fattree-8", "--tp", "1",
               "--pp", "1,2", "--global-batch", "16", "--out", str(tmp_path / "s"),
               "--scheduler", "tcp://127.0.0.1:1", "--no-plot"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "--scheduler" in err[0] and "pip install 'simrun[dask]'" in err[0]
    assert not (tmp_path / "s").exists()  # refused before any work
    assert sweep_cli.DASK_MISSING in err[0]


def test_header_all_gpus_not_a_multiple_of_tp_pp_names_file_line_field(tmp_path, capsys):
    text = SEED_1024.read_text()
    assert "all_gpus: 1024 " in text.splitlines()[0]
    bad = tmp_path / "w.txt"
    bad.write_text(text.replace("all_gpus: 1024 ", "all_gpus: 1000 ", 1))
    assert main(["--workload", str(bad), "--topo", "dgx-a100-1024", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"simrun: error: {bad}:1: all_gpus: 1000 GPUs is not a multiple of TP·PP = "
                   "8·16 (--gpus overrides)"]
    # the same number from --gpus stays a usage error naming the flag
    assert main(["--workload", str(SEED_1024), "--topo", "dgx-a100-1024", "--gpus", "1000",
                 "--quiet"]) == 2
    assert "--gpus: 1000 GPUs (--gpus) is not a multiple" in capsys.readouterr().err

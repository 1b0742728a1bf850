"""Readers bounded in nesting as in size: a torchtitan TOML or a Hugging Face config.json
nested thousands deep is one exit-2 line naming the file, not Python's RecursionError
(sim/cli/jobs.py, sim/jobs/torchtitan.py, sim/models/vocab/hf_config.py)."""

from __future__ import annotations

import pytest

from sim.cli import main

DEEP = 50_000


@pytest.mark.parametrize("name, text, flag, field", [
    ("deep.toml", "a = " + "[" * DEEP + "]" * DEEP + "\n", "--job-config", "--job-config"),
    ("config.json", '{"architectures": ' + "[" * DEEP + "]" * DEEP + "}", "--model",
     "config.json"),
])
def test_deep_nesting_exits_2_naming_file(tmp_path, capsys, name, text, flag, field):
    f = tmp_path / name
    f.write_text(text)
    assert main([flag, str(f), "--topo", "tiny-2x2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"simrun: error: {f}: {field}: nested too deeply" + \
        (" to be a job config" if flag == "--job-config" else ""), err

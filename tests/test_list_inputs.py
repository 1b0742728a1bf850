"""`simrun list` says which file each flag of a run takes or writes: every flag whose --help
metavar is a path (PATH, FILE, DIR, PROFILE) has its line, and the lines name every format
its reader takes (sim/cli/listing.py INPUTS)."""

from __future__ import annotations

import re

from sim.cli import main


def _out(capsys, argv) -> str:
    try:
        rc = main(argv)
    except SystemExit as e:  # --help
        rc = e.code
    assert rc == 0
    return capsys.readouterr().out


def test_every_file_flag_of_help_is_in_simrun_list(capsys):
    helptext = _out(capsys, ["--help"])
    flags = set(re.findall(r"^  (--[a-z-]+) [A-Z|]*(?:PATH|FILE|DIR|PROFILE)", helptext, re.M))
    assert {"--workload", "--model", "--megatron-args", "--job-config", "--topo",
            "--kernel-table", "--calibration", "--json", "--trace", "--chakra", "--plot",
            "--breakdown-plot"} <= flags
    listed = _out(capsys, ["list"]).split("inputs (which flag takes which file):")[1]
    for flag in flags:
        assert re.search(rf"^  (.*, )?{flag}[ ,]", listed, re.M), flag
    lines = {ln.split()[0]: ln for ln in listed.splitlines() if ln.startswith("  --")}
    assert "Chakra .et" in lines["--workload"] and "config.json" in lines["--model"]
    assert "kineto" in lines["--trace"] and "HolisticTraceAnalysis" in lines["--trace"]

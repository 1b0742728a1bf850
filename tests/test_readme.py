"""The README's two newcomer commands: CI runs exactly the README's test command, and the
main command's arguments name shipped files and run."""

import re
import shlex

from conftest import ROOT

from sim.cli import main

README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```bash\n(.*?)\n```", README, re.S)


def test_ci_runs_the_readme_test_command():
    test_cmd = next(b for b in BLOCKS if "pytest" in b and "pip install -e" in b)
    install_and_test = test_cmd.split(". .venv/bin/activate && ", 1)[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert install_and_test in ci


def test_readme_main_command_runs_on_shipped_files(capsys):
    run_cmd = next(b for b in BLOCKS if "simrun --workload" in b)
    argv = shlex.split(run_cmd.split("simrun ", 1)[1])
    for flag in ("--workload", "--topo"):
        assert (ROOT / argv[argv.index(flag) + 1]).is_file()
    argv = [a if not a.endswith((".txt", ".yaml")) else str(ROOT / a) for a in argv]
    assert main(argv) == 0
    assert "iteration time" in capsys.readouterr().out

"""Every catchable signal whose default action ends a process (SIGUSR1/2, SIGQUIT, SIGALRM,
SIGVTALRM, SIGPROF, SIGXCPU — the CPU-time limit's warning — SIGXFSZ, besides SIGTERM and
SIGHUP) stops simrun the way Ctrl-C does: the temp file of an output being written is removed,
the target is left as it was, one line, exit 128 + the signal number (issue 31, class
"half-written files")."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from hostile_support import ROOT

# an output being written when the signal arrives: the writer sends it to its own process
WRITER = """
import os, signal, sys
from sim.files.outputs import atomic_write
from sim.runtime.process import Terminated, exit_status, terminate_as_interrupt
terminate_as_interrupt()
def write(f):
    f.write("half of it")
    f.flush()
    os.kill(os.getpid(), int(sys.argv[2]))
    f.write(" and the rest")
try:
    atomic_write(sys.argv[1], write, flag="--json")
except Terminated as exc:
    code, word = exit_status(exc)
    print(word)
    sys.exit(code)
print("written")
"""

SIGNALS = [s for s in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM",
                       "SIGVTALRM", "SIGPROF", "SIGXCPU", "SIGXFSZ") if hasattr(signal, s)]


@pytest.mark.parametrize("name", SIGNALS)
def test_a_signal_while_writing_leaves_no_temp_file_and_the_old_output(name, tmp_path):
    target = tmp_path / "report.json"
    target.write_text("the previous report\n")
    signum = int(getattr(signal, name))
    p = subprocess.run([sys.executable, "-c", WRITER, str(target), str(signum)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 128 + signum, p.stderr
    assert p.stdout.strip() == f"terminated ({name})"
    assert target.read_text() == "the previous report\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["report.json"]


def test_sigusr1_during_a_run_ends_it_with_one_line(tmp_path):
    """A real run: SIGUSR1 while it simulates gives exit 138 and ``simrun: terminated
    (SIGUSR1)``, nothing written."""
    p = subprocess.Popen(
        [sys.executable, "-m", "sim.cli", "--workload",
         str(ROOT / "workloads" / "aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt"), "--topo",
         "dgx-a100-1024", "--per-rank", "--json", str(tmp_path / "r.json")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        import time
        time.sleep(1.5)  # inside the run (imports take ~0.5 s, the per-rank run seconds)
        p.send_signal(signal.SIGUSR1)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    if p.returncode == 0:
        pytest.skip("the run finished before the signal (a very fast machine)")
    assert p.returncode == 128 + signal.SIGUSR1, err
    assert err.strip().splitlines()[-1] == "simrun: terminated (SIGUSR1)", err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_signal_while_an_error_is_reported_is_one_line(monkeypatch, capsys):
    """A signal that arrives while simrun formats an error (naming the flag imports every
    subcommand's parser: slow on a loaded machine) ends with one line, not a traceback (the
    campaign's ``sweep --scheduler`` case)."""
    import sim.cli as cli
    from sim.runtime.process import Terminated

    def slow_naming(err):
        raise Terminated(int(signal.SIGTERM))

    monkeypatch.setattr(cli, "cli_error", slow_naming)
    code = cli.main(["--workload", "no-such-workload-file", "--topo", "tiny-2x2"])
    assert code == 128 + signal.SIGTERM
    assert capsys.readouterr().err == "simrun: terminated (SIGTERM)\n"

"""Process hygiene (issue 13, classes 6 and 7): a sweep's workers (and the forkserver and
resource tracker they keep alive) end within 5 s of a ``kill -9`` of its main process; SIGINT
and SIGTERM stop a run with one line and no traceback, also while the interpreter shuts down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_support import ROOT

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

SWEEP = ["sweep", "--model", str(ROOT / "workloads" / "models" / "gpt3-175b.yaml"), "--topo",
         str(ROOT / "topologies" / "dgx-a100-1024.yaml"), "--gpus", "1024", "--tp", "8",
         "--pp", "2,4,8,16,32", "--vpp", "1,2,3", "--micro-batch", "1,2", "--global-batch",
         "512", "--workers", "2", "--no-progress", "--no-plot"]


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default disposition. A test runner started
    from a shell that ignores SIGINT (a background job of a non-interactive shell) passes the
    ignore on, and Python then installs no KeyboardInterrupt handler (the POSIX convention that
    simrun keeps); the tests below are about a user's Ctrl-C, which is never ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sim.cli", *args], cwd=ROOT,
                            start_new_session=True, stdin=subprocess.DEVNULL,
                            preexec_fn=_default_sigint,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _wait_until(cond, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _cleanup(p: subprocess.Popen) -> None:
    for pid in _group(p.pid):  # never leave anything behind, whatever the test found
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.communicate(timeout=30)


def test_kill_9_of_a_sweep_leaves_no_process_within_5_s(tmp_path):
    p = _start([*SWEEP, "--out", str(tmp_path / "s")])
    try:
        # main, resource tracker, forkserver and two workers
        assert _wait_until(lambda: len(_group(p.pid)) >= 5, 120), _group(p.pid)
        assert p.poll() is None
        os.kill(p.pid, signal.SIGKILL)
        t0 = time.monotonic()
        assert _wait_until(lambda: not _group(p.pid), 5), _group(p.pid)
        # nothing holds the caller's pipes any more: reading them ends at once
        out, err = p.communicate(timeout=5)
        assert time.monotonic() - t0 < 10
    finally:
        _cleanup(p)


@pytest.mark.parametrize("signum,code,word", [(signal.SIGINT, 130, "interrupted"),
                                              (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_signals_stop_a_sweep_with_one_line_and_no_traceback(signum, code, word, tmp_path):
    p = _start([*SWEEP, "--out", str(tmp_path / "s")])
    try:
        first = p.stderr.readline()  # the sweep has started: "sweep gpt3-175b on ..."
        assert first.startswith("sweep "), first
        os.killpg(p.pid, signum) if signum == signal.SIGINT else os.kill(p.pid, signum)
        out, err = p.communicate(timeout=60)
        assert p.returncode == code, err
        assert "Traceback" not in err and "Exception ignored" not in err, err
        assert err.strip().splitlines()[-1] == f"simrun: {word}"
        assert _wait_until(lambda: not _group(p.pid), 5), _group(p.pid)
        assert not list((tmp_path / "s").glob(".*.tmp"))  # no temp file left behind
    finally:
        _cleanup(p)


SHUTDOWN = """
import sys, threading, time
from sim.cli import main
threading.Thread(target=time.sleep, args=(3,)).start()  # keeps the interpreter shutting down
sys.argv = ["simrun", "--version"]
code = main()
print("main returned", flush=True)
sys.exit(code)
"""


def test_sigint_while_the_interpreter_shuts_down_exits_130_quietly():
    p = subprocess.Popen([sys.executable, "-c", SHUTDOWN], cwd=ROOT, stdin=subprocess.DEVNULL,
                         preexec_fn=_default_sigint,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("simrun"), line  # --version printed; now in threading._shutdown
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 130 and err == "", err
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=30)

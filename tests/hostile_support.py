"""Running simrun as a real, resource-limited process for the hostile-input tests.

:func:`run_bounded` starts ``python -m sim.cli ARGS`` with an address-space limit and a CPU-time
limit (so a regression fails the test instead of exhausting the machine), kills it after a
wall-clock timeout (so nothing hangs), and returns its exit code, output and the resources it
used, measured by the kernel for that one process (``os.wait4``).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GB = 1 << 30


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    cpu_s: float  # user + system CPU time of the process
    max_rss_bytes: int  # peak resident memory
    killed_after_timeout: bool

    def one_line(self, prefix: str = "simrun") -> str:
        """The single stderr line (asserts there is exactly one, starting with ``prefix``)."""
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(prefix), self.stderr[-2000:]
        return lines[0]


def run_bounded(*args: str, env: dict | None = None, cwd: Path = ROOT, timeout_s: float = 60,
                memory_bytes: int = 3 * GB, cpu_s: int = 60) -> Outcome:
    """Run ``simrun ARGS`` under ``RLIMIT_AS = memory_bytes`` and ``RLIMIT_CPU = cpu_s``,
    killed after ``timeout_s`` of wall time."""
    e = dict(os.environ)
    e.update(env or {})

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([sys.executable, "-m", "sim.cli", *args], cwd=cwd, env=e,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             preexec_fn=limits)  # noqa: PLW1509 - limits only, no threads here
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            p.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Outcome(p.returncode, out.read().decode("utf-8", "replace"),
                       err.read().decode("utf-8", "replace"), usage.ru_utime + usage.ru_stime,
                       usage.ru_maxrss * 1024, killed.is_set())

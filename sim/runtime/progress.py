"""A progress line on stderr for long commands (run, validate, sweep).

Shown only when stderr is a terminal, and only once the work has taken ``delay_s`` (2 s by
default), so quick runs, pipes, files and CI logs never see it. A background thread redraws one
line (``\\r`` … clear to end of line) twice a second with the phase, the count of done items when
there is one, and the elapsed wall time. Leaving the ``with`` block, normally or by an exception,
stops the thread and erases the line *before* anything else is printed, so an error message is
never drawn inside the progress line.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

CLEAR = "\r\x1b[K"
DELAY_S = 2.0  # wall seconds before a progress line or bar is first drawn


class Progress:
    """``with Progress("simulate") as p: ... p.phase("healthy baseline"); p.advance()``."""

    def __init__(self, what: str, *, total: int | None = None, delay_s: float | None = None,
                 interval_s: float = 0.5, stream: TextIO | None = None,
                 force: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = tty if force is None else force
        self.what = what
        self.total = total
        self.done = 0
        self.delay_s = DELAY_S if delay_s is None else delay_s
        self.interval_s = interval_s
        self._t0 = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._drawn = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._t0 = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, name="simrun-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def phase(self, what: str) -> None:
        """Name what is being done now."""
        self.what = what

    def advance(self, n: int = 1) -> None:
        """``n`` more items of ``total`` are done."""
        self.done += n

    def line(self) -> str:
        """The text of the progress line (without control characters)."""
        count = f" {self.done}/{self.total}" if self.total is not None else ""
        return f"simrun: {self.what}{count} … {time.monotonic() - self._t0:.0f} s"

    def close(self) -> None:
        """Stop redrawing and erase the line (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._drawn:
                self.stream.write(CLEAR)
                self.stream.flush()
                self._drawn = False

    def _loop(self) -> None:
        if self._stop.wait(self.delay_s):
            return
        while True:
            with self._lock:
                if self._stop.is_set():
                    return
                self.stream.write(CLEAR + self.line())
                self.stream.flush()
                self._drawn = True
            if self._stop.wait(self.interval_s):
                return

"""Signals: simrun ends quietly on SIGINT, SIGTERM, SIGHUP and every other catchable signal whose
default action ends the process (SIGQUIT, SIGUSR1/2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU — the
CPU-time limit's warning — and SIGXFSZ), whenever they arrive.

- While a command runs, these signals raise :class:`Terminated` (a ``KeyboardInterrupt``),
  so they stop it the way Ctrl-C does: temp files of outputs being written are removed
  (:func:`sim.files.outputs.atomic_write`), a sweep stops its workers and keeps its resume log, and
  the CLI prints one line (``simrun: terminated (SIGTERM)``) and exits with 128 + the signal
  number (130 for Ctrl-C, 143 for SIGTERM).
- After the command, while the interpreter shuts down (joining threads, flushing files), a
  signal would print ``Exception ignored in threading._shutdown … KeyboardInterrupt`` and exit
  0: :func:`quiet_shutdown` makes it flush the output and exit at once with 128 + the signal
  number instead.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

_STOP_SIGNALS = tuple(getattr(signal, name) for name in (
    # every catchable signal whose default action ends the process (POSIX signal(7)): without a
    # handler the process would die with an output's temp file left behind
    "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF",
    "SIGXCPU", "SIGXFSZ") if hasattr(signal, name))


class Terminated(KeyboardInterrupt):
    """A stop signal (SIGTERM, SIGHUP, ...), raised in the main thread like Ctrl-C's
    ``KeyboardInterrupt``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_status(exc: KeyboardInterrupt) -> tuple[int, str]:
    """Exit code (128 + signal number) and the word for an interrupt: ``interrupted`` (Ctrl-C)
    or ``terminated (SIGTERM)``."""
    signum = getattr(exc, "signum", signal.SIGINT)
    if signum == signal.SIGINT:
        return 128 + signum, "interrupted"
    return 128 + signum, f"terminated ({signal.Signals(signum).name})"


def _raise(signum: int, frame) -> None:  # noqa: ARG001 - signal handler signature
    raise Terminated(signum)


def terminate_as_interrupt() -> Callable[[], None]:
    """Make the stop signals raise :class:`Terminated`; returns a function that restores the
    previous handlers. Does nothing outside the main thread."""
    previous = {}
    for signum in _STOP_SIGNALS:
        try:
            previous[signum] = signal.signal(signum, _raise)
        except ValueError:  # not the main thread
            break

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def _exit_now(signum: int, frame) -> None:  # noqa: ARG001 - signal handler signature
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(128 + signum)


def quiet_shutdown() -> None:
    """From now on (the command has finished), SIGINT and the stop signals flush the output and
    exit at once with 128 + the signal number, without a traceback."""
    for signum in (signal.SIGINT, *_STOP_SIGNALS):
        try:
            signal.signal(signum, _exit_now)
        except ValueError:  # not the main thread
            return

"""The project's error types.

Every problem with user input is an :class:`InputError` whose one-line message names the file,
the line (when there is one) and the field. The CLI turns it into exit code 2.
"""

from __future__ import annotations


class SimrunError(Exception):
    """Base class of errors simrun reports to the user without a traceback."""

    exit_code = 1


class InputError(SimrunError):
    """Bad input: a file, a field or a command-line value.

    ``str(err)`` is ``"<file>:<line>: <field>: <message>"`` (parts omitted when unknown).
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.message = message
        super().__init__(self.format())

    def format(self) -> str:
        where = ""
        if self.file is not None:
            where = str(self.file)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        text = " ".join(_shorten(w) for w in f"{field}{self.message}".split())
        return " ".join(where.split()) + (" " if where else "") + text  # always one line


def _shorten(word: str, limit: int = 80) -> str:
    """A word of a message, cut to ``limit`` characters (a 5000-digit field stays readable)."""
    if len(word) <= limit:
        return word
    return f"{word[: limit - 20]}…[{len(word)} chars]"


class UsageError(InputError):
    """A bad command-line value or combination of flags (exit code 2)."""


class SimulationStalled(SimrunError):
    """The event loop ended with ranks still waiting (unmatched collective or send/recv)."""

    exit_code = 1


class WatchdogExpired(UsageError, SimulationStalled):
    """The simulated clock reached ``--max-sim-time-s`` with the iteration unfinished (exit 2:
    the input's times are implausible or the limit is too low)."""

"""The parser class and argument types shared by every ``simrun`` subcommand."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from sim.errors import UsageError
from sim.limits import MAX_SAMPLES, MAX_SIM_TIME_S, SCALE_RANGE, parse_float, parse_int


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` (one line, exit 2) instead of printing usage."""

    def error(self, message: str):  # type: ignore[override]
        # a flag with aliases is named by its first name, as before it had aliases
        message = re.sub(r"^argument (-[\w-]+)(?:/-[\w-]+)+:", r"argument \1:", message)
        raise UsageError(message + self._suggestion(message))

    def _suggestion(self, message: str) -> str:
        """``(did you mean --x?)`` for the first unrecognized flag with a close known name."""
        if not message.startswith("unrecognized arguments:"):
            return ""
        known = [o for o in self._option_string_actions if o.startswith("--")]  # noqa: SLF001
        for word in message.split(":", 1)[1].split():
            if word.startswith("--"):
                import difflib  # only for a mistyped flag

                close = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.6)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


def _number(cast: Callable[[str], float], ok: Callable[[float], bool], what: str):
    """An argparse type: ``cast`` the text, require ``ok(value)``, else say ``what`` it must be."""

    def parse(text: str):
        try:
            v = cast(text)
        except ValueError:
            v = None
        if v is None or not ok(v):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    return parse


positive_int = _number(parse_int, lambda v: v >= 1, "a positive integer")
nonneg_int = _number(parse_int, lambda v: v >= 0, "an integer ≥ 0")
positive_float = _number(parse_float, lambda v: v > 0, "a positive number")
fraction = _number(parse_float, lambda v: 0 < v <= 1, "a fraction in (0, 1]")
nonneg_float = _number(parse_float, lambda v: 0 <= v <= 10, "a number in [0, 10]")
at_least_one = _number(parse_float, lambda v: 1 <= v < 1e6, "a number ≥ 1")
scale_factor = _number(parse_float, lambda v: SCALE_RANGE[0] <= v <= SCALE_RANGE[1],
                       f"a factor from {SCALE_RANGE[0]:g} to {SCALE_RANGE[1]:g}")
sample_count = _number(parse_int, lambda v: 1 <= v <= MAX_SAMPLES,
                       f"an integer from 1 to {MAX_SAMPLES}")
slowdown = _number(parse_float, lambda v: 1 <= v <= 3, "a factor from 1 to 3")


def sim_time_s(text: str) -> float:
    """argparse type of ``--max-sim-time-s``: a positive number of seconds ≤
    :data:`~sim.limits.MAX_SIM_TIME_S` (the int64 nanosecond clock; ``1e300`` overflowed)."""
    value = parse_float(text)
    if value is None or not 0 < value <= MAX_SIM_TIME_S:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds ≤ "
                                         f"{MAX_SIM_TIME_S:.4g}, got {text!r}")
    return value


class _Absent(list):
    """Default of every option while finding which were given (:func:`given_flags`)."""


def given_flags(probe: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The flags (first long option string of each) present in ``argv``, even when given their
    default value. ``probe``: a fresh parser of the run, spent by this call."""
    # the "not given" marker: not a string (argparse converts string defaults with the flag's
    # type) and a list (append actions copy their default and append to the copy)
    absent = _Absent()
    names = {a.dest: next((o for o in a.option_strings if o.startswith("--")), a.dest)
             for a in probe._actions}  # noqa: SLF001 - argparse has no public list of actions
    probe.set_defaults(**dict.fromkeys(names, absent))
    return {names[k] for k, v in vars(probe.parse_args(argv)).items() if v is not absent}

"""The progress line (sim/progress.py): only on a terminal, only after the delay, erased before
anything else is printed (also when the work fails)."""

from __future__ import annotations

import io
import time

import pytest

from sim.progress import CLEAR, Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nothing_on_a_pipe_or_file():
    out = io.StringIO()
    with Progress("simulating", delay_s=0.0, interval_s=0.01, stream=out):
        time.sleep(0.05)
    assert out.getvalue() == ""


def test_nothing_before_the_delay():
    out = Tty()
    with Progress("simulating", delay_s=5.0, stream=out):
        time.sleep(0.05)
    assert out.getvalue() == ""


def test_drawn_on_a_terminal_after_the_delay_and_erased_at_the_end():
    out = Tty()
    with Progress("validate: cases done", total=8, delay_s=0.02, interval_s=0.01,
                  stream=out) as p:
        p.advance(3)
        time.sleep(0.1)
    text = out.getvalue()
    assert text.startswith(CLEAR + "simrun: validate: cases done 3/8 … ")
    assert text.endswith(CLEAR) and "\n" not in text


def test_an_error_leaves_a_clean_line_for_its_message():
    out = Tty()
    with pytest.raises(RuntimeError), Progress("simulating", delay_s=0.0, interval_s=0.01,
                                               stream=out):
        time.sleep(0.05)
        raise RuntimeError("boom")
    assert out.getvalue().endswith(CLEAR)  # the line is erased before the error is printed

"""The progress line (sim/runtime/progress.py): only on a terminal, only after the delay, erased
before anything else is printed (also when the work fails)."""

from __future__ import annotations

import io
import re
import sys
import time

import pytest
from conftest import SEED_1024, TOPOLOGIES, WORKLOADS

from sim.cli import main
from sim.runtime import progress
from sim.runtime.progress import CLEAR, Progress


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


@pytest.fixture
def terminal(monkeypatch):
    """A function that makes stderr a terminal (call it in the test body: pytest's capture
    resets sys.stderr after the fixtures), with no delay before the progress line."""
    monkeypatch.setattr(progress, "DELAY_S", 0.0)

    def make() -> Tty:
        err = Tty()
        monkeypatch.setattr(sys, "stderr", err)
        return err

    return make


def test_a_run_draws_its_line_on_a_terminal_and_erases_it(terminal, capsys):
    err = terminal()
    assert main(["--workload", str(SEED_1024), "--topo",
                 str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--quiet"]) == 0
    text = err.getvalue()
    assert text.startswith(CLEAR + "simrun: simulating 1024 GPUs … ")
    assert text.endswith(CLEAR) and "\n" not in text
    assert capsys.readouterr().out == ""  # nothing of it on stdout


def test_a_run_on_a_pipe_shows_no_progress(monkeypatch, capsys):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    assert main(["--workload", str(SEED_1024), "--topo",
                 str(TOPOLOGIES / "dgx-a100-1024.yaml"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_unreachable_dask_scheduler_error_is_not_drawn_inside_a_bar(terminal, tmp_path):
    err = terminal()
    assert main(["sweep", "--model", str(WORKLOADS / "models" / "gpt2-medium.yaml"), "--topo",
                 str(TOPOLOGIES / "tiny-fattree-8.yaml"), "--gpus", "8", "--tp", "1,2", "--pp",
                 "1", "--global-batch", "8", "--out", str(tmp_path / "sweep"),
                 "--scheduler", "tcp://127.0.0.1:9", "--scheduler-timeout", "1"]) == 2
    text = err.getvalue()
    # the early feasibility pass runs on the cluster, so the connection fails before any bar
    # is drawn; the error starts a line of its own, after the sweep's header line
    head, error = text.rstrip("\n").rsplit("\n", 1)
    assert head.startswith("sweep gpt2-medium on 8 GPUs of tiny-fattree-8")
    assert error.startswith("simrun: error: --scheduler: cannot connect to the Dask scheduler")
    assert "sweep:" not in text and "\r" not in error


def test_validate_counts_the_cases_done(terminal, monkeypatch):
    import sim.validation.cases

    def slow_case(case, tolerance=None):
        time.sleep(1.0)  # twice the redraw interval (0.5 s)
        return {"case": case}

    monkeypatch.setattr(sim.validation.cases, "run_case", slow_case)
    err = terminal()
    cases = sim.validation.cases.run_cases(["a", "b", "c"], workers=1)
    assert cases == [{"case": c} for c in "abc"]
    text = err.getvalue()
    assert CLEAR + "simrun: validate: cases done 0/3 … " in text
    assert re.search(re.escape(CLEAR) + r"simrun: validate: cases done [12]/3 … ", text)
    assert text.endswith(CLEAR) and "\n" not in text

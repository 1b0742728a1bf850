"""A sweep worker does not try the periodic shortcut again for a schedule whose short runs did
not step evenly (sim/sweep/evaluate.py ``_APERIODIC``): the later layouts of that schedule are
simulated in full at once, with the same rows as when the shortcut is tried."""

from __future__ import annotations

import importlib
from dataclasses import replace

from conftest import TOPOLOGIES, WORKLOADS

import sim.scenario.periodic_run as periodic_run
from sim.models import load_model
from sim.sweep import SweepContext, Training
from sim.sweep import SweepPoint as Layout
from sim.sweep.evaluate import evaluate
from sim.topology import load_topology

MODEL = load_model(str(WORKLOADS / "models" / "gpt2-medium.yaml"))
TOPO = load_topology(str(TOPOLOGIES / "tiny-fattree-8.yaml"))
evaluate_mod = importlib.import_module("sim.sweep.evaluate")  # the module, not the function


def _same(a, b):
    return {k: v for k, v in a.items() if k != "elapsed_s"} == {
        k: v for k, v in b.items() if k != "elapsed_s"}


def test_a_schedule_whose_shortcut_failed_is_simulated_in_full_at_once(monkeypatch):
    tried = []
    real = periodic_run.simulate_periodic

    def spy(prepared, simulate):  # the short runs are tried where counts_for says so
        if periodic_run.counts_for(prepared) is not None:
            tried.append(prepared.program.schedule)
        return real(prepared, simulate)

    monkeypatch.setattr(periodic_run, "simulate_periodic", spy)
    monkeypatch.setattr(evaluate_mod, "_APERIODIC", set())
    # GPipe with full recomputation: 48 microbatches, its short runs do not step evenly
    # (tests/test_sweep_periodic.py): tried once, the full run simulated
    ctx = SweepContext(MODEL, TOPO, Training(global_batch=96, recompute="full"))
    gpipe, onef = Layout(2, 2, 2, schedule="gpipe"), Layout(2, 2, 2)
    first = evaluate(ctx, gpipe)
    assert tried == ["gpipe"] and evaluate_mod._APERIODIC == {"gpipe"}  # noqa: SLF001
    again = evaluate(ctx, gpipe)  # not tried again: the full run at once, the same row
    assert tried == ["gpipe"]
    full = evaluate(replace(ctx, periodic=False), gpipe)
    assert first["status"] == "ok" and _same(first, again) and _same(first, full)
    # another schedule is still tried (1F1B: its shortcut is taken)
    row = evaluate(ctx, onef)
    assert tried == ["gpipe", "1f1b"] and evaluate_mod._APERIODIC == {"gpipe"}  # noqa: SLF001
    assert _same(row, evaluate(replace(ctx, periodic=False), onef))


def test_the_workers_of_a_sweep_share_the_schedules_whose_shortcut_failed(monkeypatch):
    """A local worker that finds a schedule's shortcut failing sets its flag in an array the
    sweep's workers share (sim/sweep/runner.py ``worker_pool``): another process sees it, and
    a worker holding the flags (not having tried the schedule itself) simulates in full at
    once."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    from sim.pipeline.registry import SCHEDULES
    from sim.sweep import runner

    mp = runner._mp_context()  # noqa: SLF001 - the start method the sweep's pool uses
    flags = evaluate_mod.aperiodic_flags(mp)
    assert list(flags) == [0] * len(SCHEDULES)
    with ProcessPoolExecutor(1, mp_context=mp, initializer=runner._worker_init,  # noqa: SLF001
                             initargs=(os.getpid(), None, flags)) as pool:
        pool.submit(evaluate_mod._mark_aperiodic, "gpipe").result()  # noqa: SLF001
    assert [n for n, f in zip(SCHEDULES, flags, strict=True) if f] == ["gpipe"]
    # this process as another worker of the sweep: its own set is empty
    monkeypatch.setattr(evaluate_mod, "_APERIODIC", set())
    monkeypatch.setattr(evaluate_mod, "_SHARED_FLAGS", [flags])
    tried = []
    real = periodic_run.simulate_periodic

    def spy(prepared, simulate):
        if periodic_run.counts_for(prepared) is not None:
            tried.append(prepared.program.schedule)
        return real(prepared, simulate)

    monkeypatch.setattr(periodic_run, "simulate_periodic", spy)
    ctx = SweepContext(MODEL, TOPO, Training(global_batch=96, recompute="full"))
    row = evaluate(ctx, Layout(2, 2, 2, schedule="gpipe"))
    assert tried == [] and evaluate_mod._APERIODIC == {"gpipe"}  # noqa: SLF001
    assert _same(row, evaluate(replace(ctx, periodic=False), Layout(2, 2, 2, schedule="gpipe")))
    evaluate(ctx, Layout(2, 2, 2))  # 1F1B: not flagged, still tried
    assert tried == ["1f1b"]

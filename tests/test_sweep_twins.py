"""Layouts that differ only in a swept training option whose programs are the same work
(``--recompute none`` and ``selective`` with a fused attention kernel: Megatron-Core's
selective recomputation recomputes only the core attention, which the fused kernel never
stores) are simulated once in a sweep (:func:`sim.sweep.evaluate.evaluate_twins`): each row
must equal the one its own simulation gives, and a layout whose program differs (full
recomputation) must still be simulated."""

from __future__ import annotations

import importlib
from dataclasses import replace

from conftest import TOPOLOGIES, WORKLOADS

from sim.models import load_model
from sim.scenario import steps
from sim.sweep import SweepContext, SweepPoint, Training
from sim.sweep.best import twin_groups
from sim.topology import load_topology

ev = importlib.import_module("sim.sweep.evaluate")  # the package exports evaluate()
MODEL = load_model(str(WORKLOADS / "models" / "gpt2-medium.yaml"))
TOPO = load_topology(str(TOPOLOGIES / "tiny-nvlink-4.yaml"))
LABELS = [(("recompute", r),) for r in ("none", "selective", "full")]


def _ctx(global_batch: int = 8, **kw) -> SweepContext:
    base = Training(global_batch=global_batch, sequence_parallel=True)
    variants = tuple((lab, replace(base, recompute=lab[0][1])) for lab in LABELS)
    return SweepContext(MODEL, TOPO, base, variants=variants, **kw)


def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = steps.run

    def run(prepared, **kw):
        calls.append(prepared.program.microbatches)
        return real(prepared, **kw)

    monkeypatch.setattr(ev.steps, "run", run)
    return calls


def _strip(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "elapsed_s"}


def test_twins_simulated_once_rows_equal_their_own_simulation(monkeypatch):
    lays = [SweepPoint(2, 2, 1, 1, 1, variant=lab) for lab in LABELS]
    heads, twins = twin_groups(lays)
    assert heads == [lays[0]] and twins == ((lays[0].key, tuple(lays[1:])),)
    ctx = _ctx(twins=twins)
    alone = [_strip(ev.evaluate(ctx, lay)) for lay in lays]
    assert [r["status"] for r in alone] == ["ok"] * 3
    # none and selective: same time and events; full recomputation: slower
    assert alone[0]["iteration_time_s"] == alone[1]["iteration_time_s"]
    assert alone[2]["iteration_time_s"] > alone[0]["iteration_time_s"]
    calls = _counting(monkeypatch)
    grouped = [_strip(r) for r in ev.evaluate_twins(ctx, lays[0])]
    assert grouped == alone  # every field, memory included, each layout's own
    assert len(calls) == 2  # none simulated, selective reused, full simulated


def test_twin_groups_best_first_need_equal_bounds():
    lays = [SweepPoint(2, 2, 1, 1, 1, variant=lab) for lab in LABELS]
    fits = {lays[0].key: {"bound_ns": 10}, lays[1].key: {"bound_ns": 10},
            lays[2].key: {"bound_ns": 12}}
    heads, twins = twin_groups(lays, fits)
    assert heads == [lays[0], lays[2]] and twins == ((lays[0].key, (lays[1],)),)


def test_no_reuse_with_faults(monkeypatch):
    """A topology with faults runs its healthy comparison too: never reused."""
    from sim.faults import Faults

    topo = replace(TOPO, faults=Faults(slow_gpus={0: 1.5}))
    lays = [SweepPoint(2, 2, 1, 1, 1, variant=lab) for lab in LABELS[:2]]
    ctx = replace(_ctx(twins=((lays[0].key, (lays[1],)),)), topology=topo)
    calls = _counting(monkeypatch)
    rows = ev.evaluate_twins(ctx, lays[0])
    assert [r["status"] for r in rows] == ["ok", "ok"] and len(calls) == 2


def test_twin_of_a_layout_whose_shortcut_failed_reuses_its_full_run(monkeypatch):
    """The first twin tries the periodic shortcut; where its short runs do not step evenly
    (here: made to fail) the schedule joins ``_APERIODIC`` and the full run is simulated.
    Its twin, evaluated with the shortcut off, reuses that full run: one full simulation
    for both, each row equal to its own full simulation."""
    import sim.scenario.periodic_run as periodic_run

    lays = [SweepPoint(2, 2, 1, 1, 1, variant=lab) for lab in LABELS[:2]]
    ctx = _ctx(48, twins=((lays[0].key, (lays[1],)),))  # 48 microbatches: short runs apply
    full = [_strip(ev.evaluate(replace(ctx, periodic=False), lay)) for lay in lays]
    monkeypatch.setattr(ev, "_APERIODIC", set())
    monkeypatch.setattr(periodic_run, "simulate_periodic", lambda prepared, simulate: None)
    calls = _counting(monkeypatch)
    rows = [_strip(r) for r in ev.evaluate_twins(ctx, lays[0])]
    assert ev._APERIODIC == {"1f1b"}  # noqa: SLF001 - the first tried the shortcut
    assert rows == full and [r["status"] for r in rows] == ["ok", "ok"]
    assert calls == [lays[0].config(ctx.training).microbatches]  # one simulation for both

"""The periodic shortcut of sweep tasks (sim/scenario/periodic_run.py, as every model run): rows
equal to the full simulation's, to the ns and the event, on several schedules; and the cases
where it is not taken.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import TOPOLOGIES, WORKLOADS

import sim.engine.periodic as periodic
import sim.scenario.periodic_run as periodic_run
from sim.models import load_model
from sim.sweep import SweepContext, Training
from sim.sweep import SweepPoint as Layout
from sim.sweep.evaluate import evaluate
from sim.topology import load_topology

MODEL = load_model(str(WORKLOADS / "models" / "gpt2-medium.yaml"))
TOPO = load_topology(str(TOPOLOGIES / "tiny-fattree-8.yaml"))

CASES = [  # (layout, global batch): M = 48 (PP 2) or 96 (PP 4) microbatches
    (Layout(1, 2, 4), 192),  # 1F1B
    (Layout(1, 2, 4, vpp=2), 192),  # interleaved
    (Layout(2, 4, 1, schedule="zb-h1"), 96),  # zero bubble, split backward
    (Layout(1, 4, 2, vpp=2, schedule="zb-v"), 192),  # V placement
    (Layout(1, 2, 4, vpp=2, schedule="dualpipe"), 256),  # bidirectional, k = 2·PP
    # all forwards, then all backwards (M microbatches of activations: full recomputation):
    # its counts do not step equally (the check refuses it: the full run, same row)
    (Layout(2, 2, 2, schedule="gpipe"), 96),
]


def _spy(monkeypatch):
    """Record the microbatch counts of every extrapolation and whether it was taken."""
    seen = []
    real = periodic_run.extrapolate

    def spy(results, n, full=False):
        out = real(results, n, full)
        seen.append(([r.program.microbatches for r in results], n, out is not None))
        return out

    monkeypatch.setattr(periodic_run, "extrapolate", spy)
    return seen


@pytest.mark.parametrize(("lay", "gb"), CASES, ids=lambda x: getattr(x, "key", str(x)))
def test_periodic_rows_equal_the_full_simulation(lay, gb, monkeypatch):
    seen = _spy(monkeypatch)
    rec = "full" if lay.schedule == "gpipe" else "none"
    ctx = SweepContext(MODEL, TOPO, Training(global_batch=gb, recompute=rec))
    short = evaluate(ctx, lay)
    full = evaluate(replace(ctx, periodic=False), lay)
    assert short["status"] == "ok", short.get("reason")
    m = short["microbatches"]
    k = 2 * lay.pp if lay.schedule == "dualpipe" else lay.pp
    m0 = next(c for c in range(m % k, m, k) if c >= 2 * lay.pp)
    # three short runs M0, M0 + k, M0 + 2k, extrapolated n periods; where they do not step
    # evenly, the window one period later (GPipe: refused by both)
    taken = lay.schedule != "gpipe"
    windows = [([m0, m0 + k, m0 + 2 * k], (m - m0) // k, taken)]
    if seen != windows:
        m1 = m0 + k
        windows = [([m0, m0 + k, m0 + 2 * k], (m - m0) // k, False),
                   ([m1, m1 + k, m1 + 2 * k], (m - m1) // k, taken)]
    assert seen == windows
    for key in set(short) | set(full):
        if key != "elapsed_s":
            assert short.get(key) == full.get(key), key  # exact: ns, events, floats


def test_extrapolation_refuses_unequal_steps():
    ctx = SweepContext(MODEL, TOPO, Training(global_batch=192))
    lay = Layout(1, 2, 4)
    par = lay.config(ctx.training)
    from sim.scenario import steps
    from sim.scenario.model_run import fit_model, model_run_of

    def run(m):
        p = lay.config(replace(ctx.training, global_batch=m * 4))
        r = model_run_of(fit_model(MODEL, p, TOPO), TOPO)
        return steps.run(steps.prepare(r.program, TOPO, model_run=r)).result

    a, b, c = run(6), run(8), run(10)
    assert periodic.extrapolate([a, b, c], 1) is not None
    # 6, 8, 12 microbatches: unequal steps (2 then 4 microbatches): not periodic in k = 2
    assert periodic.extrapolate([a, b, run(12)], 1) is None
    assert par.microbatches == 48


def test_shortcut_not_taken_where_it_is_not_established(monkeypatch):
    seen = _spy(monkeypatch)
    # too few microbatches for three short runs to pay: M = 16 at PP 2
    ctx = SweepContext(MODEL, TOPO, Training(global_batch=64))
    assert evaluate(ctx, Layout(1, 2, 4))["status"] == "ok"
    # the microbatch count changes what a microbatch does (Megatron-Core's wgrad deferral)
    ctx = SweepContext(MODEL, TOPO, Training(global_batch=192, wgrad_deferral_limit=4,
                                             defer_embedding_wgrad_compute=True))
    assert evaluate(ctx, Layout(1, 2, 4))["status"] == "ok"
    assert seen == []
    assert periodic.short_counts(48, 2, 2) == (4, 6, 8, 10)
    assert periodic.short_counts(16, 2, 2) is None
    assert periodic.short_counts(128, 4, 4) == (8, 12, 16, 20)

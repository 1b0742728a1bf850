"""The sweep's early pass made cheaper without changing a row (sim/sweep/groups.py,
sim/sweep/fast_bound.py, sim/sweep/passes.py, the generator's shared phases): each fast path
against the direct computation, equal to the integer and the byte, not within a tolerance.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from conftest import TOPOLOGIES, WORKLOADS

from sim.engine.segments import BACKWARD, phases
from sim.models import load_model
from sim.models.generator import generate
from sim.models.plan import build_model_plan
from sim.program.workload import PhaseKind
from sim.scenario.model_run import fit_model, model_run_of
from sim.sweep import SweepContext, SweepPoint, Training
from sim.sweep.best import early_pass, memory_pass, prepass
from sim.sweep.bound import replay
from sim.sweep.comm_bound import comm_bound, group_sizes
from sim.sweep.fast_bound import fast_replay
from sim.sweep.groups import shape_groups, shape_of, work_of
from sim.sweep.passes import Passes
from sim.topology import load_topology

MODEL = load_model(str(WORKLOADS / "models" / "gpt2-medium.yaml"))
TOPO = load_topology(str(TOPOLOGIES / "tiny-fattree-8.yaml"))
H100 = load_topology(str(TOPOLOGIES / "dgx-h100-scalable.yaml"), nodes=1)

CASES = [  # (layout, global batch, training options): every schedule, the options that
    # change the ops a pass runs (deferred output-layer wgrad, delayed gradient syncs)
    (SweepPoint(1, 2, 4), 64, {}),
    (SweepPoint(1, 4, 2), 64, {"defer_embedding_wgrad_compute": True}),
    (SweepPoint(1, 2, 4, vpp=2), 64, {"distributed_optimizer": True,
                                      "overlap_grad_reduce": True}),
    (SweepPoint(1, 4, 2, vpp=3), 48, {"defer_embedding_wgrad_compute": True}),
    (SweepPoint(2, 4, 1, schedule="zb-h1"), 32, {}),
    (SweepPoint(2, 2, 2, schedule="zb-h2"), 32, {}),
    (SweepPoint(1, 4, 2, vpp=2, schedule="zb-v"), 64, {}),
    (SweepPoint(1, 2, 4, vpp=2, schedule="dualpipe"), 64, {}),
    (SweepPoint(2, 2, 2, schedule="gpipe"), 32, {"recompute": "full"}),
    (SweepPoint(2, 2, 2), 32, {"sequence_parallel": True, "tp_comm_overlap": True}),
]


def _run(lay, gb, opts):
    par = lay.config(Training(global_batch=gb, **opts))
    return model_run_of(fit_model(MODEL, par, TOPO), TOPO)


@pytest.mark.parametrize(("lay", "gb", "opts"), CASES, ids=lambda x: getattr(x, "key", None))
def test_fast_replay_equals_replay(lay, gb, opts):
    """The compiled replay (another op order, the same recursion) gives replay's end and
    per-stage work, with and without the collectives' bounds."""
    prog = _run(lay, gb, opts).program
    cb = comm_bound(TOPO, group_sizes(prog))
    assert cb is not None
    for comm_ns in (None, cb):
        assert fast_replay(prog, comm_ns) == replay(prog, comm_ns)


def test_fast_replay_reads_the_deferred_pass_and_the_syncs():
    """The cases above include a deferred output-layer wgrad and delayed gradient syncs (else
    the comparison would not reach those branches)."""
    progs = [_run(*c).program for c in CASES]
    assert any(st.deferred is not None for p in progs for st in p.stages)
    assert any(st.grad_syncs for p in progs for st in p.stages)


def _walk_ns(stage, chunk, kind, edge, comm, comm_ns):
    """A pass's time as the bound defined it: one walk over its phases per (edge, comm)."""
    passes = {"W": (PhaseKind.WEIGHT_GRAD,), "I": (PhaseKind.INPUT_GRAD,)}
    layers = stage.pass_layers(chunk, kind)
    got = 0
    for _, _, ph in phases(layers, kind == "F", passes.get(kind, BACKWARD)):
        got += ph.compute_ns
        c = ph.comm
        if comm and comm_ns is not None and c is not None and c.blocking \
                and not (c.overlap or c.prefetch) and c.size_bytes > 0:
            got += comm_ns(c)
    if kind == "F" and edge:
        got += sum(lay.first_forward_ns for lay in layers)
    return got


@pytest.mark.parametrize(("lay", "gb", "opts"), CASES[:4] + CASES[-1:],
                         ids=lambda x: getattr(x, "key", None))
def test_pass_sums_equal_the_walk(lay, gb, opts):
    prog = _run(lay, gb, opts).program
    cb = comm_bound(TOPO, group_sizes(prog))
    for st in prog.stages:
        p = Passes(st, cb)
        for chunk in range(len(st.chunks)):
            for kind in ("F", "B", "I", "W", "Bd"):
                for edge in (False, True):
                    for comm in (False, True):
                        assert p.ns(chunk, kind, edge, comm) == _walk_ns(st, chunk, kind,
                                                                         edge, comm, cb)


def _unshared(plan):
    """``plan`` with every row a copy of its own: no two rows share an operator tuple or a
    communication, so no layer reuses another's phase or timing."""
    plan = copy.copy(plan)
    plan.stages = [replace(st, chunks=[[copy.deepcopy(r) for r in rows] for rows in st.chunks])
                   for st in plan.stages]
    return plan


@pytest.mark.parametrize(("lay", "gb", "opts"), [CASES[0], CASES[2], CASES[4], CASES[-1],
                                                 (SweepPoint(2, 2, 2), 32,
                                                  {"dtype": "fp8", "sequence_parallel": True})],
                         ids=lambda x: getattr(x, "key", None))
def test_generated_program_equals_one_without_shared_rows(lay, gb, opts):
    """The generator times a layer whose operator tuples an earlier layer had by that layer's
    answers (the phase, the kernel launches) and still tallies every op in order: the same
    program, assumption lines and compute sources as from rows that share nothing."""
    par = lay.config(Training(global_batch=gb, **opts))
    gpu = H100.gpu  # a GPU with a kernel table: table and roofline tallies
    plan = build_model_plan(MODEL, par)
    shared = generate(MODEL, par, gpu, plan=plan)
    alone = generate(MODEL, par, gpu, plan=_unshared(plan))
    assert shared == alone
    assert shared.assumptions == alone.assumptions
    assert shared.compute_sources == alone.compute_sources
    layers = [lay for lay in shared.stages[0].chunks[0] if lay.name.startswith("layer")]
    firsts = {}
    for x in layers:  # the fast path is taken: equal rows of two layers share their phase
        firsts.setdefault(x.name.split("_", 1)[1], []).append(x.forward)
    assert any(len(v) > 1 and v[0] is v[1] for v in firsts.values())


def _ctx():
    variants = tuple(((("recompute", r),), Training(global_batch=64, recompute=r))
                     for r in ("none", "selective", "full"))
    return SweepContext(MODEL, TOPO, Training(global_batch=64), variants=variants)


LAYOUTS = [replace(p, variant=(("recompute", r),))
           for p in (SweepPoint(1, 2, 4), SweepPoint(1, 2, 4, micro_batch=2),
                     SweepPoint(2, 2, 2), SweepPoint(1, 2, 4, vpp=2),
                     SweepPoint(2, 4, 1, schedule="zb-h1"), SweepPoint(1, 8, 1),
                     SweepPoint(1, 4, 2, vpp=2, schedule="zb-v"))
           for r in ("none", "selective", "full")]


def _same(a, b):
    return {k: v for k, v in a.items() if k != "elapsed_s"} == {
        k: v for k, v in b.items() if k != "elapsed_s"}


def test_grouped_early_pass_equals_each_layout_alone():
    """One task per pipeline shape (and the bound of an equal program computed once in it):
    every row equals the layout's prepass (or memory pass) run on its own."""
    ctx = _ctx()
    for bounds, alone in ((True, prepass), (False, memory_pass)):
        rows = early_pass(ctx, LAYOUTS, bounds, workers=1)
        assert set(rows) == {lay.key for lay in LAYOUTS}
        for lay in LAYOUTS:
            assert _same(rows[lay.key], alone(ctx, lay)), lay.key
    assert sum(r["status"] == "fits" for r in rows.values()) > len(LAYOUTS) // 2


def test_shape_groups_partition_the_layouts_by_shape_largest_first():
    ctx = _ctx()
    heads, groups = shape_groups(ctx, LAYOUTS)
    tasks = [(h, *dict(groups).get(h.key, ())) for h in heads]
    assert sorted(lay.key for t in tasks for lay in t) == sorted(lay.key for lay in LAYOUTS)
    for t in tasks:
        assert len({shape_of(ctx, lay) for lay in t}) == 1
        assert [lay.key for lay in t] == sorted(lay.key for lay in t)  # twins together
    weights = [work_of(shape_of(ctx, t[0])) * len(t) for t in tasks]
    assert weights == sorted(weights, reverse=True)
    # the shape: schedule, PP, microbatches (global batch / (DP · micro batch)), VPP, ...
    assert shape_of(ctx, LAYOUTS[0])[:4] == ("1f1b", 2, 16, 1)
    assert shape_of(ctx, LAYOUTS[3])[:4] == ("1f1b", 2, 8, 1)

"""The early feasibility pass's tasks (:func:`sim.sweep.best.early_pass`): the layouts that
share a pipeline shape in one task.

A layout's memory check and lower bound read its schedule's op order
(:func:`~sim.pipeline.schedules.schedule_tuples`, its live activation vectors
:func:`~sim.models.memory.inflight_activation_bytes`, the bound's op plan
:func:`~sim.sweep.bound.plan`), which depend only on the schedule, the pipeline size, the
microbatches, the chunks per stage, the interleaved group size and the combined 1F1B: its
*shape* (:func:`shape_of`). Each is cached in the worker that computes it, so the layouts of
one shape are sent as one task (one worker computes the shape's tables once, not every worker
that gets one of its layouts), the largest tasks first so that no worker is left with a long
one at the end. Only the order and the grouping of the work change: every row is computed by
the same functions from the same inputs (``tests/test_sweep_groups.py``).
"""

from __future__ import annotations

from sim.sweep.evaluate import SweepContext
from sim.sweep.space import SweepPoint

FIXED_WORK = 2000
"""A scheduling weight, not a physical number: the work of one layout's memory check and
program, in the unit of one op of its pipeline (:func:`work_of`). It only orders the tasks
(largest first); any value gives the same rows."""


def shape_of(ctx: SweepContext, layout: SweepPoint) -> tuple:
    """The pipeline shape of ``layout`` (see the module): ``(schedule, pp, microbatches, vpp,
    group size, combined 1F1B)``; a layout whose config cannot be derived is its own shape (its
    row says why)."""
    try:
        par = layout.config(ctx.training_for(layout))
        return (par.schedule_name, par.pp, par.microbatches, par.vpp,
                par.microbatch_group_size, par.overlap_moe_expert_parallel_comm)
    except Exception:  # noqa: BLE001 - the task records the error in the layout's row
        return ("", layout.key)


def work_of(shape: tuple) -> int:
    """The ops of one iteration of a pipeline of ``shape`` (forwards and backwards of every
    microbatch, chunk and stage) plus :data:`FIXED_WORK`: the weight of a layout in
    :func:`shape_groups`' order."""
    if not shape[0]:
        return FIXED_WORK
    _, pp, m, v = shape[:4]
    return 2 * pp * m * v + FIXED_WORK


def shape_groups(ctx: SweepContext, layouts
                 ) -> tuple[list[SweepPoint], tuple[tuple[str, tuple[SweepPoint, ...]], ...]]:
    """``layouts`` as tasks: the first layout of each shape (:func:`shape_of`; the layouts of
    a shape in key order, so that a layout's twins, :func:`sim.sweep.best.twin_groups`, follow
    it) and the others of its shape by its key (:attr:`SweepContext.twins`); the tasks with the
    most work (:func:`work_of`) first."""
    by: dict[tuple, list[SweepPoint]] = {}
    for lay in sorted(layouts, key=lambda x: x.key):
        by.setdefault(shape_of(ctx, lay), []).append(lay)
    tasks = sorted(by.items(), key=lambda kv: (-work_of(kv[0]) * len(kv[1]), kv[1][0].key))
    heads = [lays[0] for _, lays in tasks]
    return heads, tuple((lays[0].key, tuple(lays[1:])) for _, lays in tasks if len(lays) > 1)


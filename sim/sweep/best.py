"""Best-first sweeps (``simrun sweep --best K``, docs/sweeps.md): simulate the layouts in the
order of a proven lower bound on their iteration time (:mod:`sim.sweep.bound`) and stop once
the top ``K`` of the ranking are proven.

:func:`prepass` is the early feasibility pass of one layout (the memory check, as
:func:`~sim.sweep.evaluate.infeasible_row`) plus, for a layout that fits, its lower bound.
:class:`BestFirst` orders the candidates as the ranking does (the layouts with the memory
headroom first, :func:`~sim.sweep.output.ranked`), by bound within each group, says when the
top ``K`` are proven, and turns the rows a smaller prefix of that order already proves into
``pruned`` rows, so the outputs depend only on the inputs, not on how many layouts were
running when the proof came.

Proof of the stop rule. Candidates are ordered by ``(g, b, key)``: ``g`` = within the headroom
(0 or 1), ``b`` the bound. The ranking orders the simulated layouts by ``(g, t, key)``, ``t``
the iteration time ≥ ``b``. Let the first ``i`` candidates be simulated and ``r`` the
``K``-th best of their ranked (``ok``) rows. If ``(g_r, t_r) < (g_c, b_c)`` for the next
candidate ``c``, every later candidate ``d`` has ``(g_d, t_d) ≥ (g_d, b_d) ≥ (g_c, b_c) >
(g_r, t_r)``: none can rank among the first ``K``, which are therefore those of the full
sweep.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from sim.report.build import NS
from sim.scenario.model_run import model_run_of
from sim.sweep.bound import lower_bound_ns
from sim.sweep.evaluate import (
    SweepContext,
    base_row,
    error_text,
    infeasible_row,
    memory_row,
)
from sim.sweep.groups import shape_groups
from sim.sweep.output import within_headroom
from sim.sweep.runner import run_tasks
from sim.sweep.space import SweepPoint
from sim.words import plural


def prepass(ctx: SweepContext, layout: SweepPoint, shared: list | None = None
            ) -> dict[str, Any]:
    """The memory check of ``layout`` (its row when it decides it: ``infeasible`` or
    ``error``, as :func:`~sim.sweep.evaluate.infeasible_row`), else the row with ``status =
    "fits"`` and ``bound_ns``: the lower bound on its iteration time (``None``: no bound, it
    has to be simulated). ``shared``: the ``(program, bound)`` of the layouts before it in one
    task (:func:`prepass_twins`): the bound of an equal program (but for its assumption lines,
    which the bound does not read) is not computed again. Never raises."""
    t0 = time.perf_counter()
    row = base_row(layout)
    try:
        out, fit = memory_row(ctx, layout)
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on (as evaluate)
        out, fit = {"status": "error", "reason": error_text(exc)}, None
    row.update(out)
    if fit is not None:
        row["status"] = "fits"
        try:
            run = model_run_of(fit, ctx.topology, compute=ctx.compute)
            row["bound_ns"] = _bound_ns(run.program, ctx.topology, shared)
        except Exception:  # noqa: BLE001 - no bound: simulated like any layout (its row says)
            row["bound_ns"] = None
    row["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return row


def _bound_ns(program, topology, shared: list | None) -> int | None:
    if shared is None:
        return lower_bound_ns(program, topology)
    key = replace(program, assumptions=[])
    got = next((b for p, b in shared if p == key), False)
    if got is False:
        got = lower_bound_ns(program, topology)
        shared.append((key, got))
    return got


def prepass_twins(ctx: SweepContext, layout: SweepPoint) -> list[dict[str, Any]]:
    """The :func:`prepass` rows of ``layout`` and of the layouts of its task (``ctx.twins``:
    those of its pipeline shape, :func:`~sim.sweep.groups.shape_groups`), in that order; the
    bound of a program equal to an earlier one's is computed once."""
    shared: list = []
    return [prepass(ctx, lay, shared) for lay in ctx.with_twins(layout)]


def pruned_row(layout: SweepPoint, fits: dict[str, Any], kth: dict[str, Any], k: int,
               after: bool = False) -> dict[str, Any]:
    """The row of a layout a best-first sweep did not simulate: its memory, its bound
    (``lower_bound_s``) and the ``k``-th ranked simulated row ``kth`` it cannot beat
    (``after``: the layout is within the memory headroom and ``kth`` is not, so it ranks
    after ``kth`` whatever its time)."""
    row = base_row(layout)
    for key in ("microbatches", "schedule", "memory_per_gpu_bytes", "memory_capacity_bytes"):
        row[key] = fits.get(key)
    bound = fits["bound_ns"] * NS
    why = ("within the memory headroom, ranked after" if after else
           f"lower bound {bound:.4f} s > the iteration time of")
    row.update(status="pruned", lower_bound_s=bound, pruned_by=kth["layout"],
               reason=f"{why} the {_nth(k)} best: {kth['iteration_time_s']:.4f} s "
                      f"({kth['layout']}; --best {k})")
    return row


def _nth(k: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(k, f"{k}th")


@dataclass
class BestFirst:
    """The candidates of a best-first sweep (``fits``: their prepass rows by key), in order,
    and ``k`` the ranked layouts to prove."""

    fits: dict[str, dict[str, Any]]
    k: int
    headroom_bytes: int
    order: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.order = sorted(self.fits, key=self._key)

    def _group(self, row: dict[str, Any]) -> int:
        return int(within_headroom({**row, "status": "ok"}, self.headroom_bytes))

    def _key(self, key: str) -> tuple:
        row = self.fits[key]
        b = row.get("bound_ns")
        return (self._group(row), -1 if b is None else b, key)

    def proven(self, rows: dict[str, dict[str, Any]], upto: int) -> dict[str, Any] | None:
        """The ``k``-th ranked row when the top ``k`` are proven by the first ``upto``
        candidates' ``rows`` (each must be there; see the module), else ``None``."""
        if upto >= len(self.order):
            return None
        ok = [rows[key] for key in self.order[:upto] if rows[key].get("status") == "ok"]
        if len(ok) < self.k:
            return None
        kth = sorted(ok, key=lambda r: (self._group(r), r["iteration_time_s"],
                                        r["layout"]))[self.k - 1]
        nxt = self.fits[self.order[upto]]
        b = nxt.get("bound_ns")
        if b is None:
            return None
        return kth if (self._group(kth), kth["iteration_time_s"]) < (self._group(nxt),
                                                                      b * NS) else None

    def stop_before(self, rows: dict[str, dict[str, Any]], n: int) -> bool:
        """Whether to start no candidate after the first ``n`` (started in order; ``rows``:
        those finished so far): the ``k``-th best finished row already beats the bound of
        candidate ``n`` and so of every later one (the running ones finish all the same;
        :meth:`final` keeps the shortest proving prefix)."""
        if n >= len(self.order):
            return True
        ok = [r for key in self.order[:n] if (r := rows.get(key)) and r.get("status") == "ok"]
        if len(ok) < self.k:
            return False
        kth = sorted(ok, key=lambda r: (self._group(r), r["iteration_time_s"],
                                        r["layout"]))[self.k - 1]
        nxt = self.fits[self.order[n]]
        b = nxt.get("bound_ns")
        return b is not None and (self._group(kth), kth["iteration_time_s"]) < (
            self._group(nxt), b * NS)

    def final(self, rows: dict[str, dict[str, Any]], layouts: dict[str, SweepPoint]
              ) -> tuple[dict[str, dict[str, Any]], int]:
        """``rows`` (the simulated candidates' rows by key) with every candidate after the
        shortest proving prefix as a ``pruned`` row; and how many were pruned (0: none, the
        proof did not come before every candidate was simulated or the sweep stopped)."""
        for upto in range(len(self.order) + 1):
            if upto and self.order[upto - 1] not in rows:
                return rows, 0
            kth = self.proven(rows, upto)
            if kth is not None:
                out = {k: rows[k] for k in self.order[:upto]}
                for key in self.order[upto:]:
                    after = self._group(self.fits[key]) > self._group(kth)
                    out[key] = pruned_row(layouts[key], self.fits[key], kth, self.k, after)
                return out, len(self.order) - upto
        return rows, 0


def twin_groups(todo: list[SweepPoint], fits: dict[str, dict[str, Any]] | None = None
                ) -> tuple[list[SweepPoint], tuple[tuple[str, tuple[SweepPoint, ...]], ...]]:
    """``todo`` (in order) without the layouts that may simulate as an earlier one, and those
    by the earlier one's key (:attr:`SweepContext.twins`): the same layout but for its swept
    training options and, best-first (``fits``: the prepass rows), with the same lower bound
    (a twin's program is the same work, so its bound is too; another bound could only mean
    another simulation, and it would run out of its order). Only a hint:
    :func:`~sim.sweep.evaluate.evaluate_twins` reuses a simulation only where every input of
    it is equal."""
    heads: list[SweepPoint] = []
    groups: dict[str, list[SweepPoint]] = {}
    first: dict[tuple, str] = {}
    for lay in todo:
        bound = fits[lay.key].get("bound_ns") if fits is not None else None
        key = (replace(lay, variant=()), bound)
        if key in first:
            groups[first[key]].append(lay)
        else:
            first[key] = lay.key
            groups[lay.key] = []
            heads.append(lay)
    return heads, tuple((k, tuple(v)) for k, v in groups.items() if v)


def memory_pass(ctx: SweepContext, layout: SweepPoint) -> dict[str, Any]:
    """The early feasibility pass of one layout without a bound (the row of
    :func:`~sim.sweep.evaluate.infeasible_row`, ``status = "fits"`` when it has to be
    simulated)."""
    return infeasible_row(ctx, layout, keep=True)


def memory_pass_group(ctx: SweepContext, layout: SweepPoint) -> list[dict[str, Any]]:
    """The :func:`memory_pass` rows of ``layout`` and of the layouts of its task
    (``ctx.twins``), in that order."""
    return [memory_pass(ctx, lay) for lay in ctx.with_twins(layout)]


def backend_of(opts) -> dict[str, Any]:
    """The back-end arguments of :func:`~sim.sweep.runner.run_tasks` of the sweep ``opts``
    (a :class:`~sim.sweep.driver.SweepOptions`)."""
    return {"workers": opts.workers, "scheduler": opts.scheduler,
            "connect_timeout_s": opts.scheduler_timeout_s}


def early_pass(ctx: SweepContext, layouts, bounds: bool, **backend) -> dict[str, dict[str, Any]]:
    """The early feasibility pass of ``layouts`` on the sweep's workers (``backend``:
    :func:`~sim.sweep.runner.run_tasks`'s ``workers``, ``scheduler``,
    ``connect_timeout_s``): :func:`prepass` rows (``bounds``) or :func:`memory_pass` rows, by
    key."""
    rows: dict[str, dict[str, Any]] = {}
    # the layouts of one pipeline shape in one task, the largest first (sim.sweep.groups):
    # their op orders are computed once; an equal program's bound too
    heads, groups = shape_groups(ctx, layouts)
    run_tasks(replace(ctx, twins=groups), heads, lambda r: rows.__setitem__(r["layout"], r),
              task=prepass_twins if bounds else memory_pass_group, **backend)
    return rows


def list_layouts(ctx: SweepContext, layouts, skipped: list[tuple[str, str]],
                 headroom: int, backend: dict[str, Any]) -> int:
    """``--limit 0``: count the valid layouts and list each with its memory (the early
    feasibility pass only, on the sweep's workers: nothing is simulated or written)."""
    got = early_pass(ctx, layouts, False, **backend)
    rows = [got[lay.key] for lay in layouts]
    n_bad = sum(r["status"] != "fits" for r in rows)
    tight = sum(r["status"] == "fits" and r["memory_capacity_bytes"]
                - r["memory_per_gpu_bytes"] < headroom for r in rows)
    print(f"{plural(len(layouts), 'valid layout')} ({plural(len(skipped), 'combination')} "
          f"skipped as invalid): {len(rows) - n_bad} fit in memory ({tight} within the "
          f"{headroom / 1e9:g} GB headroom), {n_bad} do not; nothing simulated (--limit 0)")
    for r in rows:
        mem = r.get("memory_per_gpu_bytes")
        gb = "" if mem is None else f"{mem / 1e9:6.1f} GB"
        flag = r["status"]
        if flag == "fits" and r["memory_capacity_bytes"] - mem < headroom:
            flag = "fits, within headroom"
        print(f"  {r['layout']:<44} {r.get('microbatches', ''):>5} microbatches  {gb}  {flag}")
    return 0

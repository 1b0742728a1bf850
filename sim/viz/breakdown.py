"""Breakdown figures: where each stage's time went, and how layouts of a sweep rank.

- :func:`breakdown_series` / :func:`plot_breakdown`: a stacked bar per pipeline stage of
  compute, optimizer, exposed communication by group and bubble, from the report dict (each bar
  sums to the iteration time).
- :func:`sweep_ranking` / :func:`plot_sweep`: a ranked bar chart of iteration time (or MFU) by
  layout; :func:`sweep_grid` / :func:`plot_sweep_heatmap`: the best value per (x, y) cell.

Sweep rows are plain dicts: ``layout`` (str), ``iteration_time_s`` (float, may be missing when
infeasible), ``mfu`` (optional, fraction 0–1), ``feasible`` (bool, default True), ``reason``
(optional, why infeasible) and any other keys (e.g. ``tp``, ``pp``) for the heatmap axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.report.summary import GROUP_ORDER
from sim.viz.mpl import luminance, render
from sim.viz.timeline import COLORS

METRICS = {"iteration_time_s": ("iteration time (ms)", 1e3, False),
           "mfu": ("MFU (%)", 100.0, True)}


@dataclass(frozen=True)
class Series:
    """One stacked segment type: ``key`` (colour), legend ``name``, one value per stage (ms)."""

    key: str
    name: str
    values_ms: tuple[float, ...]


def breakdown_series(rep: dict[str, Any]) -> tuple[list[int], list[Series]]:
    """Stages and the stacked series (ms) of the report; all-zero series are left out."""
    stages = rep["stages"]
    out = [Series("forward", "compute", tuple(s["compute_s"] * 1e3 for s in stages)),
           Series("optimizer", "optimizer", tuple(s["optimizer_s"] * 1e3 for s in stages))]
    groups = list(GROUP_ORDER) + sorted(
        {g for s in stages for g in s["exposed_comm_s"]} - set(GROUP_ORDER))
    for g in groups:
        out.append(Series(g if g in COLORS else "compute", f"exposed {g} comm",
                          tuple(s["exposed_comm_s"].get(g, 0.0) * 1e3 for s in stages)))
    # all idle time of the stage (pipeline bubble + the wait for the slowest stage at the end):
    # the report's ``bubble_s``; the *bubble fraction* of the title is the pipeline bubble over
    # the busy time, another quantity, so this segment is called idle
    out.append(Series("bubble", "idle (waiting for other stages)",
                      tuple(s["bubble_s"] * 1e3 for s in stages)))
    keep = [x for x in out if any(v > 0 for v in x.values_ms)]
    return [s["stage"] for s in stages], keep


def plot_breakdown(rep: dict[str, Any], path: str | Path, *, width_px: int = 1200,
                   height_px: int = 560, flag: str = "--breakdown-plot"
                   ) -> tuple[list[int], list[Series]]:
    """Stacked bar per stage (ms) with the iteration time marked; returns the plotted data."""
    stages, series = breakdown_series(rep)
    it_ms = rep["iteration_time_s"] * 1e3

    def draw(fig):
        from matplotlib.patches import Patch  # matplotlib loads only when a plot is drawn

        ax = fig.add_axes((80 / width_px, 120 / height_px, 1 - 100 / width_px,
                           1 - 190 / height_px))
        x = list(range(len(stages)))
        bottom = [0.0] * len(stages)
        for s in series:
            kw: dict[str, Any] = {"color": COLORS[s.key], "width": 0.72, "linewidth": 0}
            if s.key == "bubble":
                kw.update(edgecolor="#a0a0a0", hatch="///")
            ax.bar(x, s.values_ms, bottom=bottom, **kw)
            bottom = [b + v for b, v in zip(bottom, s.values_ms, strict=True)]
        ax.axhline(it_ms, color="#333333", linewidth=0.8, linestyle="--")
        ax.text(len(stages) - 0.5, it_ms, f" iteration {it_ms:,.1f} ms", va="bottom",
                ha="right", fontsize=8)
        ax.set_xticks(x)
        ax.set_xticklabels([str(s) for s in stages])
        ax.set_xlim(-0.6, len(stages) - 0.4)
        ax.set_ylim(0, it_ms * 1.08)
        ax.set_xlabel("pipeline stage")
        ax.set_ylabel("time (ms)")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        handles = [Patch(facecolor=COLORS[s.key], hatch="///" if s.key == "bubble" else None,
                         edgecolor="#a0a0a0" if s.key == "bubble" else "none", label=s.name)
                   for s in series]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14),
                  ncol=min(len(handles), 7), frameon=False)
        name = Path(str(rep.get("workload", ""))).name
        fig.text(80 / width_px, 1 - 16 / height_px,
                 f"{name} — time per pipeline stage (each bar sums to the iteration time)",
                 ha="left", va="top", fontsize=10)
        par = rep["parallelism"]
        fig.text(80 / width_px, 1 - 36 / height_px,
                 f"{rep['schedule']}, TP {par['tp']} × PP {par['pp']} × DP {par['dp']}"
                 + "".join(f" × {k.upper()} {par[k]}" for k in ("cp", "ep")
                           if par.get(k, 1) > 1) + ", "
                 f"M = {rep['microbatches']} · bubble fraction {rep['bubble_fraction']:.3f} "
                 "(pipeline bubble over busy time; "
                 f"ideal {rep['ideal_bubble_formula']} = {rep['ideal_bubble_fraction']:.3f})"
                 f" · idle {rep.get('idle_fraction', 0.0) * 100:.1f}% of the iteration",
                 ha="left", va="top", fontsize=8, color="#444444")

    render(draw, path, width_px=width_px, height_px=height_px, flag=flag)
    return stages, series


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")


def sweep_ranking(rows: Sequence[dict[str, Any]], metric: str = "iteration_time_s"
                  ) -> tuple[list[tuple[str, float]], list[tuple[str, str]]]:
    """Feasible layouts best-first as ``(layout, value)`` (lowest time / highest MFU), and the
    infeasible ones as ``(layout, reason)``. Ties keep the input order."""
    _check_metric(metric)
    higher_better = METRICS[metric][2]
    ok, bad = [], []
    for r in rows:
        if r.get("feasible", True) and r.get(metric) is not None:
            ok.append((str(r["layout"]), float(r[metric])))
        else:
            reason = r.get("reason") or ("infeasible" if not r.get("feasible", True)
                                         else f"no {metric}")
            bad.append((str(r["layout"]), str(reason)))
    ok.sort(key=lambda kv: -kv[1] if higher_better else kv[1])
    return ok, bad


def plot_sweep(rows: Sequence[dict[str, Any]], path: str | Path, *,
               metric: str = "iteration_time_s", top: int = 30, title: str = "",
               width_px: int = 1000, flag: str = "--sweep-plot"
               ) -> tuple[list[tuple[str, float]], list[tuple[str, str]]]:
    """Ranked horizontal bars (best at the top) of the ``top`` best feasible layouts."""
    ranked, bad = sweep_ranking(rows, metric)
    shown = ranked[:top]
    label, scale, _ = METRICS[metric]
    height_px = 140 + 22 * max(len(shown), 1)

    def draw(fig):
        ax = fig.add_axes((260 / width_px, 60 / height_px, 1 - 340 / width_px,
                           1 - 110 / height_px))
        vals = [v * scale for _, v in shown]
        y = list(range(len(shown)))
        colors = [COLORS["DP"] if i else COLORS["forward"] for i in y]
        ax.barh(y, vals, color=colors, height=0.7)
        for i, v in enumerate(vals):
            ax.text(v, i, f" {v:,.1f}", va="center", ha="left", fontsize=8)
        ax.set_yticks(y)
        ax.set_yticklabels([name for name, _ in shown])
        ax.set_ylim(len(shown) - 0.5, -0.5)
        ax.set_xlim(0, max(vals, default=1) * 1.15)
        ax.set_xlabel(label)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        more = len(ranked) - len(shown)
        note = f"{len(ranked)} feasible layouts" + (f" ({more} not shown)" if more else "")
        if bad:
            note += f"; {len(bad)} infeasible"
        fig.text(260 / width_px, 1 - 14 / height_px, title or f"layouts ranked by {label}",
                 ha="left", va="top", fontsize=10)
        fig.text(260 / width_px, 1 - 32 / height_px, note, ha="left", va="top", fontsize=8,
                 color="#444444")

    render(draw, path, width_px=width_px, height_px=height_px, flag=flag)
    return ranked, bad


def sweep_grid(rows: Sequence[dict[str, Any]], x: str, y: str,
               metric: str = "iteration_time_s"
               ) -> tuple[list[Any], list[Any], list[list[float | None]]]:
    """Best feasible value per (``x``, ``y``) cell: (x values, y values, grid[y][x] or None)."""
    _check_metric(metric)
    higher_better = METRICS[metric][2]
    best: dict[tuple[Any, Any], float] = {}
    xs: set[Any] = set()
    ys: set[Any] = set()
    for r in rows:
        xs.add(r[x])
        ys.add(r[y])
        if not r.get("feasible", True) or r.get(metric) is None:
            continue
        key, v = (r[x], r[y]), float(r[metric])
        cur = best.get(key)
        if cur is None or (v > cur if higher_better else v < cur):
            best[key] = v
    xl, yl = sorted(xs), sorted(ys)
    return xl, yl, [[best.get((a, b)) for a in xl] for b in yl]


def plot_sweep_heatmap(rows: Sequence[dict[str, Any]], path: str | Path, *, x: str = "tp",
                       y: str = "pp", metric: str = "iteration_time_s", title: str = "",
                       flag: str = "--sweep-heatmap"):
    """Heatmap of the best value per (x, y) cell; empty cells = no feasible layout."""
    xl, yl, grid = sweep_grid(rows, x, y, metric)
    label, scale, higher_better = METRICS[metric]
    width_px = 300 + 90 * max(len(xl), 1)
    height_px = 150 + 50 * max(len(yl), 1)

    def draw(fig):
        ax = fig.add_axes((110 / width_px, 60 / height_px, 1 - 250 / width_px,
                           1 - 110 / height_px))
        cax = fig.add_axes((1 - 120 / width_px, 60 / height_px, 14 / width_px,
                            1 - 110 / height_px))
        data = np.array([[np.nan if v is None else v * scale for v in row] for row in grid],
                        dtype=float)
        cmap = "viridis" if higher_better else "viridis_r"
        im = ax.imshow(data, cmap=cmap, aspect="auto")
        for j, row in enumerate(data):
            for i, v in enumerate(row):
                if np.isnan(v):
                    ax.text(i, j, "—", ha="center", va="center", fontsize=8, color="#888888")
                    continue
                rgba = im.cmap(im.norm(v))
                color = "white" if luminance(rgba) < 0.5 else "black"
                ax.text(i, j, f"{v:,.1f}", ha="center", va="center", fontsize=8, color=color)
        ax.set_xticks(range(len(xl)))
        ax.set_xticklabels([str(v) for v in xl])
        ax.set_yticks(range(len(yl)))
        ax.set_yticklabels([str(v) for v in yl])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        cbar = None
        if not np.isnan(data).all():
            cbar = fig.colorbar(im, cax=cax, label=label)
        else:
            cax.set_visible(False)
        fig.text(110 / width_px, 1 - 14 / height_px,
                 title or f"best {label} per ({x}, {y}); lighter = better, — = none feasible",
                 ha="left", va="top", fontsize=10)
        return cbar

    render(draw, path, width_px=width_px, height_px=height_px, flag=flag)
    return xl, yl, grid


__all__ = ["Series", "breakdown_series", "plot_breakdown", "sweep_ranking", "plot_sweep",
           "sweep_grid", "plot_sweep_heatmap"]

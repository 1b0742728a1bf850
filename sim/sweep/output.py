"""Final sweep outputs: the ranking, the terminal table, CSV, JSON and plots.

Everything here is a pure function of the set of rows, never of the order they finished in:
rows are ranked (feasible layouts by iteration time, ties by layout key; then infeasible ones,
inapplicable ones, then failed ones, each by key), the wall-clock ``elapsed_s`` of a task is
dropped, and files are written atomically (:func:`sim.files.outputs.atomic_write`). An
interrupted-and-resumed sweep therefore writes byte-identical files to an uninterrupted one.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sim.files.outputs import atomic_write, write_json
from sim.options.registry import flags
from sim.sweep.evaluate import GROUPS
from sim.words import plural

SCHEMA = "simrun.sweep/1"
STATUS_ORDER = {"ok": 0, "pruned": 1, "infeasible": 2, "inapplicable": 3, "error": 4}
"""``pruned``: feasible, not simulated: its lower bound cannot beat the ``--best`` K-th
(:mod:`sim.sweep.best`)."""
COLUMNS = ("rank", "layout", "status", "tp", "pp", "dp", "vpp", "ep", "micro_batch",
           "microbatches", "schedule", "iteration_time_s", "tokens_per_s", "tflops_per_gpu",
           "mfu", "memory_per_gpu_bytes", "memory_capacity_bytes", "bubble_fraction",
           "ideal_bubble_fraction") + tuple(f"exposed_{g}_s" for g in GROUPS) + (
           "events", "reason")
VOLATILE = ("elapsed_s",)  # in results.jsonl only
CSV_DEFAULTS = {"cp": 1, "zero": 0, "etp": None}
"""Dimensions in the JSON rows only when not the default (the layout key likewise), but a
column of results.csv always, with their default value where the row has none (``etp``: the
row's TP, Megatron-Core's default expert tensor-parallel size)."""
CSV_COLUMNS = COLUMNS[:COLUMNS.index("micro_batch")] + tuple(CSV_DEFAULTS) + COLUMNS[
    COLUMNS.index("micro_batch"):]


DEFAULT_HEADROOM_GB = 2.5
"""Default of ``--memory-headroom`` (GB = 1e9 bytes): the memory model's largest known error.
Four measured H100 runs that ran on 80 GB GPUs are modelled at 80.3-82.4 GB (docs/models.md,
"Memory model": NeMo 24.07 Nemotron-340B 128 GPU 82.4, GPT3-20B 64 GPU 82.0, LLAMA3-8B CP2
80.3; Bridge 25.11 Qwen3-30B-A3B 80.5), i.e. over-estimates of up to 2.4 GB; what the model
leaves out (FP8 weight copies, TP-overlap userbuffers, allocator fragmentation, same section)
errs the other way by an amount no measurement here bounds. 2.4 GB rounded up to 0.5 GB."""


def within_headroom(row: dict[str, Any], headroom_bytes: int) -> bool:
    """A feasible layout whose modelled memory is less than ``headroom_bytes`` below capacity
    (it may not fit on the real GPU, or fit where the model says it does not)."""
    used, cap = row.get("memory_per_gpu_bytes"), row.get("memory_capacity_bytes")
    return (row.get("status") == "ok" and used is not None and cap is not None
            and cap - used < headroom_bytes)


def headroom_summary(rows: list[dict[str, Any]], headroom_gb: float) -> dict[str, Any]:
    """``results.json``'s ``memory_headroom`` entry: the margin and the feasible layouts within
    it (none: no entry, so sweeps where nothing is close to capacity keep their form)."""
    tight = [r["layout"] for r in rows if r.get("memory_within_headroom")]
    return {"memory_headroom": {"gb": headroom_gb, "within": tight}} if tight else {}


def ranked(rows: Iterable[dict[str, Any]], headroom_bytes: int = int(DEFAULT_HEADROOM_GB * 1e9)
           ) -> list[dict[str, Any]]:
    """Rows in final order with a ``rank`` (1 = fastest; ``None`` for layouts not simulated):
    feasible layouts with at least ``headroom_bytes`` of memory to spare first, then the
    feasible ones within the headroom (marked ``memory_within_headroom``), each by time."""
    def order(r):
        st = STATUS_ORDER.get(r.get("status", "error"), len(STATUS_ORDER))
        return (st, within_headroom(r, headroom_bytes),
                r.get("iteration_time_s") if st == 0 else 0.0, r["layout"])

    out = []
    for i, r in enumerate(sorted(rows, key=order)):
        clean = {k: v for k, v in r.items() if k not in VOLATILE}
        clean.pop("memory_within_headroom", None)
        if within_headroom(r, headroom_bytes):
            clean["memory_within_headroom"] = True
        clean["rank"] = i + 1 if r.get("status") == "ok" else None
        out.append({c: clean.get(c) for c in COLUMNS} | {
            k: v for k, v in clean.items() if k not in COLUMNS})
    return out


def csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        r = CSV_DEFAULTS | {"etp": r.get("tp")} | r
        w.writerow(["" if r.get(c) is None else repr(r[c]) if isinstance(r[c], float)
                    else r[c] for c in CSV_COLUMNS])
    return buf.getvalue()


def write_outputs(directory: Path, rows: list[dict[str, Any]], summary: dict[str, Any], *,
                  plot: bool = True) -> list[Path]:
    """``results.csv``, ``results.json`` and (``plot``) ``ranking.png`` + ``heatmap.png``
    in ``directory``; returns the paths written."""
    paths = [directory / "results.csv", directory / "results.json"]
    text = csv_text(rows)
    atomic_write(paths[0], lambda f: f.write(text), flag="--out")
    write_json(paths[1], {"schema": SCHEMA, **summary, "rows": rows}, flag="--out")
    if plot and any(r["status"] == "ok" for r in rows):
        # matplotlib (behind sim.viz.breakdown) is loaded only when plots are asked for
        from sim.viz.breakdown import plot_sweep, plot_sweep_heatmap

        # pruned layouts (--best) were not simulated: neither ranked nor infeasible
        plot_rows = [{**r, "feasible": r["status"] == "ok"} for r in rows
                     if r["status"] != "pruned"]
        title = summary.get("title", "")
        plot_sweep(plot_rows, directory / "ranking.png", title=title, flag="--out")
        plot_sweep_heatmap(plot_rows, directory / "heatmap.png", x="tp", y="pp", flag="--out",
                           title="best iteration time (ms) per (tp, pp)")
        paths += [directory / "ranking.png", directory / "heatmap.png"]
    return paths


def _fmt(v: Any, scale: float = 1.0, digits: int = 2) -> str:
    return "–" if v is None else f"{v * scale:,.{digits}f}"


def _range(r: dict[str, Any]) -> str:
    """``low-high`` seconds of a row's prediction range (sim/calibration/ranges.py)."""
    if r.get("iteration_time_low_s") is None:
        return ""
    return f"{r['iteration_time_low_s']:.3f}-{r['iteration_time_high_s']:.3f}"


SWEPT = ("tp", "pp", "dp", "cp", "vpp", "ep", "etp", "zero", "micro_batch", "schedule")
"""Layout columns of the terminal table, each shown when its value differs between rows (as are
the swept training options, :mod:`sim.sweep.variants`)."""


def table_lines(rows: list[dict[str, Any]], *, top: int | None = None,
                headroom_bytes: int | None = None, show_infeasible: bool = False) -> list[str]:
    """The ranked table (units in the headers; a column per swept dimension; ``!`` after the
    memory of a layout within ``headroom_bytes`` of capacity), then the layouts not simulated:
    one line per status with the count and the most common reason, or (``show_infeasible``)
    one line per layout."""
    ok = [r for r in rows if r["status"] == "ok"]
    groups = [g for g in GROUPS + ("CP", "ETP")
              if any((r.get(f"exposed_{g}_s") or 0) > 0 for r in ok)]
    options = sorted({k for r in rows for k in r} & {f.key for _, f in flags().values()})
    dims = [d for d in (*SWEPT, *options)
            if len({r.get(d, CSV_DEFAULTS.get(d)) for r in rows}) > 1]
    head = ["rank", "layout", *dims, "iter_time_s", "range_s", "tokens_per_s", "MFU_%",
            "mem_GB/GPU",
            "bubble_frac"] + [f"{g}_exposed_ms" for g in groups]
    body = []
    for r in ok[:top] if top else ok:
        tight = headroom_bytes is not None and within_headroom(r, headroom_bytes)
        body.append([str(r["rank"]), r["layout"],
                     *(str(r.get(d, CSV_DEFAULTS.get(d)) or "-") for d in dims),
                     _fmt(r["iteration_time_s"], 1, 3), _range(r),
                     _fmt(r["tokens_per_s"], 1, 0), _fmt(r["mfu"], 100, 1),
                     _fmt(r["memory_per_gpu_bytes"], 1e-9, 1) + ("!" if tight else ""),
                     _fmt(r["bubble_fraction"], 1, 3)]
                    + [_fmt(r.get(f"exposed_{g}_s"), 1e3, 1) for g in groups])
    widths = [max([len(head[i])] + [len(b[i]) for b in body]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) if i == 1 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(head, widths, strict=True)))]
    lines += ["  ".join(c.ljust(w) if i == 1 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(b, widths, strict=True))) for b in body]
    if top and len(ok) > top:
        lines.append(f"… {plural(len(ok) - top, 'more feasible layout')} in results.csv")
    if headroom_bytes is not None and any(within_headroom(r, headroom_bytes) for r in ok):
        lines.append(f"! within {headroom_bytes / 1e9:g} GB of the GPU's memory "
                     "(--memory-headroom): the memory model's known error; ranked after the "
                     "layouts with that margin")
    bad = [r for r in rows if r["status"] != "ok"]
    if show_infeasible:
        lines += [f"{r['status']:>10}  {r['layout']}: {r.get('reason', '')}" for r in bad]
        return lines
    for status in STATUS_ORDER:
        these = [r for r in bad if r["status"] == status]
        if these and status == "pruned":
            low = min(r["lower_bound_s"] for r in these)
            kth = next(r for r in ok if r["layout"] == these[0]["pruned_by"])
            lines.append(f"{plural(len(these), 'feasible layout')} pruned, not simulated: "
                         f"lower bounds of {low:.3f} s and more, none can rank among the "
                         f"first {kth['rank']} (rank {kth['rank']}: {kth['layout']}, "
                         f"{kth['iteration_time_s']:.3f} s); "
                         "--show-infeasible lists them, results.csv has each bound")
        elif these:
            lines.append(f"{plural(len(these), 'layout')} {status} (e.g. {these[0]['layout']}: "
                         f"{_short(these[0].get('reason', ''))}); --show-infeasible lists them, "
                         "results.csv has each reason")
    return lines


def _short(reason: str, width: int = 110) -> str:
    return reason if len(reason) <= width else reason[:width - 1] + "…"

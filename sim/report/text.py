"""The human-readable terminal report (units in every header).

Default (a short summary a person reads, about 25 lines): the layout, headline numbers
(iteration time, throughput, MFU and HFU, memory per GPU against capacity, bubble, exposed
communication by group), the bottleneck in words, for runs with faults what delayed the
iteration and by how much, a per-stage table (every stage when there are few, else the first,
last, busiest and last-finishing stages, and any rank of note, e.g. a slow GPU, with its own
row), and the assumptions that depart from the input plus the three behind the largest parts of
the iteration (:mod:`sim.report.summary`).

``verbose``: every stage, per-layer totals (grouped by operator type for generated models), and
every assumption. The JSON report (:mod:`sim.report.build`) is the same either way.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from sim.calibration.ranges import range_line
from sim.report.summary import departures, fault_story, groups, headline, ms, top_assumptions
from sim.words import plural

FEW_STAGES = 4  # up to this many stages the default table lists them all
MAX_LINE = 200  # characters of a default-report line (longer assumptions are cut with …)
_LAYER_INDEX = re.compile(r"^layer\d+_")


def stage_rows(rep: dict[str, Any], picked: list[dict[str, Any]] | None = None,
               notable: list[dict[str, Any]] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-stage table (ms): ``picked`` stages (default all), then the
    ``notable`` ranks' own rows, then the mean over all stages. ``idle_ms`` is all idle time
    (pipeline bubble and the wait for the slowest stage), so each row sums to the iteration
    time; ``bubble_frac`` is the pipeline bubble over the pipeline busy time."""
    gs = groups(rep)
    head = ["stage", "rank", "compute_ms", "optimizer_ms"] + [f"{g}_exposed_ms" for g in gs] + [
        "idle_ms", "bubble_frac"]

    def cells(s: dict[str, Any]) -> list[float]:
        return [s["compute_s"], s["optimizer_s"]] + [s["exposed_comm_s"].get(g, 0.0)
                                                     for g in gs] + [s["bubble_s"]]

    rows = []
    for s in (rep["stages"] if picked is None else picked) + (notable or []):
        rows.append([str(s["stage"]), str(s["rank"])] + [ms(v) for v in cells(s)]
                    + [f"{s['bubble_fraction']:.4f}"])
    n = len(rep["stages"])
    if n > 1:
        cols = list(zip(*(cells(s) + [s["bubble_fraction"]] for s in rep["stages"]),
                        strict=True))
        means = [sum(c) / n for c in cols]
        rows.append(["mean", ""] + [ms(v) for v in means[:-1]] + [f"{means[-1]:.4f}"])
    return head, rows


def pick_stages(rep: dict[str, Any], notable: list[dict[str, Any]]
                ) -> tuple[list[dict[str, Any]], str]:
    """The stages the default table shows, and a phrase saying which: all of few stages, else
    the first, the last, the busiest, the last to finish and those of the ``notable`` ranks."""
    stages = rep["stages"]
    if len(stages) <= FEW_STAGES:
        return stages, ""
    it = rep["iteration_time_s"]
    busiest = max(stages, key=lambda s: (it - s["bubble_s"], -s["stage"]))
    last = max(stages, key=lambda s: (s["finish_time_s"], -s["stage"]))
    keep = {stages[0]["stage"], stages[-1]["stage"], busiest["stage"], last["stage"]}
    why = (f"stages {stages[0]['stage']} and {stages[-1]['stage']}, the busiest "
           f"({busiest['stage']}), the last to finish ({last['stage']})")
    extra = sorted({r["stage"] for r in notable} - keep)
    if extra:
        why += f", {'stage' if len(extra) == 1 else 'stages'} {', '.join(map(str, extra))}"
        keep.update(extra)
    if notable:
        why += (f", then {plural(len(notable), 'rank')} of note "
                f"({', '.join(str(r['rank']) for r in notable)})")
    return [s for s in stages if s["stage"] in keep], why


def layer_rows(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per-layer table; for generated models (``model`` in the report) totals per operator type
    (``layer7_attn_qkv`` → ``attn_qkv``)."""
    grouped = "model" in rep
    acc: dict[str, dict[str, Any]] = {}
    for e in rep["layers"]:
        key = _LAYER_INDEX.sub("", e["name"]) if grouped else e["name"]
        a = acc.setdefault(key, {"stages": [], "layers": 0, "count": 0, "f": 0.0, "ig": 0.0,
                                 "wg": 0.0, "comm": {}})
        a["stages"].append(e["stages"])
        a["layers"] += 1
        a["count"] += e["count"]
        a["f"] += e["forward_s"]
        a["ig"] += e["input_grad_s"]
        a["wg"] += e["weight_grad_s"]
        for g, v in e["exposed_comm_s"].items():
            a["comm"][g] = a["comm"].get(g, 0.0) + v
    comm_groups = sorted({g for a in acc.values() for g in a["comm"]})
    head = ["operator" if grouped else "layer", "layers" if grouped else "stages", "count",
            "forward_ms", "input_grad_ms", "weight_grad_ms"] + [f"{g}_exposed_ms"
                                                               for g in comm_groups]
    rows = []
    for key, a in acc.items():
        where = str(a["layers"]) if grouped else ",".join(dict.fromkeys(a["stages"]))
        rows.append([key, where, str(a["count"]), ms(a["f"]), ms(a["ig"]), ms(a["wg"])]
                    + [ms(a["comm"].get(g, 0.0)) for g in comm_groups])
    return head, rows


def _layout_line(rep: dict[str, Any]) -> str:
    par = rep["parallelism"]
    v = rep["virtual_pipeline_size"]
    return (f"layout: TP {par['tp']} x PP {par['pp']} x DP {par['dp']}"
            + (f" x CP {par['cp']}" if "cp" in par else "")
            + f" = {par['world_size']} GPUs (EP {par['ep']}"
            + (f", ETP {par['etp']}" if "etp" in par else "") + f"); schedule {rep['schedule']}, "
            + plural(rep["microbatches"], "microbatch", "microbatches")
            + (f", {v} chunks per stage" if v > 1 else ""))


def format_report(rep: dict[str, Any], *, verbose: bool = False,
                  notable: list[dict[str, Any]] | None = None,
                  healthy: dict[str, Any] | None = None) -> str:
    """Render the report dict as text: the short summary, or everything with ``verbose``.
    ``notable``: rows (stage-entry shape, :func:`sim.report.build.notable_ranks`) of ranks that
    differ from their stage's representative, e.g. a slow GPU, shown with their own rank.
    ``healthy``: the report of the same run without its faults, to say what changed."""
    notable = notable or []
    lines = [f"simrun {rep['simrun_version']}: {rep['workload']} on {rep['topology']}",
             _layout_line(rep), ""]
    head = headline(rep)
    w = max(len(q) for q, _ in head)
    lines += [f"  {q.ljust(w)}  {val}" for q, val in head]
    if "iteration_time_range" in rep:  # sim/calibration/ranges.py
        lines.append(f"  {'range'.ljust(w)}  {range_line(rep['iteration_time_range'])}")
    lines += [f"  {line}" for line in fault_story(rep, notable, healthy)]
    picked, why = (rep["stages"], "") if verbose else pick_stages(rep, notable)
    title = "per stage (ms; each row sums to the iteration time"
    if why:
        title += f"; {why}; --verbose lists all {len(rep['stages'])}"
    lines += ["", title + "):"]
    lines.extend(_table(*stage_rows(rep, picked, notable)))
    if verbose and rep.get("layers"):
        what = "operator type, summed over layers" if "model" in rep else "layer"
        lines += ["", f"per {what} (one rank per stage, summed over the stages it runs on):"]
        lines.extend(_table(*layer_rows(rep)))
    n = len(rep["assumptions"])
    if verbose:
        lines += ["", "assumptions:"] + [f"  - {a}" for a in rep["assumptions"]]
    else:
        top = top_assumptions(rep)
        lines += ["", f"assumptions that matter most ({len(top)} of {n}; --verbose lists all):"]
        keep = set(departures(rep))  # wrapped, never cut: they say what the run changed
        for a in top:
            if a in keep:
                lines += textwrap.wrap(a, MAX_LINE, initial_indent="  - ",
                                       subsequent_indent="    ")
            else:
                lines.append(f"  - {_clip(a, MAX_LINE - 4)}")
    return "\n".join(lines) + "\n"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    """Aligned columns: the first left-aligned, the others right-aligned."""
    widths = [max([len(head[i])] + [len(r[i]) for r in rows]) for i in range(len(head))]

    def fmt(r: list[str]) -> str:
        return ("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                                 enumerate(zip(r, widths, strict=True)))).rstrip()

    return [fmt(head)] + [fmt(r) for r in rows]

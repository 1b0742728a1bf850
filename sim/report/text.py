"""The human-readable terminal summary of a report (units in every header).

Sections: a headline table (iteration time, throughput and MFU when the report has them, bubble
fraction next to the ideal formula, exposed communication by group, which stage finishes last),
the per-stage breakdown (each row sums to the iteration time), per-layer totals, and every
assumption the run made.
"""

from __future__ import annotations

from typing import Any

GROUP_ORDER = ("TP", "EP", "PP", "DP", "DP_EP")


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def _groups(rep: dict[str, Any]) -> list[str]:
    """Groups with non-zero exposed time on some stage, in a fixed order."""
    seen = {g for s in rep["stages"] for g, v in s["exposed_comm_s"].items() if v > 0}
    return [g for g in GROUP_ORDER if g in seen] + sorted(seen - set(GROUP_ORDER))


def summary_rows(rep: dict[str, Any]) -> list[list[str]]:
    """Rows ``[quantity, value, unit, note]`` of the headline table."""
    it = rep["iteration_time_s"]
    stages = rep["stages"]
    n = max(len(stages), 1)
    rows = [["iteration time", _ms(it), "ms", ""]]
    if "tokens_per_s" in rep:
        rows.append(["throughput", f"{rep['tokens_per_s']:.1f}", "tokens/s", "whole cluster"])
    if "tflops_per_gpu" in rep:
        rows.append(["model FLOP rate per GPU", f"{rep['tflops_per_gpu']:.2f}", "TFLOP/s", ""])
    if "mfu" in rep:
        rows.append(["MFU", f"{rep['mfu'] * 100:.2f}", "%", "model FLOPs / peak"])
    rows.append(["bubble fraction", f"{rep['bubble_fraction']:.4f}", "fraction",
                 "mean over stages of pipeline bubble / pipeline busy time"])
    if "idle_fraction" in rep:
        rows.append(["idle fraction", f"{rep['idle_fraction']:.4f}", "fraction",
                     "mean over stages of idle time / iteration"])
    rows.append(["ideal bubble fraction", f"{rep['ideal_bubble_fraction']:.4f}", "fraction",
                 f"{rep['ideal_bubble_formula']}, p = {rep['pipeline_stages']}, M = "
                 f"{rep['microbatches']}" + (f", v = {rep['virtual_pipeline_size']}"
                                             if rep["virtual_pipeline_size"] > 1 else "")])
    for g in _groups(rep):
        mean = sum(s["exposed_comm_s"].get(g, 0.0) for s in stages) / n
        worst = max(stages, key=lambda s: (s["exposed_comm_s"].get(g, 0.0), -s["stage"]))
        rows.append([f"exposed {g} comm", _ms(mean), "ms",
                     f"mean over stages, {mean / it * 100 if it else 0:.1f}% of the iteration; "
                     f"max {_ms(worst['exposed_comm_s'][g])} ms on stage {worst['stage']}"])
    if stages:
        busiest = max(stages, key=lambda s: (it - s["bubble_s"], -s["stage"]))
        rows.append(["busiest stage", str(busiest["stage"]), "stage",
                     f"busy {_ms(it - busiest['bubble_s'])} ms (compute + optimizer + exposed "
                     "comm): the pipeline's bottleneck"])
        last = max(stages, key=lambda s: (s["finish_time_s"], -s["stage"]))
        rows.append(["last stage to finish", str(last["stage"]), "stage",
                     f"at {_ms(last['finish_time_s'])} ms; the others idle until then"])
    cp = rep.get("critical_path")
    if cp and cp.get("ranks"):
        top = cp["ranks"][0]
        waits = ", ".join(f"{g} {_ms(v)} ms" for g, v in cp["wait_s_by_group"].items() if v)
        rows.append(["critical path: most work", f"{_ms(top['work_s'])}", "ms",
                     f"on rank {top['rank']} (stage {top['stage']}); waits on the path: "
                     f"{waits or 'none'}"])
    if "healthy_iteration_time_s" in rep:
        rows.append(["healthy iteration time", _ms(rep["healthy_iteration_time_s"]), "ms",
                     "the same run without the faults"])
        rows.append(["slowdown from faults", _ms(rep["fault_slowdown_s"]), "ms",
                     "; ".join(rep.get("faults", []))])
    return rows


def stage_rows(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-stage table (ms), with a final mean row."""
    groups = _groups(rep)
    head = ["stage", "compute_ms", "optimizer_ms"] + [f"{g}_exposed_ms" for g in groups] + [
        "bubble_ms", "bubble_frac"]
    rows = []
    cols: list[list[float]] = [[] for _ in range(len(head) - 1)]
    for s in rep["stages"]:
        vals = [s["compute_s"], s["optimizer_s"]] + [s["exposed_comm_s"].get(g, 0.0)
                                                     for g in groups] + [s["bubble_s"]]
        rows.append([str(s["stage"])] + [_ms(v) for v in vals] + [f"{s['bubble_fraction']:.4f}"])
        for i, v in enumerate(vals + [s["bubble_fraction"]]):
            cols[i].append(v)
    if len(rows) > 1:
        means = [sum(c) / len(c) for c in cols]
        rows.append(["mean"] + [_ms(v) for v in means[:-1]] + [f"{means[-1]:.4f}"])
    return head, rows


def format_report(rep: dict[str, Any], *, max_layers: int = 20) -> str:
    """Render the report dict as aligned text tables."""
    par = rep["parallelism"]
    lines = [f"simrun {rep['simrun_version']}: {rep['workload']} on {rep['topology']}",
             f"layout: TP {par['tp']} x PP {par['pp']} x DP {par['dp']}"
             + (f" x CP {par['cp']}" if "cp" in par else "") + f" = {par['world_size']} "
             f"GPUs (EP {par['ep']}); schedule {rep['schedule']}, {rep['microbatches']} "
             "microbatches" + (f", {rep['virtual_pipeline_size']} chunks per stage"
                               if rep["virtual_pipeline_size"] > 1 else ""),
             ""]
    lines.extend(_table(["quantity", "value", "unit", "note"], summary_rows(rep), right={1}))
    head, rows = stage_rows(rep)
    lines += ["", "per stage (each row sums to the iteration time):"]
    lines.extend(_table(head, rows))
    if rep.get("layers"):
        lines.append("")
        lines.append("per layer (one rank per stage, summed over the stages it runs on):")
        comm_groups = sorted({g for e in rep["layers"] for g in e["exposed_comm_s"]})
        head = ["layer", "stages", "count", "forward_ms", "input_grad_ms", "weight_grad_ms"] + [
            f"{g}_exposed_ms" for g in comm_groups]
        rows = []
        for e in rep["layers"][:max_layers]:
            rows.append([e["name"], e["stages"], str(e["count"]), _ms(e["forward_s"]),
                         _ms(e["input_grad_s"]), _ms(e["weight_grad_s"])]
                        + [_ms(e["exposed_comm_s"].get(g, 0.0)) for g in comm_groups])
        lines.extend(_table(head, rows))
        if len(rep["layers"]) > max_layers:
            lines.append(f"  … {len(rep['layers']) - max_layers} more layers in the JSON report")
    lines.append("")
    lines.append("assumptions:")
    lines.extend(f"  - {a}" for a in rep["assumptions"])
    return "\n".join(lines) + "\n"


def _table(head: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    """Aligned columns: the first left-aligned, the others right-aligned (or only ``right``)."""
    widths = [max([len(head[i])] + [len(r[i]) for r in rows]) for i in range(len(head))]

    def align(i: int, c: str, w: int) -> str:
        if right is None:
            return c.ljust(w) if i == 0 else c.rjust(w)
        return c.rjust(w) if i in right else c.ljust(w)

    def fmt(r: list[str]) -> str:
        return ("  " + "  ".join(align(i, c, w) for i, (c, w) in
                                 enumerate(zip(r, widths, strict=True)))).rstrip()

    return [fmt(head)] + [fmt(r) for r in rows]

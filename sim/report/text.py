"""The human-readable terminal summary of a report (units in every header)."""

from __future__ import annotations

from typing import Any

GROUP_ORDER = ("TP", "PP", "DP", "EP", "DP_EP")


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def format_report(rep: dict[str, Any], *, max_layers: int = 20) -> str:
    """Render the report dict as aligned text tables."""
    par = rep["parallelism"]
    lines = []
    lines.append(f"simrun {rep['simrun_version']}: {rep['workload']} on {rep['topology']}")
    lines.append(
        f"layout: TP {par['tp']} x PP {par['pp']} x DP {par['dp']} = {par['world_size']} GPUs"
        f" (EP {par['ep']}); schedule {rep['schedule']}, {rep['microbatches']} microbatches"
        + (f", {rep['virtual_pipeline_size']} chunks per stage"
           if rep["virtual_pipeline_size"] > 1 else ""))
    lines.append(f"iteration time: {rep['iteration_time_s']:.6f} s")
    for key, label in (("tokens_per_s", "throughput (tokens/s)"), ("mfu", "MFU"),
                       ("tflops_per_gpu", "achieved TFLOP/s per GPU")):
        if key in rep:
            lines.append(f"{label}: {rep[key]:.4g}")
    lines.append(f"bubble fraction: {rep['bubble_fraction']:.4f} (ideal "
                 f"{rep['ideal_bubble_formula']} = {rep['ideal_bubble_fraction']:.4f})")
    groups = [g for g in GROUP_ORDER if any(s["exposed_comm_s"][g] > 0 for s in rep["stages"])]
    head = ["stage", "compute_ms", "optimizer_ms"] + [f"{g}_exposed_ms" for g in groups] + [
        "bubble_ms", "bubble_frac"]
    rows = []
    for s in rep["stages"]:
        rows.append([str(s["stage"]), _ms(s["compute_s"]), _ms(s["optimizer_s"])]
                    + [_ms(s["exposed_comm_s"][g]) for g in groups]
                    + [_ms(s["bubble_s"]), f"{s['bubble_fraction']:.4f}"])
    lines.append("")
    lines.append("per stage (each row sums to the iteration time):")
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


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i])
              for i in range(len(head))]
    fmt = lambda r: "  " + "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return [fmt(head)] + [fmt(r) for r in rows]

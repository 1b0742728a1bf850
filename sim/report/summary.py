"""The short summary a person reads first: headline numbers, the bottleneck in words, what
delayed a run with faults, and the assumptions that matter most for this run.

Everything here is derived from the report dict (docs/report-schema.md); nothing is added to the
JSON. Shares are means over stages, as fractions of the iteration time, so compute + optimizer +
exposed communication + idle time = 100% on every stage.
"""

from __future__ import annotations

from typing import Any

from sim.assumption import departs, explains, is_detail

GROUP_ORDER = ("TP", "CP", "EP", "ETP", "PP", "DP", "DP_EP", "EMB")
GROUP_WORDS = {"TP": "tensor-parallel", "CP": "context-parallel", "EP": "expert-parallel",
               "ETP": "expert tensor-parallel",
               "PP": "pipeline send/recv", "DP": "data-parallel gradient",
               "DP_EP": "expert data-parallel gradient", "EMB": "embedding-group gradient"}
# Which assumption lines explain each part of the iteration, and which say the run departs
# from its input: the typed fields of each line (sim.assumption), never its text


def ms(x_s: float) -> str:
    return f"{x_s * 1e3:.3f}"


def pct(part: float, whole: float) -> str:
    """``part / whole`` in percent, with a second decimal below 0.1%."""
    p = part / whole * 100 if whole else 0.0
    return f"{p:.1f}%" if p >= 0.1 or p == 0 else f"{p:.2f}%"


def groups(rep: dict[str, Any]) -> list[str]:
    """Groups with non-zero exposed time on some stage, in a fixed order."""
    seen = {g for s in rep["stages"] for g, v in s["exposed_comm_s"].items() if v > 0}
    return [g for g in GROUP_ORDER if g in seen] + sorted(seen - set(GROUP_ORDER))


def shares(rep: dict[str, Any]) -> dict[str, float]:
    """Mean over stages of each part of the iteration (compute, optimizer, idle, each group's
    exposed communication), as a fraction of the iteration time."""
    it = rep["iteration_time_s"] or 1.0
    st = rep["stages"]
    n = max(len(st), 1)
    out = {"compute": sum(s["compute_s"] for s in st) / n / it,
           "optimizer": sum(s["optimizer_s"] for s in st) / n / it,
           "idle": sum(s["bubble_s"] for s in st) / n / it}
    for g in groups(rep):
        out[g] = sum(s["exposed_comm_s"].get(g, 0.0) for s in st) / n / it
    return out


def headline(rep: dict[str, Any]) -> list[tuple[str, str]]:
    """``(quantity, value with unit and note)`` lines of the summary."""
    it = rep["iteration_time_s"]
    out = [("iteration time", f"{ms(it)} ms")]
    if "healthy_iteration_time_s" in rep:
        slow, healthy = rep["fault_slowdown_s"], rep["healthy_iteration_time_s"]
        out[0] = ("iteration time", f"{ms(it)} ms, {ms(slow)} ms ({pct(slow, healthy)}) "
                                    f"longer than the healthy {ms(healthy)} ms")
    if "tokens_per_s" in rep:
        out.append(("throughput", f"{rep['tokens_per_s']:.1f} tokens/s (whole cluster)"))
    if "mfu" in rep:
        out.append(_flop_rate(rep))
    mem = rep.get("memory")
    if mem and mem.get("peak_bytes"):
        out.append(_memory(mem))
    out.append(("bubble", _bubble(rep)))
    sh = shares(rep)
    comm = ", ".join(f"{g} {ms(sh[g] * it)} ms ({pct(sh[g], 1.0)})" for g in
                     sorted(groups(rep), key=lambda g: -sh[g]))
    out.append(("exposed comm", (comm + ", mean over stages") if comm else "none"))
    out.append(("bottleneck", bottleneck(rep)))
    return out


def _flop_rate(rep: dict[str, Any]) -> tuple[str, str]:
    hfu = f" / {rep['hfu'] * 100:.2f}%" if "hfu" in rep else ""
    peak = (f" of {rep['peak_tflops_per_gpu']:g} TFLOP/s peak" if "peak_tflops_per_gpu" in rep
            else "")
    return ("MFU" + (" / HFU" if hfu else ""),
            f"{rep['mfu'] * 100:.2f}%{hfu}{peak} ({rep['tflops_per_gpu']:.2f} model TFLOP/s "
            "per GPU)")


def _memory(mem: dict[str, Any]) -> tuple[str, str]:
    pk = mem["peak_bytes"]
    parts = ", ".join(f"{k.removesuffix('_bytes').replace('grads', 'gradients')} {v / 1e9:.1f}"
                      for k, v in pk.items() if k != "total_bytes")
    return ("memory per GPU",
            f"{pk['total_bytes'] / 1e9:.1f} of {mem['capacity_bytes'] / 1e9:.1f} GB "
            f"({pk['total_bytes'] / mem['capacity_bytes'] * 100:.0f}%) on stage "
            f"{mem['peak_stage']}: {parts} GB")


def _bubble(rep: dict[str, Any]) -> str:
    v = rep["virtual_pipeline_size"]
    idle = rep.get("idle_fraction", shares(rep)["idle"])
    b = rep["bubble_fraction"]
    # the pipeline bubble over the busy time is a ratio, not a share: above 1 (fewer
    # microbatches than stages) it is said as a multiple
    said = f"{b:.2f}× the busy time" if b >= 1 else f"{b:.4f} of the busy time"
    return (f"{said} (pipeline bubble; ideal {rep['ideal_bubble_formula']}"
            f" = {rep['ideal_bubble_fraction']:.4f}, p = {rep['pipeline_stages']}, "
            f"M = {rep['microbatches']}" + (f", v = {v}" if v > 1 else "")
            + f"); idle {idle * 100:.1f}% of the iteration (all waits for other stages)")


def _part_name(k: str) -> str:
    if k == "idle":
        return "idle time waiting for other stages"
    if k == "optimizer":
        return "the optimizer step"
    return f"exposed {GROUP_WORDS.get(k, k)} communication"


def bottleneck(rep: dict[str, Any]) -> str:
    """Where the iteration's time goes, in words."""
    sh = shares(rep)
    losses = sorted((k for k in sh if k != "compute" and sh[k] > 0.0005), key=lambda k: -sh[k])
    text = f"compute is {sh['compute'] * 100:.1f}% of the iteration" + _timed_by(rep)
    if losses:
        text += f"; the largest loss is {_part_name(losses[0])} ({sh[losses[0]] * 100:.1f}%)"
        if len(losses) > 1:
            text += f", then {_part_name(losses[1])} ({sh[losses[1]] * 100:.1f}%)"
    return text


def _timed_by(rep: dict[str, Any]) -> str:
    """`` (timed 96.6% by the measured kernel table, 3.4% by the roofline)`` for a generated
    program, the larger source first; empty for a workload file (its times are given)."""
    src = rep.get("compute_time_sources")
    if not src:
        return ""
    words = {"kernel_table": "the measured kernel table", "roofline": "the roofline",
             "transferred_table": "H100's measured kernel table transferred"}
    parts = [f"{v * 100:.1f}% by {words.get(k, k)}"
             for k, v in sorted(src.items(), key=lambda kv: (-kv[1], kv[0])) if v > 0]
    return f" (timed {', '.join(parts)})"


def changes(rep: dict[str, Any], healthy: dict[str, Any], k: int = 3) -> list[tuple[str, float]]:
    """The ``k`` parts of the iteration (compute, optimizer, idle, each group's exposed
    communication; means over stages) that changed most against the ``healthy`` run, as
    ``(part, change in seconds)``, largest change first; changes under 0.05% of the
    iteration are left out."""
    now, before = shares(rep), shares(healthy)
    it, it0 = rep["iteration_time_s"], healthy["iteration_time_s"]
    delta = {p: now.get(p, 0.0) * it - before.get(p, 0.0) * it0 for p in {*now, *before}}
    big = [p for p in delta if abs(delta[p]) >= 0.0005 * it]
    return [(p, delta[p]) for p in sorted(big, key=lambda p: (-abs(delta[p]), p))[:k]]


def _change_words(part: str, d_s: float) -> str:
    name = part if part in ("compute", "optimizer", "idle") else f"exposed {part}"
    return f"{name} {'+' if d_s >= 0 else '−'}{ms(abs(d_s))} ms"


def fault_story(rep: dict[str, Any], notable: list[dict[str, Any]],
                healthy: dict[str, Any] | None = None) -> list[str]:
    """Plain words on what delayed a run with faults, by how much, where the time went
    compared with the ``healthy`` run's report, and through which rank."""
    if "healthy_iteration_time_s" not in rep:
        return []
    slow = rep["fault_slowdown_s"]
    out = [f"what delayed it: {'; '.join(rep.get('faults', [])) or 'the faults'}; the "
           f"iteration takes {ms(slow)} ms ({pct(slow, rep['healthy_iteration_time_s'])}) "
           "longer."]
    moved = changes(rep, healthy) if healthy else []
    if moved:
        out.append("against the healthy run (means over stages): "
                   + ", ".join(_change_words(p, d) for p, d in moved) + ".")
    for row in notable:
        base = next((s for s in rep["stages"] if s["stage"] == row["stage"]), None)
        if base is not None and row["compute_s"] != base["compute_s"]:
            out.append(f"rank {row['rank']} (stage {row['stage']}) computes "
                       f"{ms(row['compute_s'])} ms against {ms(base['compute_s'])} ms on a "
                       f"healthy rank of its stage (rank {base['rank']}).")
    cp = rep.get("critical_path") or {}
    if cp.get("ranks"):
        top = cp["ranks"][0]
        waits = ", ".join(f"{g} {ms(v)} ms" for g, v in sorted(
            cp["wait_s_by_group"].items(), key=lambda kv: -kv[1]) if v)
        out.append(f"rank {top['rank']} (stage {top['stage']}) sets the pace: "
                   f"{ms(top['work_s'])} ms of its own work lie on the critical path"
                   + (f", which also waits on communication ({waits})." if waits else "."))
    return out


def departures(rep: dict[str, Any]) -> list[str]:
    """Assumptions that say the run departs from its input or warn (a header value that cannot
    be used, a topology field overridden with ``--set``, a physically doubtful topology, a
    layout simulated although it does not fit): always shown, whatever their number."""
    return [a.strip() for a in rep["assumptions"] if departs(a)]


def top_assumptions(rep: dict[str, Any], k: int = 3) -> list[str]:
    """Every :func:`departures` line, then the ``k`` assumptions behind the largest parts of the
    iteration (compute, the exposed communication of each group, idle time), largest part
    first; then the first listed."""
    sh = shares(rep)
    chosen: list[str] = departures(rep)
    k += len(chosen)
    for part in sorted(sh, key=lambda p: -sh[p]):
        a = _first_explaining(rep["assumptions"], part, chosen)
        if a is not None:
            chosen.append(a)
        if len(chosen) == k:
            return chosen
    for a in rep["assumptions"]:
        if len(chosen) == k:
            break
        if a not in chosen and not is_detail(a):
            chosen.append(a)
    return chosen


def _first_explaining(lines: list[str], part: str, chosen: list[str]) -> str | None:
    """The first line not yet ``chosen`` among those of the lowest rank that explain
    ``part`` (:attr:`sim.assumption.Assumption.explains`)."""
    ranks = sorted({explains(a)[part] for a in lines if part in explains(a)})
    for r in ranks:
        a = next((a for a in lines if explains(a).get(part) == r and a not in chosen), None)
        if a is not None:
            return a
    return None

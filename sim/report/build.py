"""Turn a :class:`~sim.engine.SimResult` into the report document (docs/report-schema.md).

Fixed top-level keys other tools rely on: ``iteration_time_s``, ``bubble_fraction``,
``pipeline_stages``, ``microbatches``, ``stages`` (one entry per stage, seconds) and
``assumptions`` (strings). Every number carries its unit in its key.

``bubble_fraction`` is the same quantity as the ideal formula: per stage, the pipeline bubble
(the pipeline's span — first scheduled op of any stage to last of any stage — minus the stage's
pipeline busy time) over that busy time (its scheduled forwards and backwards and the
communication exposed within them, i.e. its own schedule span less its waits for other
stages), averaged over stages. The data-parallel gradient reduction and the optimizer after
the schedule are not in it. ``ideal_bubble_fraction`` is ``(p−1)/M`` (GPipe, 1F1B) or
``(p−1)/(v·M)`` (interleaved).
``idle_fraction`` is all idle time (the bubble plus the wait for the slowest stage at the end)
over the iteration, averaged over stages.
"""

from __future__ import annotations

from typing import Any

from sim import __version__
from sim.comm import GroupKind
from sim.engine.critical import summarize, totals
from sim.engine.result import GROUPS, RankStats, SimResult
from sim.pipeline.schedules import ideal_bubble_formula, ideal_bubble_fraction

NS = 1e-9


def _own_etp(prog) -> bool:
    """The program's experts have a tensor-parallel size of their own (ETP ≠ TP)."""
    return prog.etp is not None and prog.etp != prog.tp


def _s(ns: int) -> float:
    return ns * NS


def build_report(result: SimResult, *, workload: str = "", topology: str = "",
                 extra_assumptions: list[str] | None = None,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report as a JSON-ready dict (deterministic key order)."""
    prog = result.program
    it = result.iteration_ns
    stages, fractions = _stage_rows(result)
    idle = [s["idle_fraction"] for s in stages]
    ideal = ideal_bubble_fraction(prog.schedule, prog.pp, prog.microbatches, prog.vpp)
    formula = ideal_bubble_formula(prog.schedule)
    layer_list = _layer_rows(result)
    assumptions = list(prog.assumptions) + list(result.network_notes) + list(
        extra_assumptions or [])
    mode = result.mode or ("per-rank" if result.per_rank else "symmetric")
    assumptions.append(f"simulation mode: {mode}")
    report: dict[str, Any] = {
        "schema": "simrun.report/1",
        "simrun_version": __version__,
        "workload": workload or prog.source,
        "topology": topology,
        "iteration_time_s": _s(it),
        "bubble_fraction": sum(fractions) / len(fractions) if fractions else 0.0,
        "ideal_bubble_fraction": ideal,
        "idle_fraction": sum(idle) / len(idle) if idle else 0.0,
        "ideal_bubble_formula": formula,
        "pipeline_stages": prog.pp,
        "microbatches": prog.microbatches,
        "virtual_pipeline_size": prog.vpp,
        "schedule": prog.schedule,
        "parallelism": {"tp": prog.tp, "pp": prog.pp, "dp": prog.dp // prog.cp, "ep": prog.ep,
                        "world_size": prog.world_size, **({"cp": prog.cp} if prog.cp > 1 else {}),
                        **({"etp": prog.etp} if _own_etp(prog) else {})},
        "pp_message_bytes": prog.pp_bytes,
        "simulation": {"mode": mode.split(":")[0],
                       "simulated_ranks": len(result.ranks), "events": result.events},
        "stages": stages,
        "critical_path": _critical(result),
        "layers": layer_list,
        **_compute_sources(prog),
        "assumptions": assumptions,
    }
    if extra:
        report.update(extra)
    return report


def _compute_sources(prog) -> dict[str, Any]:
    """``compute_time_sources``: the share of a generated program's compute time (summed
    over stages) each source timed: ``kernel_table`` and ``roofline`` (fractions summing to
    1); absent for a workload file, whose times are given."""
    src = prog.compute_sources
    total = sum(src.values()) if src else 0.0
    if total <= 0:
        return {}
    return {"compute_time_sources": {k: v / total for k, v in src.items()}}


def _stage_rows(result: SimResult) -> tuple[list[dict[str, Any]], list[float]]:
    """One row per stage (seconds) and each stage's bubble fraction."""
    stats = result.stage_stats()
    span = _pipeline_span(stats)
    stages = [rank_entry(st, result, span) for st in stats]
    return stages, [s["bubble_fraction"] for s in stages]


def _pipeline_span(stats: list[RankStats]) -> int:
    """The pipeline's span (ns): first scheduled op of any stage to the last of any stage."""
    if not stats:
        return 0
    return max(st.pipeline_end_ns for st in stats) - min(st.pipeline_start_ns for st in stats)


def rank_entry(st: RankStats, result: SimResult, span: int) -> dict[str, Any]:
    """One rank's breakdown in the shape of a ``stages`` entry (seconds); ``span``: the
    pipeline's span (ns, :func:`_pipeline_span` of the stage representatives)."""
    it = result.iteration_ns
    busy = st.pipeline_busy_ns
    bubble = span - busy
    host = {"host_wait_s": _s(st.host_wait_ns)} if st.host_wait_ns else {}
    return {
        "stage": st.stage,
        "rank": st.rank,
        "compute_s": _s(st.compute_ns),
        "optimizer_s": _s(st.optimizer_ns),
        "exposed_comm_s": {g.value: _s(st.exposed_comm_ns[g]) for g in GROUPS
                           if (g is not GroupKind.CP or result.program.cp > 1)
                           and (g is not GroupKind.ETP or _own_etp(result.program))},
        "bubble_s": _s(st.bubble_ns),
        **host,
        "pipeline_bubble_s": _s(bubble),
        "pipeline_busy_s": _s(busy),
        "bubble_fraction": bubble / busy if busy > 0 else 0.0,
        "idle_fraction": st.bubble_ns / it if it > 0 else 0.0,
        "finish_time_s": _s(st.end_ns),
    }


def notable_ranks(result: SimResult, limit: int = 3) -> list[dict[str, Any]]:
    """Rows (:func:`rank_entry`) of simulated ranks that are not their stage's representative
    but compute longer or shorter than it (a slow GPU) or carry the most work of the critical
    path, that one first; for the terminal report of runs with faults (not in the JSON)."""
    stats = result.stage_stats()
    reps = {s.stage: s for s in stats}
    stage = {s.rank: s.stage for s in result.ranks}
    top = summarize(result.critical_path, lambda r: stage.get(r, -1))["work_s_by_rank"]
    top_rank = top[0]["rank"] if top else None
    found = [s for s in result.ranks if s.rank != reps[s.stage].rank and (
        s.compute_ns != reps[s.stage].compute_ns or s.rank == top_rank)]
    found.sort(key=lambda s: (s.rank != top_rank,
                              -abs(s.compute_ns - reps[s.stage].compute_ns), s.rank))
    # each row's span includes the rank itself (a slow GPU may run past the representatives:
    # its busy time then exceeds their span, and its bubble fraction would be negative)
    return [rank_entry(s, result, _pipeline_span([*stats, s])) for s in found[:limit]]


def fault_context(result: SimResult, healthy: SimResult | None) -> dict[str, Any]:
    """For the terminal report of a run with faults (``healthy``: the same run on a healthy
    cluster): ``notable`` ranks (:func:`notable_ranks`) and the ``healthy`` run's report, to
    say what changed; empty without faults."""
    if healthy is None:
        return {}
    return {"notable": notable_ranks(result), "healthy": build_report(healthy)}


def _layer_rows(result: SimResult) -> list[dict[str, Any]]:
    """One row per layer name, summed over the stages that run it (seconds), in first-seen
    order."""
    layers: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for st in result.stage_stats():
        for name, ls in st.layers.items():
            if name not in layers:
                order.append(name)
                layers[name] = {"name": name, "stages": [], "count": 0, "forward_s": 0.0,
                                "input_grad_s": 0.0, "weight_grad_s": 0.0,
                                "exposed_comm_s": {}, "_ns": [0, 0, 0, {}]}
            e = layers[name]
            e["stages"].append(st.stage)
            e["count"] += ls.count
            acc = e["_ns"]
            acc[0] += ls.forward_ns
            acc[1] += ls.input_grad_ns
            acc[2] += ls.weight_grad_ns
            for g, ns in ls.comm_ns.items():
                acc[3][g] = acc[3].get(g, 0) + ns
    layer_list = []
    for name in order:
        e = layers[name]
        f, ig, wg, comm = e.pop("_ns")
        e["forward_s"], e["input_grad_s"], e["weight_grad_s"] = _s(f), _s(ig), _s(wg)
        e["exposed_comm_s"] = {g: _s(comm[g]) for g in sorted(comm)}
        e["stages"] = _stage_ranges(e["stages"])
        layer_list.append(e)
    return layer_list


def _critical(result: SimResult) -> dict[str, Any]:
    """Where the critical path spends its time: work per stage and rank, waits per group."""
    stage = {s.rank: s.stage for s in result.ranks}
    size = {s.rank: s.represents for s in result.ranks}
    t = result.critical_totals or totals(result.critical_path)
    s = summarize(t, lambda r: stage.get(r, -1))
    by_stage: dict[int, float] = {}
    for e in s["work_s_by_rank"]:
        by_stage[e["stage"]] = by_stage.get(e["stage"], 0.0) + e["work_s"]
        e["stands_for_ranks"] = size.get(e["rank"], 1)
    last = t.last_rank
    return {
        "ends_on_rank": last,
        "ends_on_stage": stage.get(last, -1),
        "work_s_by_stage": {str(k): by_stage[k] for k in sorted(by_stage)},
        "wait_s_by_group": s["comm_s"],
        "ranks": s["work_s_by_rank"][:16],
        "segments": s["segments"],
    }


def _stage_ranges(stages: list[int]) -> str:
    stages = sorted(set(stages))
    if not stages:
        return ""
    if stages == list(range(stages[0], stages[-1] + 1)) and len(stages) > 1:
        return f"{stages[0]}-{stages[-1]}"
    return ",".join(map(str, stages))

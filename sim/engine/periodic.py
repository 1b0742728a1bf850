"""A pipeline of identical microbatches repeats itself: three short runs give the long one.

With ``M`` identical microbatches, a pipeline schedule is a warm-up, a steady state that
repeats every ``k`` microbatches (one round of every stage, ``k`` = the pipeline size, or the
interleaved schedule's microbatch group), and a cool-down (the last microbatches' backwards,
the gradient reductions, the optimizer). Adding ``k`` microbatches adds one steady period:
every integer the engine counts grows by the same amount.

:func:`extrapolate` takes the results of the same run with ``M₁``, ``M₁ + k`` and ``M₁ + 2k``
microbatches (``M₁ ≡ M`` mod ``k``, past the warm-up: :func:`short_counts`, which also gives
the window one period later, tried when the first does not step evenly), requires every
counted integer's two differences to be *equal* and everything else (names, keys, notes) to be
identical — the run is then periodic in those counts — and extrapolates the integers to ``M``
exactly (integers, ns). Anything that differs returns ``None``: the caller simulates the full
run. Used by every model run, a sweep's layouts included (:mod:`sim.scenario.periodic_run`,
``full``: everything its report reads: per-layer totals, the critical path's totals,
interference counts); tests compare it with the full simulation to the ns and the byte.
"""

from __future__ import annotations

from dataclasses import replace

from sim.comm import GroupKind
from sim.engine.critical import CriticalTotals, totals
from sim.engine.result import LayerStats, RankStats, SimResult

MIN_SAVING = 1.5
"""The shortcut is tried only when the first three short runs simulate at most 1/MIN_SAVING of
the microbatches of the full run (the fourth, where needed, is always cheaper than the full
run it saves)."""

VALIDATE_TOLERANCE = 3e-3
"""``simrun validate``'s periodic tolerance (:func:`slack_ns`). Where blocking collectives
share links with asynchronous transfers (an NVL72 rack's NVLink domain: TP beside PP and DP),
a pipeline repeats itself only up to a few ns per transfer, and the short runs' per-rank
integers disagree by up to about 10⁻³ of a period's iteration time. Each is then extended by
the mean of its two differences (:mod:`sim.scenario.periodic_run` keeps only the iteration
and the per-rank integers, what a validation row reads). Measured against the full
simulation (``tests/test_periodic_tolerance.py``, a 30-layer Llama 3.1 405B on 128 GB300
GPUs, TP 2 PP 4 CP 2 VPP 4): iteration 0.11% short, a tenth of a point of a case's error;
each validation row says how it was simulated."""

_RANK_INTS = ("rank", "stage", "represents", "compute_ns", "optimizer_ns", "bubble_ns",
              "host_wait_ns", "end_ns", "pipeline_start_ns", "pipeline_end_ns",
              "pipeline_wait_ns")
_LAYER_INTS = ("forward_ns", "input_grad_ns", "weight_grad_ns", "count")


def period_of(pp: int, group: int | None, schedule_type) -> int:
    """Microbatches of one steady period: the interleaved schedule's microbatch group
    ``group`` (default the pipeline size ``pp``), else the pipeline size; twice it for
    DualPipe (microbatches in pairs, one from each end: the bidirectional schedule)."""
    k = group or pp
    return 2 * k if schedule_type.bidirectional else k


def short_counts(m: int, k: int, pp: int) -> tuple[int, int, int, int] | None:
    """``(M₀, M₀ + k, M₀ + 2k, M₀ + 3k)`` with ``M₀ ≡ m`` (mod ``k``) and ``M₀ ≥ 2·pp`` (the
    warm-up and the cool-down of every schedule here span under ``2·pp`` microbatches), or
    ``None`` when the first three runs would not save ``MIN_SAVING`` over ``m``.

    The first three runs are tried first; where their integers do not step by equal
    differences (the pipeline has not settled into its period within ``M₀``), the fourth is
    simulated and the last three are tried (``M₀ + k ≥ 2·pp + k``: a whole steady period
    beside the warm-up and the cool-down)."""
    m0 = m % k
    while m0 < 2 * pp:
        m0 += k
    counts = (m0, m0 + k, m0 + 2 * k, m0 + 3 * k)
    if counts[3] > m or sum(counts[:3]) * MIN_SAVING > m:
        return None
    return counts


def later_windows(counts: tuple[int, ...], m: int) -> tuple[int, ...]:
    """With a tolerance (``simrun validate``): ``counts`` followed by further runs one period
    apart while all the short runs together simulate no more microbatches than the full run
    of ``m``, each giving one more window to try. A pipeline whose transfers share links with
    blocking collectives settles into its period gradually (the windows' disagreement shrinks
    with ``M₀``); a later window costs one short run, and if none steps within the tolerance
    the microbatches simulated are at most twice the full run's."""
    out = list(counts)
    k = counts[1] - counts[0]
    while sum(out) + out[-1] + k <= m:
        out.append(out[-1] + k)
    return tuple(out)


def _flatten(res: SimResult, full: bool) -> tuple[tuple, list[int]]:
    """``(shape, integers)`` of ``res``: the integers are extrapolated, the shape (keys,
    names, notes) must be identical. ``full``: also per-layer totals, the critical path's
    totals and the interference counts (what a run's report reads)."""
    ints = [res.iteration_ns, res.events]
    shape: list = [len(res.ranks)]
    for st in res.ranks:
        ints += [getattr(st, f) for f in _RANK_INTS]
        ints += [st.exposed_comm_ns[g] for g in GroupKind]
        if full:
            shape.append(tuple((name, tuple(ls.comm_ns)) for name, ls in st.layers.items()))
            for ls in st.layers.values():
                ints += [getattr(ls, f) for f in _LAYER_INTS] + list(ls.comm_ns.values())
    if full:
        t = res.critical_totals or totals(res.critical_path)
        shape += [tuple(t.work_ns), tuple(t.comm_ns), t.last_rank, res.per_rank, res.mode,
                  tuple(res.nccl_ctas.items())]
        ints += [*t.work_ns.values(), *t.comm_ns.values(), t.segments, res.beside_compute_ns]
    return tuple(shape), ints


def _steps_agree(a: list[int], b: list[int], c: list[int], slack: int) -> bool:
    """Whether every integer's two differences agree within ``slack`` (0: exactly)."""
    if slack <= 0:
        return all(y - x == z - y for x, y, z in zip(a, b, c, strict=True))
    return all(abs((z - y) - (y - x)) <= slack for x, y, z in zip(a, b, c, strict=True))


def extrapolate_counts(counts: list[dict], n: int, slack: int = 0) -> dict | None:
    """``counts[0]`` ``n`` periods on, when the three dicts have the same keys in the same
    order and every value steps by equal differences (within ``slack``: extended by their
    mean, rounded down); else ``None``."""
    a, b, c = counts
    if not list(a) == list(b) == list(c):
        return None
    keys = list(a)
    if not _steps_agree([a[k] for k in keys], [b[k] for k in keys], [c[k] for k in keys],
                        slack):
        return None
    return {k: c[k] + (n - 2) * (c[k] - a[k]) // 2 for k in keys}


def slack_ns(results: list[SimResult], tolerance: float) -> int:
    """The disagreement allowed between two periods' differences of any counted integer:
    ``tolerance`` × the iteration's growth over the last period, in ns (0: exact). The
    event count is held to the same number (it only bounds it loosely: events per period
    are far fewer than its ns)."""
    if tolerance <= 0.0:
        return 0
    return int(tolerance * abs(results[2].iteration_ns - results[1].iteration_ns))


def extrapolate(results: list[SimResult], n: int, full: bool = False,
                tolerance: float = 0.0) -> SimResult | None:
    """The result ``n`` periods after ``results[0]`` when the counted integers of the three
    results step by equal differences (and, ``full``, everything else but the network's
    lines is identical: they are the caller's, from the network's counters), else ``None``.
    ``tolerance`` > 0: the two differences of every integer may disagree by up to
    :func:`slack_ns` (a pipeline periodic but for ns-scale jitter of contended transfers);
    each integer is then extended by the mean of its two differences, rounded down (with
    equal differences: exactly).
    Spans are never kept; the critical path is kept as its totals only."""
    flat = [_flatten(r, full) for r in results]
    (sa, a), (sb, b), (sc, c) = flat
    if not (sa == sb == sc and len(a) == len(b) == len(c)):
        return None
    if not _steps_agree(a, b, c, slack_ns(results, tolerance)):
        return None
    v = iter([z + (n - 2) * (z - x) // 2 for x, z in zip(a, c, strict=True)])
    first = results[0]
    iteration, events = next(v), next(v)
    ranks = []
    for st in first.ranks:
        vals = {f: next(v) for f in _RANK_INTS}
        exposed = {g: next(v) for g in GroupKind}
        layers = {}
        if full:
            for name, ls in st.layers.items():
                lv = {f: next(v) for f in _LAYER_INTS}
                layers[name] = LayerStats(**lv, comm_ns={g: next(v) for g in ls.comm_ns})
        ranks.append(RankStats(**vals, exposed_comm_ns=exposed, layers=layers))
    out = replace(first, ranks=ranks, iteration_ns=iteration, events=events, spans=[],
                  critical_path=[], critical_totals=None,
                  periodic_runs=tuple((r.program.microbatches, r.events) for r in results))
    if full:
        t = first.critical_totals or totals(first.critical_path)
        work = {r: next(v) for r in t.work_ns}
        comm = {g: next(v) for g in t.comm_ns}
        segments, beside = next(v), next(v)
        out = replace(out, critical_totals=CriticalTotals(work, comm, segments, t.last_rank),
                      beside_compute_ns=beside)
    return out

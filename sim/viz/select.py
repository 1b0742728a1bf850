"""Which simulated ranks a trace or a timeline plot shows (``--trace-ranks``).

``stage-reps`` (default): one rank per pipeline stage — the rank the report shows for that
stage (in symmetric mode the only simulated rank of the stage; with ``--per-rank`` the rank of
the stage that finished last). ``all``: every simulated rank. ``0,8,16`` (or ranges ``0-7``):
exactly those global ranks; each must have been simulated.
"""

from __future__ import annotations

from sim.engine.result import SimResult
from sim.errors import UsageError
from sim.limits import MAX_TRACE_RANKS, parse_int

FLAG = "--trace-ranks"
OPTION = "trace_ranks"  # errors name the option (the CLI, its flag)


def parse_rank_spec(spec: str | None) -> str | tuple[int, ...]:
    """Check the syntax of a ``--trace-ranks`` value: ``'stage-reps'``, ``'all'`` or ranks."""
    text = (spec or "stage-reps").strip().lower()
    if text in ("stage-reps", "all"):
        return text
    ranks: list[int] = []
    for part in text.split(","):
        lo_text, dash, hi_text = part.partition("-")
        lo = parse_int(lo_text.strip())
        hi = parse_int(hi_text.strip()) if dash else lo
        if lo is None or hi is None or hi < lo:
            raise UsageError(f"expected 'stage-reps', 'all' or a list of ranks like 0,8,16 or "
                             f"0-7, got {spec!r}", field=OPTION)
        count = len(ranks) + hi - lo + 1  # checked before the list is built
        if count > MAX_TRACE_RANKS:
            raise UsageError(f"lists {count:,} ranks or more; at most {MAX_TRACE_RANKS:,} "
                             "(simrun's work budget)", field=OPTION)
        ranks.extend(range(lo, hi + 1))
    return tuple(dict.fromkeys(ranks))  # drop repeats, keep order


def select_ranks(result: SimResult, spec: str | tuple[int, ...] | None = None) -> list[int]:
    """The simulated ranks to show, ordered by (stage, rank)."""
    parsed = parse_rank_spec(spec) if spec is None or isinstance(spec, str) else spec
    stage_of = {r.rank: r.stage for r in result.ranks}
    if parsed == "stage-reps":
        chosen = [st.rank for st in result.stage_stats()]
    elif parsed == "all":
        chosen = list(stage_of)
    else:
        missing = [r for r in parsed if r not in stage_of]
        if missing:
            sim = sorted(stage_of)
            shown = ", ".join(map(str, sim[:16])) + (" …" if len(sim) > 16 else "")
            hint = "" if result.per_rank else "; only one rank per stage is simulated " \
                                              "in symmetric mode, use --per-rank for others"
            raise UsageError(f"rank(s) {', '.join(map(str, missing))} were not simulated "
                             f"(simulated: {shown}){hint}", field=OPTION)
        chosen = list(parsed)
    return sorted(chosen, key=lambda r: (stage_of[r], r))

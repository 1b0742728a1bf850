"""The trace/plot flags of ``simrun`` (registered and written here; ``sim.cli`` calls these).

- ``--trace PATH``: Chrome trace-event JSON (``.json``, or ``.json.gz`` compressed) for
  ui.perfetto.dev / chrome://tracing;
- ``--trace-ranks RANKS``: which simulated ranks the trace and the timeline show;
- ``--plot PATH``: pipeline timeline figure (``.png``, ``.svg`` or ``.pdf``);
- ``--breakdown-plot PATH``: stacked bar per stage (compute / optimizer / exposed comm / bubble).

Spans are only recorded (``simulate(..., record_spans=True)``) when ``--trace`` or ``--plot``
is given: :func:`wants_spans`. matplotlib is imported only when a figure is written.
"""

from __future__ import annotations

import argparse
from typing import Any

from sim.engine.result import SimResult
from sim.placement import Placement


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the timeline/plot flags on ``parser``."""
    g = parser.add_argument_group("timelines and plots")
    g.add_argument("--trace", metavar="PATH",
                   help="write a Chrome trace-event JSON of the iteration (open it in "
                        "ui.perfetto.dev or chrome://tracing): one process per stage, one track "
                        "per stream, times in µs; a .gz suffix compresses it")
    g.add_argument("--trace-ranks", metavar="RANKS", default="stage-reps",
                   help="ranks shown by --trace and --plot: 'stage-reps' (one rank per stage, "
                        "the one in the report), 'all' (every simulated rank), or global ranks "
                        "like 0,8,16 or 0-7 (other than stage representatives need --per-rank) "
                        "(default: %(default)s)")
    g.add_argument("--force", action="store_true",
                   help="write a --trace estimated over 200 MB (refused by default; the "
                        "estimate counts the events of the ranks shown)")
    g.add_argument("--plot", metavar="PATH",
                   help="draw the pipeline timeline (one row per stage, time in ms) to a .png, "
                        ".svg or .pdf file")
    g.add_argument("--breakdown-plot", metavar="PATH",
                   help="draw a stacked bar per stage of compute / optimizer / exposed "
                        "communication / bubble (ms) to a .png, .svg or .pdf file")


def check_output_arguments(args: argparse.Namespace, placement: Placement | None = None,
                           per_rank: bool = False,
                           simulated: tuple[int, ...] | None = None) -> None:
    """Reject bad values before the simulation runs (one-line usage errors).

    With ``placement``, explicit ``--trace-ranks`` must be ranks that will be simulated
    (``simulated``; default one representative per stage).
    """
    from sim.errors import UsageError
    from sim.viz.mpl import figure_format
    from sim.viz.select import FLAG, parse_rank_spec

    spec = parse_rank_spec(args.trace_ranks)
    if placement is not None and isinstance(spec, tuple):
        if per_rank:
            bad = [r for r in spec if r >= placement.world_size]
            if bad:
                raise UsageError(f"rank(s) {', '.join(map(str, bad))} do not exist (the layout "
                                 f"has {placement.world_size} ranks)", field=FLAG)
        else:
            reps = simulated if simulated is not None else placement.stage_representatives
            bad = [r for r in spec if r not in reps]
            if bad:
                shown = ",".join(map(str, reps))
                raise UsageError(f"rank(s) {', '.join(map(str, bad))} are not simulated in "
                                 f"symmetric mode (simulated ranks: {shown}); add --per-rank "
                                 "to simulate every rank", field=FLAG)
    if args.plot is not None:
        figure_format(args.plot, "--plot")
    if args.breakdown_plot is not None:
        figure_format(args.breakdown_plot, "--breakdown-plot")
    from sim.outputs import check_output_path

    for path, flag in ((args.trace, "--trace"), (args.plot, "--plot"),
                       (args.breakdown_plot, "--breakdown-plot")):
        if path is not None:  # fail before a long simulation, not after it
            check_output_path(path, flag)


def wants_spans(args: argparse.Namespace) -> bool:
    """True if the run must record spans (a trace or a timeline was requested)."""
    return bool(args.trace or args.plot)


def check_trace_size(args: argparse.Namespace, prog, placement: Placement, per_rank: bool,
                     simulated: tuple[int, ...]) -> None:
    """Refuse a ``--trace`` estimated over 200 MB without ``--force`` (before simulating)."""
    if args.trace:
        from sim.viz.select import parse_rank_spec
        from sim.viz.trace_size import check_trace_size as check

        check(prog, parse_rank_spec(args.trace_ranks), placement, per_rank, simulated,
              args.force)


def write_outputs(args: argparse.Namespace, result: SimResult, report: dict[str, Any], *,
                  placement: Placement | None = None, gpus_per_node: int | None = None) -> None:
    """Write every requested trace / figure (each atomically)."""
    if args.trace:
        from sim.viz.trace import trace_chunks, write_trace

        write_trace(args.trace, trace_chunks(result, ranks=args.trace_ranks, placement=placement,
                                             gpus_per_node=gpus_per_node, report=report))
    if args.plot:
        from sim.viz.timeline import plot_timeline

        plot_timeline(result, args.plot, ranks=args.trace_ranks, report=report)
    if args.breakdown_plot:
        from sim.viz.breakdown import plot_breakdown

        plot_breakdown(report, args.breakdown_plot)

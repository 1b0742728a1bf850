"""The traces and figures of one run (:class:`~sim.scenario.OutputOptions`), checked before
the simulation and written after it.

- ``--trace PATH``: Chrome trace-event JSON (``.json``, or ``.json.gz`` compressed) for
  ui.perfetto.dev / chrome://tracing;
- ``--trace-ranks RANKS``: which simulated ranks the trace and the timeline show;
- ``--plot PATH``: pipeline timeline figure (``.png``, ``.svg`` or ``.pdf``);
- ``--breakdown-plot PATH``: stacked bar per stage (compute / optimizer / exposed comm / bubble).

Spans are only recorded (``simulate(..., record_spans=True)``) when ``--trace`` or ``--plot``
is given (``OutputOptions.wants_spans``). matplotlib is imported only when a figure is
written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.engine.result import SimResult
from sim.errors import UsageError
from sim.files.outputs import check_output_dir, check_output_path
from sim.parallel.placement import Placement
from sim.viz.select import FLAG, parse_rank_spec

if TYPE_CHECKING:
    from sim.scenario.options import OutputOptions


def check_figure_outputs(opts: OutputOptions, placement: Placement | None = None,
                         per_rank: bool = False,
                         simulated: tuple[int, ...] | None = None) -> None:
    """Reject bad values before the simulation runs (one-line usage errors).

    With ``placement``, explicit ``--trace-ranks`` must be ranks that will be simulated
    (``simulated``; default one representative per stage).
    """
    spec = parse_rank_spec(opts.trace_ranks)
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
    if opts.plot is not None or opts.breakdown_plot is not None:
        from sim.viz.mpl import figure_format
    if opts.plot is not None:
        figure_format(opts.plot, "--plot")
    if opts.breakdown_plot is not None:
        figure_format(opts.breakdown_plot, "--breakdown-plot")
    kineto = opts.trace_format == "kineto"
    for path, flag in ((None if kineto else opts.trace, "--trace"), (opts.plot, "--plot"),
                       (opts.breakdown_plot, "--breakdown-plot")):
        if path is not None:  # fail before a long simulation, not after it
            check_output_path(path, flag)
    for path, flag in ((opts.trace if kineto else None, "--trace"), (opts.chakra, "--chakra")):
        if path is not None:
            check_output_dir(path, flag)


def write_figures(opts: OutputOptions, result: SimResult, report: dict[str, Any], *,
                  placement: Placement | None = None, gpus_per_node: int | None = None) -> None:
    """Write every requested trace / figure (each atomically)."""
    if opts.chakra:  # the Chakra writer (and its optional protobuf schema) loads only here
        from sim.workload.chakra_write import write_chakra

        write_chakra(opts.chakra, result.program)
    if opts.trace and opts.trace_format == "kineto":
        from sim.viz.kineto import write_kineto

        write_kineto(opts.trace, result, ranks=opts.trace_ranks,
                     gpu=str(report.get("gpu") or "GPU"))
    elif opts.trace:
        from sim.viz.trace import trace_chunks, write_trace

        # streamed rank by rank: memory stays bounded for a trace of every rank
        write_trace(opts.trace, trace_chunks(result, ranks=opts.trace_ranks, placement=placement,
                                             gpus_per_node=gpus_per_node, report=report))
    if opts.plot:  # the plotting modules load only for a figure
        from sim.viz.timeline import plot_timeline

        plot_timeline(result, opts.plot, ranks=opts.trace_ranks, report=report,
                      window_ms=opts.plot_window_ms, microbatches=opts.plot_microbatches)
    if opts.breakdown_plot:
        from sim.viz.breakdown import plot_breakdown

        plot_breakdown(report, opts.breakdown_plot)

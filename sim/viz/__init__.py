"""Timelines, traces and plots of a simulated iteration.

Nothing here imports matplotlib at import time: the plotting modules import it lazily inside
the functions that draw, so ``simrun`` start-up stays fast when no figure is requested.

- :mod:`sim.viz.select`: which simulated ranks a trace or plot shows (``--trace-ranks``).
- :mod:`sim.viz.boxes`: the data behind the timeline plot (merged per-op boxes), pure Python.
- :mod:`sim.viz.trace`: Chrome trace-event JSON (Perfetto, chrome://tracing).
- :mod:`sim.viz.timeline`: the timeline figure (matplotlib, Agg).
- :mod:`sim.viz.breakdown`: stacked per-stage breakdown and sweep ranking/heatmap figures.
- :mod:`sim.viz.cli`: the ``--trace``/``--plot``/``--breakdown-plot`` flags.
"""

"""Parallel-layout sweeps: enumerate, check memory, simulate, rank (docs/sweeps.md).

- :mod:`sim.sweep.space`: :class:`Layout`, :class:`Training`, :func:`enumerate_layouts`.
- :mod:`sim.sweep.evaluate`: :func:`evaluate` one layout → a flat result row (never raises).
- :mod:`sim.sweep.runner`: :func:`run_tasks` in-process, on local processes or on Dask.
- :mod:`sim.sweep.store`: the append-only results file and resuming.
- :mod:`sim.sweep.output`: ranking, table, CSV/JSON/plots.
- :mod:`sim.sweep.cli`: ``simrun sweep``.
"""

from sim.sweep.evaluate import SweepContext, evaluate
from sim.sweep.runner import run_tasks
from sim.sweep.space import Layout, Space, Training, enumerate_layouts

__all__ = ["Layout", "Space", "SweepContext", "Training", "enumerate_layouts", "evaluate",
           "run_tasks"]

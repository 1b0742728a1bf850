"""Parallel-layout sweeps: enumerate, check memory, simulate, rank (docs/sweeps.md).

- :mod:`sim.sweep.space`: :class:`SweepPoint`, :class:`Space`, :func:`enumerate_layouts`.
- :mod:`sim.sweep.evaluate`: :func:`evaluate` one layout → a flat result row (never raises).
- :mod:`sim.sweep.runner`: :func:`run_tasks` in-process, on local processes or on Dask.
- :mod:`sim.sweep.store`: the append-only results file and resuming.
- :mod:`sim.sweep.output`: ranking, table, CSV/JSON/plots.
- :mod:`sim.sweep.driver`: one whole sweep (``simrun sweep``: :mod:`sim.cli.sweep`).
"""

from sim.parallel.config import Training
from sim.sweep.evaluate import SweepContext, evaluate
from sim.sweep.runner import run_tasks
from sim.sweep.space import Space, SweepPoint, enumerate_layouts

__all__ = ["Space", "SweepContext", "SweepPoint", "Training", "enumerate_layouts", "evaluate",
           "run_tasks"]

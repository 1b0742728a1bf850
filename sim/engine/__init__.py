"""The SimPy engine: times a :class:`~sim.program.pipeline.PipelineProgram` on a network."""

from sim.engine.core import simulate
from sim.engine.result import RankStats, SimResult, Span

__all__ = ["simulate", "SimResult", "RankStats", "Span"]

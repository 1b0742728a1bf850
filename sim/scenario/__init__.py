"""One simulated run from typed inputs to result and report (see :mod:`sim.scenario.run`).

:mod:`sim.scenario.options` holds the option dataclasses; :mod:`sim.scenario.model_run` turns a
model spec and a requested layout into a program; :mod:`sim.scenario.run` is the pipeline;
:mod:`sim.scenario.simulate` simulates one layout of a model from objects (a sweep's layouts,
``simrun validate``'s cases) with the single run's steps.
"""

from sim.scenario.model_run import ModelRun, model_run, parallel_config
from sim.scenario.options import (
    FaultOptions,
    ModelInput,
    NetworkOptions,
    OutputOptions,
    Scenario,
    SimulationOptions,
    WorkloadInput,
)
from sim.scenario.run import (
    ModelOutcome,
    ScenarioResult,
    network_of,
    placement_of,
    run_and_write,
    run_scenario,
    workload_program,
    write_figures_of,
    write_report,
)

__all__ = [
    "FaultOptions", "ModelInput", "ModelOutcome", "ModelRun", "NetworkOptions", "OutputOptions",
    "Scenario", "ScenarioResult", "SimulationOptions", "WorkloadInput", "model_run",
    "network_of", "parallel_config", "placement_of", "run_and_write", "run_scenario",
    "workload_program", "write_figures_of", "write_report",
]

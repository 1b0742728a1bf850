"""One simulated run from typed inputs to result and report (see :mod:`sim.scenario.steps`).

:mod:`sim.scenario.options` holds the option dataclasses; :mod:`sim.scenario.model_run` turns
a model spec and a requested layout into a program; :mod:`sim.scenario.steps` is the pipeline
every run goes through (``prepare`` → ``simulate`` → ``report``, chained by ``steps.run``);
:mod:`sim.scenario.run` runs a :class:`Scenario` of paths (``simrun``) through it.
"""

from sim.scenario.model_run import (
    ModelFit,
    ModelRun,
    fit_model,
    model_run,
    model_run_of,
    parallel_config,
)
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
    ScenarioResult,
    prepare_scenario,
    run_and_write,
    run_scenario,
    workload_program,
    write_figures_of,
    write_report,
)
from sim.scenario.steps import (
    DETERMINISTIC,
    HEALTHY,
    Outcome,
    Prepared,
    Variant,
    jitter_sample,
    network_of,
    placement_of,
    prepare,
)

__all__ = [
    "DETERMINISTIC", "HEALTHY", "FaultOptions", "ModelFit", "ModelInput", "ModelRun",
    "NetworkOptions", "Outcome", "OutputOptions", "Prepared", "Scenario", "ScenarioResult",
    "SimulationOptions", "Variant", "WorkloadInput", "fit_model", "jitter_sample", "model_run",
    "model_run_of", "network_of", "parallel_config", "placement_of", "prepare",
    "prepare_scenario", "run_and_write", "run_scenario",
    "workload_program", "write_figures_of", "write_report",
]

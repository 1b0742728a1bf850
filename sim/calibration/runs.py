"""Measured runs to calibrate on: the cases of a ``simrun validate`` file
(:mod:`sim.validation.cases`) predicted under given knobs, through the same stages as
``simrun validate`` (model spec + layout → generated program → engine on the topology)."""

from __future__ import annotations

import math
from functools import partial

from sim.calibration.fit import MeasuredRun
from sim.calibration.knobs import Knobs, calibrated_topology
from sim.models.compute_setup import resolve_compute
from sim.models.vocab.spec import load_model
from sim.scenario import steps
from sim.scenario.model_run import fit_model, model_run_of
from sim.scenario.options import NetworkOptions
from sim.topology import load_topology
from sim.validation.cases import Case


def case_topology(case: Case):
    """The topology of ``case`` with as many nodes as it needs (as ``simrun validate``)."""
    probe = load_topology(case.topology_path)
    nodes = max(1, math.ceil(case.par.world_size / probe.gpus_per_node))
    return load_topology(case.topology_path, nodes=nodes)


def predict_case(case: Case, knobs: Knobs) -> float:
    """The predicted iteration time (s) of ``case`` under ``knobs`` (neutral knobs: the time
    ``simrun validate`` predicts)."""
    topo = calibrated_topology(case_topology(case), knobs.network_busbw_factor)
    setup = resolve_compute(topo.gpu)
    setup.knobs = None if knobs.compute_neutral() else knobs
    run = model_run_of(fit_model(load_model(case.model_path), case.par, topo), topo,
                       compute=setup, ignore_memory=True)
    prepared = steps.prepare(run.program, topo,
                             network=NetworkOptions(nvls_enable=case.nvls_enable), model_run=run)
    return float(steps.run(prepared).report["iteration_time_s"])


def case_run(case: Case, file: str) -> MeasuredRun:
    """``case`` of validation file ``file`` as a run to calibrate on."""
    return MeasuredRun(case.name, case.measured_s, partial(predict_case, case),
                       f"case {case.name!r} of {file} (measured {case.measured_s:.4g} s per "
                       "iteration)")

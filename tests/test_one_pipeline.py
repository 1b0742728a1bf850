"""The one run pipeline (sim/scenario/steps.py: prepare → simulate → report): the jitter
samples run the deterministic run's network whatever the MoE token dispatcher, and a sweep's
layout and a validation case predict exactly the single run's iteration time (ns), so the
paths cannot drift apart again."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from sim.cli import build_parser, main
from sim.models.vocab.spec import load_model
from sim.parallel.config import Training
from sim.parallel.layout import LayoutRequest
from sim.scenario import ModelInput, NetworkOptions, Scenario, run_scenario, steps
from sim.sweep.evaluate import SweepContext, evaluate
from sim.sweep.space import SweepPoint
from sim.topology import load_topology
from sim.validation.cases import load_cases, run_case

MODELS = ROOT / "workloads" / "models"
TOPOS = ROOT / "topologies"
DISPATCHERS = next(a.choices for a in build_parser()._actions
                   if "--moe-token-dispatcher-type" in a.option_strings)


def test_every_dispatcher_is_covered():
    assert set(DISPATCHERS) >= {"alltoall", "flex"}


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_jitter_samples_run_the_deterministic_network(dispatcher, monkeypatch, tmp_path):
    """MoE EP 4 across both nodes of tiny-2x2, ``--jitter 1e-7 --samples 2``: every network
    the run builds (the deterministic run's, then one per sample) gets the same options —
    with ``flex`` the hierarchical all-to-all of DeepEP — so at a CV of 1e-7 the samples
    differ from the deterministic run by the noise only: mean slowdown within 1e-6 of 1
    (it was ×1.0040 with ``flex`` when the samples ran the direct all-to-all)."""
    seen: list[NetworkOptions] = []
    real = steps.network_of

    def spy(topology, opts):
        seen.append(opts)
        return real(topology, opts)

    monkeypatch.setattr(steps, "network_of", spy)
    out = tmp_path / "r.json"
    assert main(["--model", "moe-gpt-small", "--topo", "tiny-2x2", "--tp", "1", "--pp", "1",
                 "--ep", "4", "--global-batch", "8", "--moe-token-dispatcher-type", dispatcher,
                 "--jitter", "1e-7", "--samples", "2", "--quiet", "--json", str(out)]) == 0
    v = json.loads(out.read_text())["variability"]
    assert v["samples"] == 2
    assert abs(v["mean_slowdown"] - 1) < 1e-6
    deterministic, *samples = seen
    assert len(samples) == 2 and all(s == deterministic for s in samples)
    want = "alltoall=hierarchical" if dispatcher == "flex" else None
    assert deterministic.algorithm == want


def _single_ns(model: str, topo: str, layout: LayoutRequest, training: Training) -> int:
    res = run_scenario(Scenario(ModelInput(str(MODELS / model), training), str(TOPOS / topo),
                                layout=layout))
    return res.result.iteration_ns


@pytest.mark.parametrize("model, topo, point, training", [
    ("gpt2-medium.yaml", "tiny-fattree-8.yaml", SweepPoint(tp=2, pp=2, dp=2),
     Training(global_batch=16)),
    # the flex dispatcher's all-to-all: the network options a sweep's layout is built with
    ("moe-gpt-small.yaml", "tiny-2x2.yaml", SweepPoint(tp=1, pp=1, dp=4, ep=4),
     Training(global_batch=8, moe_token_dispatcher="flex")),
])
def test_a_sweep_layout_is_the_single_run(model, topo, point, training):
    ns = _single_ns(model, topo, LayoutRequest(tp=point.tp, pp=point.pp, ep=point.ep),
                    training)
    ctx = SweepContext(load_model(str(MODELS / model)), load_topology(str(TOPOS / topo)),
                       training)
    row = evaluate(ctx, point)
    assert row["status"] == "ok", row["reason"]
    assert row["iteration_time_s"] == ns * 1e-9
    assert round(row["iteration_time_s"] * 1e9) == ns


def test_a_validation_case_is_the_single_run(tmp_path):
    """gpt2-medium TP 2 PP 2 DP 2 on the 8 one-GPU nodes of tiny-fattree-8: the case's
    prediction is the iteration time of ``simrun --model ... --tp 2 --pp 2``."""
    ns = _single_ns("gpt2-medium.yaml", "tiny-fattree-8.yaml", LayoutRequest(tp=2, pp=2),
                    Training(global_batch=16))
    v = tmp_path / "v.yaml"
    v.write_text(f"topology: {TOPOS / 'tiny-fattree-8.yaml'}\ncases:\n"
                 f"  - {{name: c, model: {MODELS / 'gpt2-medium.yaml'}, tp: 2, pp: 2, dp: 2,\n"
                 "     global_batch: 16, micro_batch: 1, measured_s: 1.0}\n")
    _, (case,) = load_cases(v)
    row = run_case(case)
    assert row["predicted_s"] == ns * 1e-9
    assert round(row["predicted_s"] * 1e9) == ns

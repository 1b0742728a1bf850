"""The Python API (sim/api.py, re-exported by ``import sim``): the README's example and the code
blocks of docs/api.md run and print what they show; a run from typed objects gives the
command line's iteration time to the nanosecond; refused values name the option's field,
never a flag."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
from conftest import ROOT

import sim
from sim import api
from sim.cli import main
from sim.errors import UsageError


def _python_blocks(doc: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S)


def _shown_output(block: str) -> list[str]:
    """The output a block shows: its trailing ``# `` comment lines."""
    lines = block.rstrip("\n").split("\n")
    shown = []
    while lines and lines[-1].startswith("# "):
        shown.insert(0, lines.pop()[2:])
    return shown


def _exec(block: str, namespace: dict) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(block, namespace)  # the documentation's own example
    return out.getvalue().splitlines()


def _cli_ns(tmp_path, *args: str) -> int:
    rep = tmp_path / "cli.json"
    assert main([*args, "--quiet", "--json", str(rep)]) == 0
    return round(json.loads(rep.read_text())["iteration_time_s"] * 1e9)


def test_the_readme_example_runs_and_equals_simrun(tmp_path):
    """The README's "Python API" section (after "Quick start") has one python block; run, it
    prints the line it shows, and its outcome is ``simrun --model gpt2-medium --topo
    tiny-fattree-8 --tp 2 --pp 2 --global-batch 16`` to the nanosecond."""
    text = (ROOT / "README.md").read_text()
    heads = re.findall(r"^## (.*)$", text, re.M)
    assert heads[heads.index("Quick start (two commands on a fresh machine)") + 1] == "Python API"
    (block,) = _python_blocks("README.md")
    ns: dict = {}
    printed = _exec(block, ns)
    assert printed == _shown_output(block) and printed
    want = _cli_ns(tmp_path, "--model", "gpt2-medium", "--topo", "tiny-fattree-8", "--tp", "2",
                   "--pp", "2", "--global-batch", "16")
    assert ns["outcome"].iteration_ns == want
    assert printed[0].startswith(f"iteration {want * 1e-6:.3f} ms, ")


def test_the_api_docs_examples_print_what_they_show():
    blocks = _python_blocks("docs/api.md")
    assert len(blocks) >= 3
    ns: dict = {}
    for block in blocks:
        printed = _exec(block, ns)
        assert printed == _shown_output(block), block


def test_import_sim_is_the_api():
    for name in api.__all__:
        assert getattr(sim, name) is getattr(api, name)
    with pytest.raises(AttributeError):
        _ = sim.no_such_name


def test_objects_and_options_give_the_command_lines_time(tmp_path):
    """A MoE run with every option group given as an object (spec and topology loaded,
    the flex dispatcher, a slow GPU, interference and host dispatch) against the same flags."""
    model = api.load_model("moe-gpt-small")
    topo = api.load_topology("tiny-2x2")
    out = api.run(api.prepare_model(
        model, topo, api.LayoutRequest(tp=1, pp=1, ep=4),
        api.Training(global_batch=8, moe_token_dispatcher="flex"),
        network=api.NetworkOptions(routing="adaptive"),
        simulation=api.SimulationOptions(nccl_channels=8, host_dispatch_ns=5000),
        faults=api.FaultOptions(slow_gpus=((1, 1.25),))))
    want = _cli_ns(tmp_path, "--model", "moe-gpt-small", "--topo", "tiny-2x2", "--tp", "1",
                   "--pp", "1", "--ep", "4", "--global-batch", "8",
                   "--moe-token-dispatcher-type", "flex", "--routing", "adaptive",
                   "--nccl-channels", "8", "--host-dispatch-us", "5", "--slow-gpu", "1:1.25")
    assert out.iteration_ns == want
    assert out.healthy is not None and out.healthy.iteration_ns < out.iteration_ns
    assert out.report["healthy_iteration_time_s"] == out.healthy.iteration_ns * 1e-9


def test_a_workload_file_gives_the_command_lines_time(tmp_path):
    out = api.run(api.prepare_workload("optable-gpt2-large-block", "tiny-nvlink-4"))
    want = _cli_ns(tmp_path, "--workload", "optable-gpt2-large-block", "--topo",
                   "tiny-nvlink-4")
    assert out.iteration_ns == want and out.iteration_s == want * 1e-9


GPT = ("gpt2-medium", "tiny-fattree-8")


@pytest.mark.parametrize("kwargs, field", [
    ({"layout": api.LayoutRequest(tp=0)}, "tp"),
    ({"layout": api.LayoutRequest(pp=2.0)}, "pp"),
    ({"layout": api.LayoutRequest(zero=4)}, "zero"),
    ({"layout": (2, 2)}, "layout"),
    ({"training": api.Training(global_batch=0)}, "global_batch"),
    ({"training": api.Training(global_batch=16, micro_batch=True)}, "micro_batch"),
    ({"simulation": api.SimulationOptions(samples=3)}, "samples"),
    ({"simulation": api.SimulationOptions(jitter_cv=-0.1)}, "jitter_cv"),
    ({"simulation": api.SimulationOptions(max_sim_time_s=0.0)}, "max_sim_time_s"),
    ({"simulation": api.SimulationOptions(comm_overlap_slowdown=0.5)},
     "comm_overlap_slowdown"),
    ({"network": "ring"}, "network"),
    ({"nodes": 0}, "nodes"),
])
def test_refused_values_name_the_field_not_a_flag(kwargs, field):
    kwargs = {"layout": api.LayoutRequest(tp=2, pp=2),
              "training": api.Training(global_batch=16), **kwargs}
    with pytest.raises(UsageError) as err:
        api.prepare_model(*GPT, **kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ") and "--" not in str(err.value)


def test_refused_inputs_name_the_argument():
    with pytest.raises(UsageError) as err:
        api.prepare_model(42, "tiny-fattree-8")
    assert err.value.field == "model"
    with pytest.raises(UsageError) as err:
        api.prepare_model("gpt2-medium", None)
    assert err.value.field == "topology"
    with pytest.raises(UsageError) as err:
        api.run("not prepared")
    assert err.value.field == "prepared"
    topo = api.load_topology("tiny-fattree-8")
    with pytest.raises(UsageError) as err:  # a loaded topology keeps its node count
        api.prepare_model("gpt2-medium", topo, nodes=4)
    assert err.value.field == "nodes"

"""A run pays only for what it uses: a workload-file run imports neither the model generator nor
the kernel tables, matplotlib or the sweep machinery (``sys.modules`` after a whole run of the
1024-GPU AICB example, in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, SEED_1024

# module prefix -> why a workload-file run must not load it
FORBIDDEN = {
    "sim.models.generator": "the file is the workload: no model is generated",
    "sim.models.layers": "layer rows of the generator",
    "sim.models.vocab": "model specs and operator vocabulary of the generator",
    "sim.models.compute": "roofline compute model: the file gives its compute times "
                          "(sim.models.compute_setup loads it only to scale them)",
    "sim.models.plan": "model plan of the generator",
    "sim.models.memory": "memory check of a generated model",
    "sim.models.flops": "model FLOP accounting (MFU of a --model run)",
    "sim.models.features.fp8": "FP8 feature rows (the option registry declares them lazily)",
    "sim.models.features.eager": "eager-kernel feature rows",
    "sim.models.features.moe": "MoE feature rows",
    "sim.models.features.tp_async": "TP-overlap feature rows",
    "sim.models.features.tp_overlap": "TP-overlap feature rows",
    "sim.kernels.table": "kernel tables load on first use (--model runs, --source-gpu scaling)",
    "sim.kernels.lookup": "kernel-table lookups",
    "sim.kernels.attention": "attention tile model of the kernel tables",
    "matplotlib": "figures only with --plot / --breakdown-plot",
    "sim.viz.timeline": "the timeline figure (--plot)",
    "sim.viz.breakdown": "the breakdown figure (--breakdown-plot)",
    "sim.sweep": "the sweep subcommand only",
    "sim.validation": "the validate subcommand only",
    "sim.calibration.profile": "a --calibration profile's reader and knobs",
    "sim.calibration.knobs": "the knobs of a --calibration profile",
    "sim.scenario.collective_log": "AICB's physical-format log (with --model only)",
    "sim.workload.aicb_zero3": "ZeRO-3 steps of AICB's physical-format log",
    "sim.workload.deepspeed": "a DeepSpeed ZeRO file read with --zero",
    "sim.workload.chakra": "per-rank Chakra traces (a folder given to --workload)",
    "sim.workload.optable": "the per-operator table reader (its format's files only)",
    "sim.workload.aicb_csv": "AICB's physical-format log (with --model only)",
    "sim.viz.trace": "the Chrome trace (--trace)",
    "sim.viz.trace_size": "the size check of a --trace",
    "sim.viz.boxes": "timeline boxes of a trace or figure",
    "sim.viz.mpl": "figure formats (--plot, --breakdown-plot)",
    "sim.topology.mesh": "the xGMI full mesh (a topology with node.xgmi)",
    "sim.pipeline.zero_bubble": "the zero-bubble schedules' orders (zb-h1, zb-h2, zb-v)",
    "sim.pipeline.dualpipe": "DualPipe's orders",
    "sim.report.text": "the terminal table (the probe's run is --quiet)",
    "sim.report.summary": "the terminal table's summary lines",
    "sim.network.alltoall": "all-to-all classes of transfers (runs with all-to-alls)",
    "sim.network.ecmp_hash": "the vectorised ECMP hash of the all-to-all classes",
    "numpy": "vectorised copies and routes of large stages only (sim/network/symmetry.py "
             "SMALL_STAGE, sim/topology/cluster.py BULK_ROUTES), all-to-all classes, "
             "--jitter percentiles",
}

# standard-library modules a run loads only when it needs them (unless simpy or yaml, which
# every run loads, already do): difflib for a mistyped flag, traceback with
# SIMRUN_DEBUG, hashlib and statistics for --jitter or a very long output name, fractions for
# TP-overlap steps
STDLIB_ON_USE = ("difflib", "traceback", "hashlib", "secrets", "statistics", "fractions",
                 "decimal", "gzip")

_PROBE = """
import contextlib, io, json, sys
from sim.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(sys.argv[1:])
print(json.dumps([rc, sorted(sys.modules)]))
"""


def _modules_after(*args: str) -> tuple[int, list[str]]:
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    rc, mods = json.loads(out.splitlines()[-1])
    return rc, mods


def _loaded(mods: list[str], prefix: str) -> bool:
    return any(m == prefix or m.startswith(prefix + ".") for m in mods)


def test_workload_file_run_imports_only_what_it_uses():
    rc, mods = _modules_after("--workload", str(SEED_1024), "--topo", "dgx-a100-1024",
                              "--quiet")
    assert rc == 0
    loaded = {p: why for p, why in FORBIDDEN.items() if _loaded(mods, p)}
    assert not loaded, f"a workload-file run imported {loaded}"
    libraries = set(json.loads(subprocess.run(
        [sys.executable, "-c", "import json, sys, simpy, yaml; "
         "print(json.dumps(sorted(sys.modules)))"], capture_output=True, text=True,
        check=True).stdout))
    extra = [m for m in STDLIB_ON_USE if m in mods and m not in libraries]
    assert not extra, f"a workload-file run imported {extra}"
    # the run did simulate: the engine, the network and the AICB reader are there
    for needed in ("sim.engine.core", "sim.network", "sim.workload.aicb", "simpy"):
        assert _loaded(mods, needed), needed


def test_model_run_still_loads_the_generator():
    """The same probe sees the generator when a run needs it (the test can fail)."""
    rc, mods = _modules_after("--model", "gpt2-medium", "--topo", "tiny-fattree-8", "--tp", "1",
                              "--pp", "1", "--global-batch", "8", "--quiet")
    assert rc == 0
    assert _loaded(mods, "sim.models.generator") and _loaded(mods, "sim.models.compute")


def test_lazily_declared_options_match_their_features():
    """The option registry names these flags and choices without importing their feature
    modules; the features' own constants agree."""
    from sim.models.features import eager, fp8_params, tp_async
    from sim.options.registry import flags, registry

    declared = flags()
    assert fp8_params.FLAG in declared and tp_async.FLAG in declared
    assert tuple(declared["--norm-type"][1].choices) == eager.NORM_TYPES
    checks = {o.field: o.check for o in registry()}
    assert checks["fp8_param_gather"].__qualname__ == "sim.models.features.fp8_params.check"
    assert checks["async_tensor_model_parallel_allreduce"].__qualname__ == \
        "sim.models.features.tp_async.check"

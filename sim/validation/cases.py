"""Predicted vs measured iteration times of published training runs (``simrun validate``,
flags and the printed table in :mod:`sim.cli.validate`).

Runs every case of a validation file (default: ``workloads/validation/*.yaml``) through the
scenario pipeline (:mod:`sim.scenario.steps`, the stages of ``simrun --model`` and of a sweep's
layout): model spec + layout → memory check (a case the memory model calls too
large is predicted anyway and flagged) → generated program → engine on the flow network of the
file's topology (as many nodes as the case needs). No per-case parameter is tuned: a case only
says what ran (model, layout, batch, the framework options of the run, the NCCL environment's
``NCCL_NVLS_ENABLE``) and what was measured. Each case is
either ``calibration`` (its measurement was used to set a physical parameter of the models;
``calibrates`` says which) or ``evaluation`` (never used to set anything); the two groups are
reported apart. See docs/validation.md.

Validation file schema (unknown keys are rejected with file, line and key)::

    source: <text>                       # where the measurements come from
    topology: <path>                     # relative to the file
    defaults: {<case key>: value, ...}   # optional, applied to every case
    cases:
      - name, model (path), role (calibration | evaluation), calibrates (text, calibration
        cases), source (citation: paper/page + table), url, published (the exact published
        numbers the measurement is derived from), not_modelled (list: options the run used that
        simrun does not model yet),
        measured_s (s/iteration) or measured_tokens_per_s_per_gpu (then the iteration time is
        global_batch · seq_len / (tokens/s/GPU · GPUs)) or measured_tflops_per_gpu (teraFLOP/s
        per GPU counted as Narayanan et al. SC'21 Eq. 3, :func:`sc21_flops`; then the iteration
        time is F / (teraFLOP/s · 1e12 · GPUs)), measured_mfu (optional, fraction),
        nccl_nvls_enable (0 or 1: the run's NCCL_NVLS_ENABLE, as --nccl-nvls-enable),
        host_dispatch_us (the run's stack's host time to issue one kernel, as
        --host-dispatch-us; absent: 0, off),
        and any option of :class:`sim.parallel.config.ParallelConfig` with a plain value
        (tp, pp, dp, vpp, cp, global_batch, micro_batch, recompute, sequence_parallel, dtype,
        distributed_optimizer, attention_backend, overlap_grad_reduce, overlap_param_gather, …)
        and Megatron-Core's pipeline-split flags (decoder_first_pipeline_num_layers,
        decoder_last_pipeline_num_layers, account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split)
"""

from __future__ import annotations

import math
from concurrent.futures import as_completed
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sim.engine.periodic import VALIDATE_TOLERANCE
from sim.errors import InputError, SimrunError
from sim.files.catalog import shipped
from sim.files.inputs import read_text, show
from sim.files.yaml_load import load_yaml_with_lines
from sim.kernels.gpus import find
from sim.models.parallel_checks import validate as check_parallel
from sim.models.vocab.spec import load_model
from sim.parallel.config import ParallelConfig, Training
from sim.parallel.layout import Layout
from sim.parallel.split import PipelineSplit
from sim.runtime.progress import Progress
from sim.scenario import steps
from sim.scenario.model_run import fit_model, model_run_of
from sim.scenario.options import NetworkOptions, SimulationOptions
from sim.scenario.periodic_run import periodic_mode, simulated_as
from sim.sweep.runner import default_workers, stop_pool, worker_pool
from sim.topology import load_topology
from sim.validation.summary import ROLES

#: keys of a case that are not layout/training options (their types; ``list`` = of strings)
CASE_KEYS: dict[str, type] = {
    "name": str, "model": str, "role": str, "calibrates": str, "source": str, "url": str,
    "published": str, "not_modelled": list, "measured_s": float,
    "measured_tokens_per_s_per_gpu": float, "measured_tflops_per_gpu": float,
    "measured_mfu": float,
    # NCCL_NVLS_ENABLE of the run's environment (0 or 1; absent: NCCL's default, NVLS where
    # the topology's NVSwitches have it): the engine's network option --nccl-nvls-enable
    "nccl_nvls_enable": int,
    # the stack's CPU time to issue one kernel, µs (--host-dispatch-us, sim.engine.host)
    "host_dispatch_us": float,
}
#: Megatron-Core's uneven pipeline-split flags (:class:`PipelineSplit` fields)
SPLIT_KEYS: dict[str, tuple[str, type]] = {
    "decoder_first_pipeline_num_layers": ("first_stage_layers", int),
    "decoder_last_pipeline_num_layers": ("last_stage_layers", int),
    "account_for_embedding_in_pipeline_split": ("account_for_embedding", bool),
    "account_for_loss_in_pipeline_split": ("account_for_loss", bool),
}
REQUIRED = ("name", "model", "tp", "pp", "global_batch", "micro_batch")
MEASURED = ("measured_s", "measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu")
DEFAULTS: dict[str, Any] = {"role": "evaluation", "calibrates": "", "source": "", "url": "",
                            "published": "", "not_modelled": [], "measured_mfu": None}
FILE_KEYS = ("source", "topology", "defaults", "cases")


def _par_keys() -> dict[str, type]:
    """The :class:`Layout` and :class:`Training` fields a case may set, with their value types:
    every field whose default is a plain bool, int, float or str, or ``None`` for an int or float
    (new options of the framework model become case keys without a change here); the
    microbatches follow from the global batch."""
    keys = {}
    for f in (*fields(Layout), *fields(Training)):
        d = f.default
        if f.name == "microbatches":
            continue
        if isinstance(d, (bool, int, float, str)):
            keys[f.name] = type(d)
        elif d is None and "int" in str(f.type):
            keys[f.name] = int
            NULLABLE.add(f.name)
        elif d is None and "float" in str(f.type):
            keys[f.name] = float
            NULLABLE.add(f.name)
    return keys


NULLABLE: set[str] = {"measured_mfu"}
"""Keys that may be ``null`` (their default is "not given")."""
PAR_KEYS = _par_keys()

MAX_INT = 2**31 - 1
"""Largest integer of a case (a parallel degree, a batch, a layer count): beyond it the value is
a typo, and products of such numbers would leave the float range."""
FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "measured_s": (0.0, 1e6),                       # an iteration of at most ~11.6 days
    "measured_tokens_per_s_per_gpu": (0.0, 1e9),
    "measured_tflops_per_gpu": (0.0, 1e5),          # 100 PFLOP/s per GPU: 50× a B200's FP8
    "measured_mfu": (0.0, 1.0),
    "host_dispatch_us": (0.0, 1000.0),              # as --host-dispatch-us (absent: off)
}
"""Range (low exclusive, high inclusive) of each measured number; other numbers of a case lie
in (0, 1e6]."""


@dataclass(frozen=True)
class Case:
    """One measured run (paths resolved): its layout and training (``par``), what was
    measured (``measured_s`` per iteration, ``measured_mfu`` as a fraction) and where from."""

    name: str
    model_path: str
    topology_path: str
    par: ParallelConfig
    measured_s: float
    measured_mfu: float | None
    source: str
    role: str = "evaluation"
    calibrates: str = ""
    url: str = ""
    published: str = ""
    not_modelled: tuple[str, ...] = ()
    nvls_enable: bool | None = None
    host_dispatch_ns: int = 0

    def __getattr__(self, name: str):
        """The layout and training names (``tp``, ``recompute``, …) read through to ``par``."""
        if name.startswith("__") or name == "par":
            raise AttributeError(name)
        return getattr(self.par, name)


def load_cases(path: str | Path) -> tuple[str, list[Case]]:
    """Read a validation file; returns ``(source, cases)``. Raises :class:`InputError` naming the
    file, line and key for anything malformed."""
    path = Path(path)
    fname = str(path)
    # encodings, duplicate keys, PyYAML's stray exceptions: sim/files/inputs.py (docs/errors.md)
    data, lines = load_yaml_with_lines(read_text(path, what="validation file"), fname)

    def fail(msg: str, at: tuple, key: str | None = None):
        raise InputError(msg, file=fname, line=lines.get(at), field=key)

    if not isinstance(data, dict):
        fail("expected a mapping with 'cases'", ())
    for k in data:
        if k not in FILE_KEYS:
            fail(f"unknown key (allowed: {', '.join(FILE_KEYS)})", (k,), str(k))
    if not isinstance(data.get("topology"), str):
        fail("required: path of the topology file", (), "topology")
    if not isinstance(data.get("cases"), list) or not data["cases"]:
        fail("required: a non-empty list of cases", (), "cases")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        fail("expected a mapping", ("defaults",), "defaults")
    for k, v in defaults.items():  # also a default that every case overrides
        problem = _value_problem(k, v)
        if problem:
            fail(problem, ("defaults", k), f"defaults.{k}")
    topo = str(path.parent / data["topology"])
    cases = [_checked_case(i, raw, defaults, fail, path.parent, topo, data.get("source", ""))
             for i, raw in enumerate(data["cases"])]
    return str(data.get("source", "")), cases


def _checked_case(i: int, raw: Any, defaults: dict[str, Any], fail, base: Path, topo: str,
                  file_source: str) -> Case:
    """Case ``i`` of a file, checked key by key (``fail(msg, at, key)`` raises)."""
    at = ("cases", i)
    if not isinstance(raw, dict):
        fail("expected a mapping", at, f"cases[{i}]")
    merged = {**DEFAULTS, **defaults, **raw}
    for k, v in merged.items():
        src = at + (k,) if k in raw else ("defaults", k)
        problem = _value_problem(k, v)
        if problem:
            fail(problem, src, f"cases[{i}].{k}")
    for k in REQUIRED:
        if k not in merged:
            fail("required key is missing", at, f"cases[{i}].{k}")
    if len([k for k in MEASURED if k in merged]) != 1:
        fail(f"give exactly one of {' or '.join(MEASURED)}", at, f"cases[{i}]")
    if "fp8_recipe" in merged and merged.get("dtype") != "fp8":  # as simrun --fp8-recipe
        fail("applies to dtype fp8 cases only", at + ("fp8_recipe",) if "fp8_recipe" in raw
             else ("defaults", "fp8_recipe"), f"cases[{i}].fp8_recipe")
    if "fp4_recipe" in merged and not merged.get("fp4"):  # as simrun --fp4-recipe
        fail("applies to fp4 (e2m1) cases only", at + ("fp4_recipe",) if "fp4_recipe" in raw
             else ("defaults", "fp4_recipe"), f"cases[{i}].fp4_recipe")
    try:
        split = PipelineSplit(**{SPLIT_KEYS[k][0]: v for k, v in merged.items()
                                 if k in SPLIT_KEYS})
        layout = {f.name for f in fields(Layout)}
        given = {k: v for k, v in merged.items() if k in PAR_KEYS}
        par = ParallelConfig.derive(
            Layout(**{k: v for k, v in given.items() if k in layout}),
            Training(split=split, **{k: v for k, v in given.items() if k not in layout}))
    except SimrunError as e:  # a layout the framework would refuse
        fail(getattr(e, "message", str(e)), at, f"cases[{i}]")
    if not (base / merged["model"]).is_file():  # named at the line that names it
        fail(f"no such model file: {show(str(base / merged['model']))}",
             at + ("model",) if "model" in raw else ("defaults", "model"), f"cases[{i}].model")
    case = _case(merged, par, base, topo, file_source)  # the model file names its own errors
    try:  # what Megatron would refuse for this model, named here and not mid-run
        check_parallel(load_model(case.model_path), par)
    except SimrunError as e:
        field = getattr(e, "field", None)
        where = (at + (field,) if field in raw else ("defaults", field) if field in defaults
                 else at)  # the line of the key at fault, where the file gives it
        fail(getattr(e, "message", str(e)) + (f" ({field})" if field else ""), where,
             f"cases[{i}]")
    return case


def _case(merged: dict[str, Any], par: ParallelConfig, base: Path, topo: str,
          file_source: str) -> Case:
    """The :class:`Case` of one checked, defaults-merged case mapping."""
    model_path = str(base / merged["model"])
    if "measured_s" in merged:
        measured_s = float(merged["measured_s"])
    elif "measured_tflops_per_gpu" in merged:  # the paper's FLOPs over its FLOP/s
        measured_s = (sc21_flops(load_model(model_path), par.global_batch)
                      / (merged["measured_tflops_per_gpu"] * 1e12 * par.world_size))
    else:  # tokens/s/GPU: one iteration processes global_batch · seq_len tokens on all GPUs
        seq = load_model(model_path).seq_len
        measured_s = (par.global_batch * seq
                      / (merged["measured_tokens_per_s_per_gpu"] * par.world_size))
    return Case(name=merged["name"], model_path=model_path, topology_path=topo, par=par,
                measured_s=measured_s, measured_mfu=merged["measured_mfu"],
                source=merged["source"] or file_source, role=merged["role"],
                calibrates=merged["calibrates"], url=merged["url"],
                published=merged["published"], not_modelled=tuple(merged["not_modelled"]),
                nvls_enable=None if "nccl_nvls_enable" not in merged
                else bool(merged["nccl_nvls_enable"]),
                host_dispatch_ns=round(merged.get("host_dispatch_us", 0) * 1000))


def sc21_flops(model, global_batch: int) -> float:
    """FLOPs of one iteration as Narayanan et al. (SC'21, arXiv:2104.04473, Section 5.1, Eq. 3)
    count them to report teraFLOP/s per GPU: ``F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))``
    (the GEMMs of forward, backward and the full-recompute forward, and the logit layer), with
    B the global batch, s the sequence, l (``n`` here) the layers, h the hidden size, V the
    vocabulary."""
    b, s, n, h, v = global_batch, model.seq_len, model.layers, model.hidden, model.vocab
    return 96.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


def _value_problem(key: str, v: Any) -> str | None:
    """Why ``v`` is not a valid value of case key ``key`` (``None`` if it is)."""
    want = CASE_KEYS.get(key) or PAR_KEYS.get(key) or SPLIT_KEYS.get(key, (None, None))[1]
    if want is None:
        return f"unknown key (allowed: {', '.join([*CASE_KEYS, *PAR_KEYS, *SPLIT_KEYS])})"
    if v is None and key in NULLABLE and key not in REQUIRED:
        return None
    if key == "nccl_nvls_enable":
        return None if v in (0, 1) and not isinstance(v, bool) else f"expected 0 or 1, got {v!r}"
    if key == "role" and v not in ROLES:
        return f"expected one of {', '.join(ROLES)}, got {v!r}"
    if want is list:
        ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
        return None if ok else f"expected a list of strings, got {v!r}"
    ok = isinstance(v, want) and not (want is int and isinstance(v, bool))
    if want is float:
        lo, hi = FLOAT_RANGES.get(key, (0.0, 1e6))
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if ok and not lo < v <= hi:  # also NaN, ±inf and integers of 400 digits
            return f"expected a number in ({lo:g}, {hi:g}], got {show(v)}"
    elif want is int:
        if ok and not 0 < v <= MAX_INT:
            return f"expected an integer from 1 to {MAX_INT}, got {show(v)}"
    if ok:
        return None
    return f"expected {'a positive ' if want in (int, float) else ''}{want.__name__}, got {show(v)}"


def run_case(case: Case, tolerance: float | None = VALIDATE_TOLERANCE) -> dict[str, Any]:
    """Simulate one case; returns a JSON-ready row (times in s, memory in bytes).
    ``tolerance``: the periodic shortcut's (:data:`sim.engine.periodic.VALIDATE_TOLERANCE`;
    0: only exact extrapolation; ``None``: every microbatch simulated)."""
    model = load_model(case.model_path)
    par = case.par
    probe = load_topology(case.topology_path)
    nodes = max(1, math.ceil(par.world_size / probe.gpus_per_node))
    topo = load_topology(case.topology_path, nodes=nodes)
    # the single run's stages; a layout the memory model calls too large is predicted anyway
    run = model_run_of(fit_model(model, par, topo), topo, ignore_memory=True)
    prepared = steps.prepare(run.program, topo,
                             network=NetworkOptions(nvls_enable=case.nvls_enable), model_run=run,
                             simulation=SimulationOptions(
                                 host_dispatch_ns=case.host_dispatch_ns,
                                 periodic=tolerance is not None,
                                 periodic_tolerance=tolerance or 0.0))
    done = steps.run(prepared)
    rep = m = done.report  # a model run's report holds its metrics
    mem = run.memory
    pred = rep["iteration_time_s"]
    return {
        "name": case.name, "role": case.role, "model": model.name, "gpus": par.world_size,
        "gpu": topo.gpu.name,
        "gpu_family": entry.family if (entry := find(topo.gpu.name)) else topo.gpu.name,
        "layout": f"TP{par.tp} PP{par.pp} DP{par.dp} VPP{par.vpp}"
                  + (f" CP{par.cp}" if par.cp > 1 else ""),
        "global_batch": par.global_batch, "micro_batch": par.micro_batch,
        "recompute": par.recompute, "sequence_parallel": par.sp, "dtype": par.dtype,
        "measured_s": case.measured_s, "predicted_s": pred,
        "error_pct": (pred - case.measured_s) / case.measured_s * 100,
        "measured_mfu": case.measured_mfu, "predicted_mfu": m["mfu"],
        # simrun's model FLOPs over the measured time: the measured MFU under one FLOP count
        "mfu_at_measured_s": m["mfu"] * pred / case.measured_s,
        "bubble_fraction": rep["bubble_fraction"],
        "exposed_comm_s": {g: sum(s["exposed_comm_s"][g] for s in rep["stages"])
                           / len(rep["stages"]) for g in ("TP", "PP", "DP")},
        "memory_per_gpu_bytes": mem.peak.total_bytes, "memory_feasible": mem.feasible,
        "topology": f"{topo.name} with {nodes} nodes", "source": case.source,
        "url": case.url, "published": case.published, "calibrates": case.calibrates,
        "not_modelled": list(case.not_modelled),
        "host_dispatch_us": case.host_dispatch_ns / 1000,  # the stack's host time per launch
        "simulated": simulated_as(done.result),  # in full or extrapolated (how)
        "periodic_mode": periodic_mode(done.result),  # full | exact | within
    }


def run_cases(cases: list[Case], workers: int | None = None,
              tolerance: float | None = VALIDATE_TOLERANCE) -> list[dict[str, Any]]:
    """All cases (in file order), on ``workers`` local processes (default: all cores), with a
    progress line on a terminal (:mod:`sim.runtime.progress`); ``tolerance``: as
    :func:`run_case`'s."""
    n = min(workers or default_workers(), len(cases))
    with Progress("validate: cases done", total=len(cases)) as progress:
        if n <= 1:
            rows = []
            for c in cases:
                rows.append(run_case(c, tolerance))
                progress.advance()
            return rows
        pool = worker_pool(n)
        try:
            # biggest first for load balance; results keep file order
            order = sorted(range(len(cases)), key=lambda i: -cases[i].par.world_size)
            futs = {i: pool.submit(run_case, cases[i], tolerance) for i in order}
            for _ in as_completed(futs.values()):
                progress.advance()
            rows = [futs[i].result() for i in range(len(cases))]
        except BaseException:
            stop_pool(pool)
            raise
        pool.shutdown()
        return rows


def default_files() -> list[Path]:
    """The shipped validation files (:mod:`sim.files.catalog`: package data, or the checkout's
    ``workloads/validation/``), whatever the current directory."""
    return list(shipped("validation").values())

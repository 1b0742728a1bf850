"""One whole sweep (``simrun sweep``, flags in :mod:`sim.cli.sweep`): enumerate the valid
layouts of a model on N GPUs, simulate the ones not yet done, store and rank them.

See docs/sweeps.md. Exit codes: 0 (also when some layouts are infeasible or failed: they are
results), 2 bad input, 130 interrupted (finished layouts are on disk; rerun with ``--resume``).
"""

from __future__ import annotations

import hashlib
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sim.calibration.profile import apply_to_topology, profile_data
from sim.errors import UsageError
from sim.files.catalog import resolve
from sim.files.inputs import read_bytes  # bounded, never blocks (not Path.read_bytes: a FIFO hangs)
from sim.models.compute_setup import ComputeOptions, resolve_compute
from sim.models.vocab.spec import load_model
from sim.options import applicable
from sim.options.registry import sweep_later
from sim.parallel.config import Training
from sim.runtime import progress
from sim.runtime.process import Terminated
from sim.scenario import NetworkOptions, SimulationOptions
from sim.scenario.model_run import with_ep_nodes, with_training_overrides
from sim.sweep.best import BestFirst, backend_of, early_pass, list_layouts, twin_groups
from sim.sweep.evaluate import SweepContext, evaluate_twins
from sim.sweep.output import (
    DEFAULT_HEADROOM_GB,
    headroom_summary,
    ranked,
    table_lines,
    write_outputs,
)
from sim.sweep.runner import run_tasks
from sim.sweep.space import Space, enumerate_layouts
from sim.sweep.store import ResultStore
from sim.topology import load_topology
from sim.words import plural

_OPTION_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class SweepOptions:
    """A whole sweep. ``space``: the candidate values per dimension and the GPUs every layout
    uses (:class:`~sim.sweep.space.Space`; its ``gpus`` ``None``: all of the topology);
    ``training`` shared by every layout (its micro batch is each layout's); ``out``
    results directory (``None``: ``sweep-<model>-<GPUS>gpu``); ``resume`` / ``overwrite``
    what to do with earlier results there; ``workers`` local processes, ``scheduler`` a Dask
    address (``scheduler_timeout_s`` to reach it); ``limit`` layouts to run now (``0``: count
    and list the layouts with their memory, simulate none); ``top`` rows in the table;
    ``periodic`` the periodic shortcut (:mod:`sim.scenario.periodic_run`; off: every layout's full
    run); ``best`` ``K``: simulate in the order of a lower bound on the iteration time until
    the first ``K`` of the ranking are proven, the others ``pruned`` (:mod:`sim.sweep.best`;
    ``None``: simulate every layout); ``memory_headroom_gb`` the margin below capacity
    under which a layout is flagged and ranked after those with the margin;
    ``show_infeasible`` one table line per infeasible layout; ``plot``, ``progress``,
    ``quiet`` (no table) for the outputs.
    As in a single run: ``simulation`` the engine options (interference, host dispatch,
    watchdog; its placement is ``placement``), ``compute`` the compute model's options,
    ``overrides`` the ``--set KEY=VALUE`` topology what-ifs; ``given`` the flags whose
    single-run refusals apply per layout (:func:`sim.options.applicable.check_layout`,
    :func:`sim.options.applicable.check_interference`;
    :func:`sim.cli.sweep_args.layout_checked`); ``name_field`` names an option in the skip
    reasons (the CLI: its flag; by default the option's name); ``variants``: the combinations
    of swept training options (:mod:`sim.sweep.variants`), each its label, training and
    given flags (empty: only ``training``)."""

    model: str
    topology: str
    training: Training
    space: Space = field(default_factory=Space)
    nodes: int | None = None
    network: NetworkOptions = field(default_factory=NetworkOptions)
    placement: str = "tp-dp-pp"
    out: str | None = None
    resume: bool = False
    overwrite: bool = False
    workers: int | None = None
    scheduler: str | None = None
    scheduler_timeout_s: float = 10.0
    limit: int | None = None
    top: int = 30
    memory_headroom_gb: float = DEFAULT_HEADROOM_GB
    show_infeasible: bool = False
    periodic: bool = True
    best: int | None = None
    plot: bool = True
    progress: bool = True
    quiet: bool = False
    simulation: SimulationOptions = field(default_factory=SimulationOptions)
    compute: ComputeOptions = field(default_factory=ComputeOptions)
    overrides: tuple[str, ...] = ()
    given: frozenset[str] = frozenset()
    name_field: Callable[[str], str] = str
    variants: tuple[tuple[tuple[tuple[str, str], ...], Training, frozenset[str]], ...] = ()


def _sha256(path: str) -> str:
    """SHA-256 of the file ``path`` names (a path, or a shipped topology's name)."""
    return hashlib.sha256(read_bytes(resolve("topologies", path, "--topo"))).hexdigest()


def settings_of(opts: SweepOptions, model, topo, gpus: int) -> dict[str, Any]:
    """What a resumed sweep must share with the original (the layout lists may differ)."""
    out = {
        "schema": "simrun.sweep-settings/1",
        "files": {"model": opts.model, "topology": opts.topology},  # informative, not compared
        "model": _model_settings(model),
        "topology": {"name": topo.name, "sha256": _sha256(opts.topology), "nodes": topo.num_nodes},
        "gpus": gpus,
        "training": _training_settings(opts.training),
        "network": asdict(opts.network),
        "placement": opts.placement,
    }
    # options a sweep has had since it takes every run flag: recorded when not the default
    # (sweeps recorded before them still resume)
    if opts.overrides:
        out["topology"]["overrides"] = list(opts.overrides)
    default = SimulationOptions()
    sim = {k: getattr(opts.simulation, k) for k in SIMULATION_KEYS
           if getattr(opts.simulation, k) != getattr(default, k)}
    if sim:
        out["simulation"] = sim
    compute = {k: getattr(opts.compute, k) for k in ("kernel_table", "compute_efficiency",
                                                     "source_gpu", "compute_scale",
                                                     "sustained_slowdown")
               if getattr(opts.compute, k) is not None}
    if opts.compute.calibration is not None:  # the profile's knobs: a resume must match them
        compute["calibration"] = profile_data(opts.compute.calibration)
    if compute:
        out["compute"] = compute
    given = sorted(set(opts.given) & set(PRESENCE_MATTERS))
    if given:
        out["flags"] = given
    if opts.variants:  # swept training options: each combination's label
        out["varied"] = [dict(label) for label, _, _ in opts.variants]
    return out


PRESENCE_MATTERS = ("--nccl-channels", "--comm-overlap-slowdown")
"""Flags whose presence, not only their value, decides a layout's outcome (given at their
default they still make layouts without an asynchronous collective ``inapplicable``); the
other per-layout refusals are of values recorded in ``training``."""


SIMULATION_KEYS = ("nccl_channels", "comm_overlap_slowdown", "host_dispatch_ns",
                   "max_sim_time_s")
"""The engine options a sweep takes (its placement is recorded on its own)."""


def _model_settings(model) -> dict[str, Any]:
    """The model spec as recorded in the settings, without the dropout probabilities at their
    default (sweeps recorded before the spec had them still resume)."""
    later = {"hidden_dropout": 0.1, "attention_dropout": 0.1}
    return {k: v for k, v in asdict(model).items() if not (k in later and v == later[k])}


def _training_settings(training: Training) -> dict[str, Any]:
    """The shared training options as recorded in the settings: without the micro batch (it
    varies per layout; each row has it) and without an unset attention backend (sweeps recorded
    before it existed still resume; likewise the split, FSDP and MoE routing options at their
    defaults, which a sweep does not vary): the options declared without
    ``recorded_at_default`` (:func:`sim.options.registry.sweep_later`)."""
    later = {k: asdict(v) if is_dataclass(v) else v for k, v in sweep_later().items()}
    return {k: v for k, v in asdict(training).items()
            if k != "micro_batch" and not (k in later and v == later[k])}


def run_sweep(opts: SweepOptions) -> int:
    """Run the sweep ``opts`` describes; returns the exit code (bad input raises
    :class:`UsageError`; Ctrl-C or SIGTERM raise :class:`KeyboardInterrupt` after saving)."""
    if opts.resume and opts.overwrite:
        raise UsageError("give --resume or --overwrite, not both", field="resume")
    model = load_model(opts.model)
    topo = apply_to_topology(load_topology(opts.topology, nodes=opts.nodes,
                                           overrides=opts.overrides),
                             opts.compute.calibration, opts.compute.calibration_any_cluster)
    gpus = opts.space.gpus or topo.num_gpus
    if gpus > topo.num_gpus:
        raise UsageError(f"{gpus} GPUs requested but {opts.topology} has {topo.num_gpus}; use "
                         "--nodes", field="gpus")
    space = replace(opts.space, gpus=gpus)
    layouts, skipped = [], []
    for label, training, given in opts.variants or (((), opts.training, opts.given),):
        vopts = replace(opts, training=training, given=given)
        lays, skips = enumerate_layouts(model, space, training, topo.gpus_per_node,
                                        check=_layout_check(vopts, model, topo))
        suffix = "".join(f"-{k}-{v}" for k, v in label)
        layouts += [replace(lay, variant=label) for lay in lays]
        skipped += [(k + suffix, _named(r, opts.name_field)) for k, r in skips]
    layouts.sort(key=lambda x: x.key)
    if not layouts:
        _refuse_no_layout(skipped, opts.given)
    dtype = opts.training.dtype
    if dtype not in topo.gpu.peak_tflops:
        raise UsageError(f"GPU {topo.gpu.name} has no {dtype} peak", field="dtype")
    ctx = SweepContext(model, topo, opts.training, network=opts.network,
                       placement=opts.placement, simulation=opts.simulation,
                       compute=resolve_compute(topo.gpu, opts.compute), given=opts.given,
                       variants=tuple((label, t) for label, t, _ in opts.variants),
                       periodic=opts.periodic)
    headroom = int(opts.memory_headroom_gb * 1e9)
    if opts.limit == 0:
        return list_layouts(ctx, layouts, skipped, headroom, backend_of(opts))
    out = Path(opts.out or f"sweep-{model.name}-{gpus}gpu")
    settings = settings_of(opts, model, topo, gpus)
    store = ResultStore(out)
    done = store.open(settings, resume=opts.resume, overwrite=opts.overwrite)
    t0 = time.perf_counter()
    backend, ran, order = _run_pending(opts, ctx, gpus, layouts, skipped, store, done, out)
    wall = time.perf_counter() - t0
    final = {lay.key: done[lay.key] for lay in layouts if lay.key in done}
    pruned = 0
    if order is not None:  # best-first: the candidates after the proving prefix are pruned
        cands, pruned = order.final({k: final[k] for k in order.order if k in final},
                                    {lay.key: lay for lay in layouts})
        final.update(cands)
    rows = ranked(final.values(), headroom)
    complete = len(rows) == len(layouts)
    ok = [r for r in rows if r["status"] == "ok"]
    gb = opts.training.global_batch
    summary = {
        "title": f"{model.name} on {gpus} GPUs ({topo.name}), global batch "
                 f"{gb}: layouts ranked by iteration time",
        "settings": settings,
        "complete": complete,
        "layouts": len(layouts),
        "ok": len(ok),
        "infeasible": sum(r["status"] == "infeasible" for r in rows),
        **({"inapplicable": n} if (n := sum(r["status"] == "inapplicable" for r in rows))
           else {}),
        "errors": sum(r["status"] == "error" for r in rows),
        **({"pruned": pruned, "best_k": opts.best} if order is not None else {}),
        "best": ok[0]["layout"] if ok else None,
        "skipped_invalid": [{"layout": k, "reason": r} for k, r in skipped],
        **headroom_summary(rows, opts.memory_headroom_gb),
    }
    paths = write_outputs(out, rows, summary, plot=opts.plot)
    if not opts.quiet:
        print(f"{model.name} on {gpus} GPUs, global batch {gb}: "
              f"{plural(len(ok), 'feasible layout')} ranked by iteration time, those within "
              f"{opts.memory_headroom_gb:g} GB of capacity (--memory-headroom) last "
              f"(exposed comm: mean over stages)")
        for line in table_lines(rows, top=opts.top, headroom_bytes=headroom,
                                show_infeasible=opts.show_infeasible):
            print("  " + line)
    print(f"ran {plural(ran, 'layout')} in {wall:.1f} s on {backend}; "
          + (f"{plural(pruned, 'layout')} pruned by the lower bound (--best {opts.best}); "
             if order is not None else "") +
          f"{'complete' if complete else f'{len(rows)} of {len(layouts)} done (--resume)'}; "
          f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


def _layout_check(opts: SweepOptions, model, topo):
    """The single run's refusals of the given flags for one layout (those that need only the
    layout: :func:`sim.options.applicable.check_layout`), with the EP group's nodes on ``topo``."""
    spec = with_training_overrides(model, opts.training)
    return lambda par: applicable.check_layout(opts.given, spec,
                                               with_ep_nodes(par, topo, opts.placement))


def _named(reason: str, name_field: Callable[[str], str]) -> str:
    """A skip reason ``"tp: why"`` with its option named by ``name_field``."""
    head, sep, why = reason.partition(": ")
    return f"{name_field(head)}{sep}{why}" if sep and _OPTION_NAME.fullmatch(head) else reason


def _by_flag(skipped: list[tuple[str, str]], given: frozenset[str]) -> dict[str, list[str]]:
    """The skip reasons that name a flag given on the command line, by flag."""
    out: dict[str, list[str]] = {}
    for _, reason in skipped:
        flag = reason.split(": ", 1)[0]
        if flag in given:
            out.setdefault(flag, []).append(reason.split(": ", 1)[1])
    return out


def _refuse_no_layout(skipped: list[tuple[str, str]], given: frozenset[str]) -> None:
    """No valid layout: when one given flag applies to none, the error names it and why."""
    flags = _by_flag(skipped, given)
    if len(flags) == 1 and sum(map(len, flags.values())) == len(skipped):
        flag, reasons = next(iter(flags.items()))
        raise UsageError(f"applies to no layout of the sweep ({plural(len(skipped), 'layout')}"
                         f"; e.g. {skipped[0][0]}: {reasons[0]})", field=flag)
    why = "; ".join(f"{k}: {r}" for k, r in skipped[:3])
    raise UsageError(f"no valid layout among {len(skipped)} combinations ({why}"
                     f"{' …' if len(skipped) > 3 else ''})", field="tp")


def _run_pending(opts: SweepOptions, ctx: SweepContext, gpus: int, layouts,
                 skipped: list[tuple[str, str]],
                 store: ResultStore, done: dict[str, Any], out: Path
                 ) -> tuple[str, int, BestFirst | None]:
    """Simulate the layouts not yet in ``done`` (at most ``opts.limit``), appending each row
    to ``store`` as it comes; returns the backend's description, how many ran and (``--best``)
    the best-first order."""
    keys = {lay.key for lay in layouts}
    already = sum(1 for k in done if k in keys)
    pending = [lay for lay in layouts if lay.key not in done]
    if opts.limit:
        pending = pending[:opts.limit]
    err = sys.stderr
    print(f"sweep {ctx.model.name} on {gpus} GPUs of {ctx.topology.name}: "
          f"{plural(len(layouts), 'valid layout')} ({plural(len(skipped), 'combination')} "
          "skipped as invalid), "
          f"{already} already done, {len(pending)} to run; results in {out}/", file=err)
    for flag, reasons in _by_flag(skipped, opts.given).items():  # never silently
        print(f"  {flag} does not apply to {plural(len(reasons), 'layout')}, skipped (e.g. "
              f"{reasons[0]}; each reason in results.json)", file=err)
    # the early feasibility pass (on the workers): a layout whose memory check decides it is
    # a result at once, only the others are simulated; best-first, with the lower bound of
    # every candidate (also those simulated before a --resume: they take part in the proof)
    best = opts.best is not None
    targets = ([lay for lay in layouts if done.get(lay.key, {}).get("status", "ok") == "ok"]
               if best else pending)
    pre = early_pass(ctx, targets, best, **backend_of(opts))
    decided = {lay.key: pre[lay.key] for lay in pending if pre[lay.key]["status"] != "fits"}
    todo = [lay for lay in pending if lay.key not in decided]
    order, stop = None, None
    if best:
        order = BestFirst({k: r for k, r in pre.items() if r["status"] == "fits"}, opts.best,
                          int(opts.memory_headroom_gb * 1e9))
        at = {k: i for i, k in enumerate(order.order)}
        todo = sorted((lay for lay in layouts if lay.key in at and lay.key not in done),
                      key=lambda lay: at[lay.key])[:opts.limit or None]
    # layouts that may simulate the same (e.g. recompute none / selective with a fused
    # attention kernel) go to one task, which simulates each distinct one once
    todo, twins = twin_groups(todo, pre if best else None)
    ctx = replace(ctx, twins=twins)
    if order is not None:
        def stop(n: int) -> bool:  # the next candidate to start is todo[n]
            return n >= len(todo) or order.stop_before(done, at[todo[n].key])
    # a bar only on a terminal (never in pipes, files or CI logs), after 2 s like the run's and
    # validate's progress line (sim/runtime/progress.py), and closed before any message
    bar = tqdm(total=len(layouts), initial=already, desc="sweep", unit="layout", file=err,
               disable=not opts.progress or not err.isatty(), delay=progress.DELAY_S, leave=False,
               mininterval=0.5, dynamic_ncols=True)
    ran = [0]

    def on_result(row: dict[str, Any]) -> None:
        ran[0] += 1
        store.append(row)
        done[row["layout"]] = row
        bar.update(1)
        bar.set_postfix_str(f"{row['layout']}: {row['status']}", refresh=False)

    if decided:
        print(f"  {plural(len(decided), 'layout')} decided by the memory check alone (not "
              "simulated)", file=err)
    for row in decided.values():
        on_result(row)
    if order is not None:
        print(f"  {plural(len(order.order), 'layout')} fit: simulated in the order of their lower "
              f"bound until the first {opts.best} of the ranking are proven (--best)", file=err)
    previous = _raise_on_sigterm()
    try:
        backend = run_tasks(ctx, todo, on_result, stop=stop, **backend_of(opts),
                            **({"task": evaluate_twins} if twins else {}))
    except KeyboardInterrupt:
        bar.close()
        store.close()
        n = sum(1 for k in done if k in keys)
        print(f"sweep interrupted: {n} of {len(layouts)} layouts are in {store.results_path}; "
              "rerun with --resume to continue", file=err)
        raise
    finally:
        bar.close()  # before any error message, so it is never drawn inside the bar
        _restore_sigterm(previous)
    store.close()
    return backend, ran[0], order


def _raise_on_sigterm():
    """Treat SIGTERM like Ctrl-C while layouts run (same clean stop); returns the old handler."""

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        raise Terminated(signum)

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)

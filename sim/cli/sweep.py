"""``simrun sweep``: flags of a layout sweep (:mod:`sim.sweep.driver`).

    simrun sweep --model workloads/models/gpt3-175b.yaml --topo topologies/dgx-a100-1024.yaml \\
        --gpus 1024 --tp 2,4,8 --pp 4,8,16 --vpp 1,2,3 --micro-batch 1,2 --global-batch 1536 \\
        --sequence-parallel --recompute selective --distributed-optimizer --out sweep-175b

See docs/sweeps.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import replace

from sim.cli.args import (
    add_group_size_argument,
    add_model_compute_arguments,
    add_network_arguments,
    add_set_argument,
    add_watchdog_argument,
    network_options,
    training_of,
)
from sim.cli.calibration_args import calibration_of
from sim.cli.fields import flag_of
from sim.cli.host_args import add_host_dispatch_argument
from sim.cli.simulation_args import add_interference_arguments
from sim.cli.sweep_args import add_refused_arguments, layout_checked, simulation_options
from sim.cli.training_args import add_training_arguments
from sim.cli.types import Parser, _number, given_flags, nonneg_int, positive_float, positive_int
from sim.errors import UsageError
from sim.limits import parse_float, parse_int
from sim.models.compute_setup import ComputeOptions
from sim.pipeline.schedules import SCHEDULES
from sim.sweep.driver import SweepOptions, run_sweep
from sim.sweep.output import DEFAULT_HEADROOM_GB
from sim.sweep.runner import DASK_MISSING
from sim.sweep.space import Space
from sim.sweep.variants import split_argv

headroom_gb = _number(parse_float, lambda v: 0 <= v <= 1000, "a number of GB in [0, 1000]")


def build_parser() -> Parser:
    p = Parser(prog="simrun sweep",
               description="Enumerate the valid parallel layouts of a model on N GPUs, check "
                           "their memory, simulate each and rank them (times in s, memory in GB "
                           "= 1e9 bytes).")
    g = p.add_argument_group("inputs")
    g.add_argument("--model", metavar="PATH|NAME", required=True,
                   help="model spec YAML, or the name of a shipped one ('simrun list models')")
    g.add_argument("--topo", metavar="PATH|NAME", required=True,
                   help="cluster topology YAML file, or the name of a shipped one "
                        "('simrun list topologies')")
    g.add_argument("--nodes", type=positive_int, help="number of nodes (default: the file's)")
    g.add_argument("--gpus", type=positive_int,
                   help="GPUs every layout uses: TP·PP·DP·CP = GPUS (default: all of the topology)")
    add_set_argument(g)
    g = p.add_argument_group("layout space (comma-separated lists)")
    g.add_argument("--tp", "--tensor-model-parallel-size", metavar="LIST", dest="tp",
                   help="TP sizes (default: powers of two up to the GPUs of one node)")
    g.add_argument("--pp", "--pipeline-model-parallel-size", metavar="LIST", dest="pp",
                   help="PP sizes (default: divisors of the layer count)")
    g.add_argument("--vpp", "--virtual-pipeline-model-parallel-size", metavar="LIST", dest="vpp",
                   help="model chunks per stage; > 1 uses the interleaved schedule (default: "
                        "each schedule's own: 2 for zb-v and dualpipe, else 1)")
    g.add_argument("--micro-batch", "--micro-batch-size", metavar="LIST", default="1",
                   dest="micro_batch",
                   help="micro batch sizes (default: %(default)s)")
    g.add_argument("--ep", "--expert-model-parallel-size", metavar="LIST", default="1", dest="ep",
                   help="expert-parallel sizes, MoE models (default: %(default)s)")
    g.add_argument("--expert-tensor-parallel-size", metavar="LIST", dest="etp",
                   help="expert tensor-parallel sizes, MoE models: each expert's weights split "
                        "N ways, the stage's ranks regrouped ETP x EP x EDP (Megatron-Core; "
                        "default: each layout's TP)")
    g.add_argument("--context-parallel-size", "--cp", metavar="LIST", default="1", dest="cp",
                   help="context-parallel sizes (default: %(default)s; > 1 needs a fused "
                        "attention backend: the default)")
    g.add_argument("--zero", metavar="LIST",
                   help="ZeRO stages among 0,1,2,3 (default: 0 = Megatron DDP / "
                        "--distributed-optimizer; 3 with --fsdp)")
    g.add_argument("--schedule", metavar="LIST", default="",
                   help=f"pipeline schedules among {','.join(SCHEDULES)} (default: "
                        "interleaved if vpp > 1, else 1f1b)")
    add_group_size_argument(g)
    g = p.add_argument_group("training (shared by every layout)")
    g.add_argument("--global-batch", "--global-batch-size", type=positive_int, required=True,
                   metavar="B", dest="global_batch",
                   help="sequences per iteration")
    g.add_argument("--vary", metavar="SWITCH[,SWITCH...]",
                   help="sweep these training switches off and on (e.g. "
                        "sequence-parallel,overlap-grad-reduce); a training flag with a value "
                        "takes a comma-separated list instead (--recompute none,selective, "
                        "--dtype bf16,fp8)")
    add_training_arguments(g, sweep=True)
    g = p.add_argument_group("simulation (as in a single run)")
    g.add_argument("--placement", default="tp-dp-pp", metavar="ORDER",
                   help="rank-to-GPU order, fastest dimension first (default: %(default)s)")
    add_interference_arguments(g)
    add_host_dispatch_argument(g)
    add_watchdog_argument(g)
    add_network_arguments(p)
    add_model_compute_arguments(p.add_argument_group("compute model (docs/kernel-tables.md)"))
    g = p.add_argument_group("execution and outputs")
    g.add_argument("--out", metavar="DIR",
                   help="results directory (default: sweep-<model>-<GPUS>gpu)")
    g.add_argument("--resume", action="store_true",
                   help="continue the sweep in --out: skip layouts already recorded")
    g.add_argument("--overwrite", action="store_true",
                   help="discard earlier results in --out and start again")
    g.add_argument("--workers", type=positive_int,
                   help="local worker processes (default: all cores; 1 = in this process)")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the layouts on a Dask cluster, e.g. tcp://10.0.0.5:8786 (workers "
                        "need simrun installed; not the input files)")
    g.add_argument("--scheduler-timeout", type=positive_float, default=10.0, metavar="S",
                   help="seconds to try to reach the Dask scheduler (default: %(default)s)")
    g.add_argument("--limit", type=nonneg_int,
                   help="run at most this many not-yet-done layouts, then stop (continue later "
                        "with --resume); 0: count and list the valid layouts with their memory, "
                        "simulate nothing")
    g.add_argument("--memory-headroom", type=headroom_gb, default=DEFAULT_HEADROOM_GB,
                   metavar="GB",
                   help="flag feasible layouts with less than GB to spare and rank them after "
                        "the others (default: %(default)s, the memory model's largest known "
                        "error: docs/sweeps.md)")
    g.add_argument("--full-simulation", action="store_true",
                   help="simulate every microbatch of every layout (default: where a layout's "
                        "pipeline is periodic, three short runs extrapolated exactly; "
                        "docs/sweeps.md)")
    g.add_argument("--best", type=positive_int, metavar="K",
                   help="best-first: simulate the layouts in the order of a proven lower bound "
                        "on their iteration time and stop once the first K of the ranking are "
                        "proven; the others are 'pruned' rows with their bound (default: "
                        "simulate every layout; docs/sweeps.md)")
    g.add_argument("--show-infeasible", action="store_true",
                   help="list every infeasible or failed layout in the table (default: one "
                        "line per status)")
    g.add_argument("--top", type=positive_int, default=30,
                   help="feasible layouts shown in the table (default: %(default)s; all are in "
                        "the CSV)")
    g.add_argument("--no-plot", action="store_true", help="do not write ranking.png/heatmap.png")
    g.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    g.add_argument("--quiet", action="store_true", help="do not print the table")
    add_refused_arguments(p)
    return p


def parse_list(text: str, flag: str) -> tuple[int, ...]:
    """``"1,2,4"`` → ``(1, 2, 4)``; each a positive integer (:class:`UsageError` otherwise)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        v = parse_int(part)
        if v is None:
            raise UsageError(f"expected comma-separated positive integers, got {text!r}",
                             field=flag)
        if v < 1:
            raise UsageError(f"expected positive integers, got {v}", field=flag)
        out.append(v)
    if not out:
        raise UsageError("empty list", field=flag)
    return tuple(out)


def parse_stages(text: str) -> tuple[int, ...]:
    """``"0,3"`` → ``(0, 3)``: ZeRO stages (``--zero``), each 0-3."""
    out = []
    for part in text.split(","):
        if part.strip() not in ("0", "1", "2", "3"):
            raise UsageError(f"expected ZeRO stages among 0,1,2,3, got {text!r}", field="--zero")
        out.append(int(part))
    return tuple(out)


def parse_schedules(text: str) -> tuple[str, ...]:
    """``"1f1b,zb-h1"`` → the schedule names (``--schedule``); ``""`` → the default."""
    if not text.strip():
        return ("",)
    out = tuple(p.strip() for p in text.split(","))
    for name in out:
        if name not in SCHEDULES:
            raise UsageError(f"unknown schedule {name!r}; choose among {', '.join(SCHEDULES)}",
                             field="--schedule")
    return out


def sweep_options(args: argparse.Namespace, given: set[str] | None = None) -> SweepOptions:
    """The sweep the parsed arguments describe; ``given``: the flags on the command line
    (:func:`sim.cli.types.given_flags`), refused per layout where they do not apply."""
    if args.fsdp and args.zero is None:  # FSDP FULL_SHARD: ZeRO-3 semantics, as in a run
        args.zero = "3"
    space = Space(
        gpus=args.gpus, tp=parse_list(args.tp, "--tp") if args.tp else None,
        pp=parse_list(args.pp, "--pp") if args.pp else None,
        vpp=parse_list(args.vpp, "--vpp") if args.vpp is not None else (),
        micro_batch=parse_list(args.micro_batch, "--micro-batch"),
        ep=parse_list(args.ep, "--ep"), cp=parse_list(args.cp, "--context-parallel-size"),
        etp=parse_list(args.etp, "--expert-tensor-parallel-size") if args.etp else (0,),
        zero=parse_stages(args.zero or "0"), schedule=parse_schedules(args.schedule),
        group_size=args.microbatch_group_size or 0)
    return SweepOptions(
        name_field=flag_of,
        model=args.model, topology=args.topo, training=training_of(args), space=space,
        nodes=args.nodes, network=network_options(args),
        placement=args.placement, out=args.out, resume=args.resume, overwrite=args.overwrite,
        workers=args.workers, scheduler=args.scheduler,
        scheduler_timeout_s=args.scheduler_timeout, limit=args.limit, top=args.top,
        memory_headroom_gb=args.memory_headroom, show_infeasible=args.show_infeasible,
        periodic=not args.full_simulation, best=args.best,
        plot=not args.no_plot, progress=not args.no_progress, quiet=args.quiet,
        simulation=simulation_options(args),
        compute=ComputeOptions(args.kernel_table, args.compute_efficiency,
                               sustained_slowdown=args.sustained_slowdown,
                               calibration=calibration_of(args),
                               calibration_any_cluster=args.calibration_any_cluster),
        overrides=tuple(args.set), given=layout_checked(set(given or ())))


def dask_installed() -> bool:
    """Whether the optional 'dask' extra (dask.distributed) is installed (not imported)."""
    return importlib.util.find_spec("distributed") is not None


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun sweep``; returns the exit code (errors raise to sim.cli)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    variants = split_argv(argv)  # swept training options: one command line per combination
    parsed = []
    for v in variants:
        args = build_parser().parse_args(list(v.argv))
        if args.fp8_recipe and args.dtype != "fp8":
            raise UsageError(f"applies to --dtype fp8 sweeps (a {args.dtype} run has no FP8 "
                             "casts)", field="--fp8-recipe")
        parsed.append((v, args))
    args = parsed[0][1]
    if args.scheduler and not dask_installed():  # refused before any work
        raise UsageError(DASK_MISSING, field="--scheduler")
    opts = sweep_options(args, given_flags(build_parser(), list(variants[0].argv)))
    if variants[0].label:
        opts = replace(opts, variants=tuple(
            (v.label, training_of(a), layout_checked(given_flags(build_parser(), list(v.argv))))
            for v, a in parsed))
    return run_sweep(opts)

"""Command-line interface: ``simrun --workload W --topo T`` and the subcommands.

Exit codes: 0 success, 2 bad input or usage, 1 internal error; messages go to stderr as one
line (``simrun: error: <file>:<line>: <field>: <message>``). Set ``SIMRUN_DEBUG=1`` to see
tracebacks of internal errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable

from sim import __version__
from sim.errors import SimrunError, UsageError
from sim.limits import parse_float, parse_int

_T0 = time.perf_counter()

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, help)
    "collective": ("sim.network.predict", "nccl-tests-style collective time/bandwidth predictor"),
    "inspect": ("sim.models.inspect", "show what simrun infers from a model-description file"),
    "generate": ("sim.models.generate_cli", "write a generated workload in AICB text format"),
    "sweep": ("sim.sweep.cli", "simulate many parallel layouts and rank them"),
    "validate": ("sim.validate", "compare predictions with published measured iterations"),
    "list": ("sim.catalog", "list the shipped topologies, models and workloads usable by name"),
}


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` (one line, exit 2) instead of printing usage."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def _number(cast: Callable[[str], float], ok: Callable[[float], bool], what: str):
    """An argparse type: ``cast`` the text, require ``ok(value)``, else say ``what`` it must be."""

    def parse(text: str):
        try:
            v = cast(text)
        except ValueError:
            v = None
        if v is None or not ok(v):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    return parse


positive_int = _number(parse_int, lambda v: v >= 1, "a positive integer")
nonneg_int = _number(parse_int, lambda v: v >= 0, "an integer ≥ 0")
positive_float = _number(parse_float, lambda v: v > 0, "a positive number")


def add_set_argument(g) -> None:
    """``--set KEY=VALUE`` (repeatable): what-if overrides of topology fields."""
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one topology field, validated like the file (repeatable; "
                        "units as in the file: e.g. fabric.link_bandwidth_gbps=800 in Gb/s, "
                        "node.gpu.hbm_GBps=4800 in GB/s, fabric.levels[0].oversubscription=2); "
                        "listed in the report's assumptions (default: none)")


def warn_topology(topo) -> None:
    """Print the topology's physical-consistency warnings to stderr (also in the report)."""
    for w in topo.warnings:
        print(f"simrun: warning: {w}", file=sys.stderr)


def add_layout_arguments(p: argparse.ArgumentParser) -> None:
    """Parallel-layout overrides shared by the run and other subcommands."""
    g = p.add_argument_group("parallel layout (override the workload header)")
    g.add_argument("--tp", type=positive_int,
                   help="tensor-parallel size (default: from the file, else 1)")
    g.add_argument("--pp", type=positive_int,
                   help="pipeline stages (default: from the file, else 1)")
    g.add_argument("--ep", type=positive_int,
                   help="expert-parallel size (default: from the file, else 1)")
    g.add_argument("--vpp", type=positive_int,
                   help="virtual pipeline size = model chunks per stage (default: header vpp if "
                        "it is a valid Megatron virtual pipeline size, else 1)")
    g.add_argument("--microbatches", type=positive_int,
                   help="microbatches per iteration (default: header ga, else 1)")
    g.add_argument("--gpus", type=positive_int,
                   help="total GPUs; DP = GPUs / (TP·PP) (default: header all_gpus, else all "
                        "GPUs of the topology)")
    g.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved"),
                   help="pipeline schedule (default: interleaved if vpp > 1, else 1f1b)")
    g.add_argument("--microbatch-group-size", type=positive_int,
                   help="interleaved schedule: microbatches per group N, in [PP, microbatches] "
                        "(Megatron's microbatch_group_size_per_vp_stage; default PP)")
    g.add_argument("--pp-comm-bytes", type=nonneg_int,
                   help="bytes sent between adjacent stages per microbatch (default: header "
                        "pp_comm, else derived from the TP collective sizes; stated in output)")
    g.add_argument("--row-placement", choices=("megatron", "all"), default="megatron",
                   help="which AICB rows run on which stage: 'megatron' puts embedding rows on "
                        "the first and output/loss rows on the last stage; 'all' runs every row "
                        "on every stage (default: %(default)s)")
    g.add_argument("--placement", default="tp-dp-pp", metavar="ORDER",
                   help="rank-to-GPU order, fastest dimension first (default: %(default)s)")


def build_parser() -> Parser:
    sub = "\n".join(f"  simrun {name:<11} {helptext}"
                    for name, (_, helptext) in SUBCOMMANDS.items())
    p = Parser(
        prog="simrun",
        description="Simulate one training iteration of a large model on a GPU cluster and "
                    "report where the time goes. Times are reported in seconds (s) or "
                    "milliseconds (ms), sizes in bytes.",
        epilog=f"subcommands (run 'simrun <name> --help'):\n{sub}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"simrun {__version__}")
    g = p.add_argument_group("inputs")
    g.add_argument("--workload", metavar="PATH|NAME",
                   help="workload file (AICB text or operator table), or the name of a shipped "
                        "example ('simrun list workloads')")
    g.add_argument("--format", choices=("aicb", "optable"),
                   help="force a workload reader (default: detected from the content)")
    g.add_argument("--topo", metavar="PATH|NAME", required=True,
                   help="cluster topology YAML file, or the name of a shipped one "
                        "('simrun list topologies')")
    g.add_argument("--nodes", type=positive_int,
                   help="number of nodes (default: the topology file's node count)")
    add_set_argument(g)
    add_layout_arguments(p)
    from sim.models.cli_args import add_model_arguments

    add_model_arguments(p)
    g = p.add_argument_group("operator-table workloads")
    g.add_argument("--bytes-per-element", type=positive_int, default=4,
                   help="bytes per element of communication sizes given as element counts "
                        "(default: %(default)s, fp32 gradients)")
    g.add_argument("--missing-backward-ratio", type=positive_float, default=2.0,
                   help="when a file has no backward times: backward = RATIO × forward, split "
                        "equally into input-grad and weight-grad (default: %(default)s)")
    g = p.add_argument_group("simulation")
    g.add_argument("--per-rank", action="store_true",
                   help="simulate every rank instead of one representative per stage")
    g.add_argument("--no-fuse", action="store_true",
                   help="give every compute and collective its own event (slower; for checking)")
    from sim.watchdog import add_watchdog_argument

    add_watchdog_argument(g)
    _add_network_args(p)
    g = p.add_argument_group("outputs")
    g.add_argument("--json", metavar="PATH", help="write the report as JSON (schema: "
                                                  "docs/report-schema.md)")
    g.add_argument("--quiet", action="store_true", help="do not print the report")
    g.add_argument("--verbose", action="store_true",
                   help="print every stage, per-layer totals and every assumption (default: a "
                        "short summary with the three assumptions that matter most)")
    g.add_argument("--timing", action="store_true",
                   help="print wall times (s) and simulated events per second to stderr")
    from sim.viz.cli import add_output_arguments

    add_output_arguments(p)
    return p


def _add_network_args(p: argparse.ArgumentParser) -> None:
    from sim.faults import add_fault_arguments
    from sim.network import add_network_arguments

    add_network_arguments(p)
    add_fault_arguments(p)


def run(argv: list[str]) -> int:
    """The main job: workload + topology → simulated iteration → report."""
    import dataclasses

    from sim import applicable
    from sim.engine import simulate
    from sim.faults import Faults, faults_from_args, simulation_plan
    from sim.network import network_from_args
    from sim.outputs import check_output_paths, is_stdout, write_json
    from sim.placement import Placement
    from sim.progress import Progress
    from sim.report import build_report, format_report
    from sim.report.build import notable_ranks
    from sim.topology import load_topology
    from sim.viz import cli as viz
    from sim.watchdog import simulate_watched
    from sim.workload.registry import read_workload
    from sim.workload.stages import LayoutOptions, build_program

    args = build_parser().parse_args(argv)
    if bool(args.workload) == bool(args.model):
        raise UsageError("give --workload PATH or --model PATH (exactly one)", field="--workload")
    given = applicable.given_flags(build_parser(), argv)
    if args.model:
        applicable.check_model_input(given)
    check_output_paths({"--json": args.json, "--trace": args.trace, "--plot": args.plot,
                        "--breakdown-plot": args.breakdown_plot},
                       {"--workload": args.workload, "--model": args.model, "--topo": args.topo},
                       stdout_ok=("--json",))
    topo = load_topology(args.topo, nodes=args.nodes, overrides=args.set)
    warn_topology(topo)
    model_run = None
    if args.model:  # model-driven workload: sim/models/cli_args.py
        from sim.models.cli_args import model_run_from_args

        model_run = model_run_from_args(args, topo)
        applicable.check_model_effect(given, model_run.par.tp, model_run.par.dp,
                                      model_run.memory.feasible)
        prog = model_run.program
    else:
        wl = read_workload(args.workload, args.format, bytes_per_element=args.bytes_per_element,
                           backward_ratio=args.missing_backward_ratio)
        applicable.check_workload_input(given, wl)
        if wl.format == "aicb":
            applicable.check_file_layout(wl, args.tp, args.ep)
        prog = build_program(wl, LayoutOptions(
            tp=args.tp, pp=args.pp, ep=args.ep, vpp=args.vpp, microbatches=args.microbatches,
            all_gpus=args.gpus, schedule=args.schedule, pp_comm_bytes=args.pp_comm_bytes,
            row_placement=args.row_placement, microbatch_group_size=args.microbatch_group_size,
            default_gpus=topo.num_gpus))
    if prog.world_size > topo.num_gpus:
        raise UsageError(
            f"the layout needs {prog.world_size} GPUs (TP {prog.tp} x PP {prog.pp} x DP "
            f"{prog.dp}) but {args.topo} has {topo.num_gpus} ({topo.num_nodes} nodes x "
            f"{topo.gpus_per_node}); use --nodes or --gpus", field="--gpus")
    placement = Placement(prog.tp, prog.dp, prog.pp, prog.ep, args.placement)
    faults = faults_from_args(args, topo)
    classes, scale, fault_notes = simulation_plan(faults, topo, placement, args.per_rank)
    viz.check_output_arguments(args, placement, classes.label == "per-rank", classes.reps)
    viz.check_trace_size(args, prog, placement, classes.label == "per-rank", classes.reps)
    net = network_from_args(args, dataclasses.replace(topo, faults=faults))
    t_sim = time.perf_counter()
    with Progress(f"simulating {prog.world_size} GPUs"):
        result = simulate_watched(simulate, prog, net, max_sim_time_s=args.max_sim_time_s,
                                  placement=placement, classes=classes, compute_scale=scale,
                                  fuse=not args.no_fuse, record_spans=viz.wants_spans(args))
    t_sim = time.perf_counter() - t_sim
    extra = [f"placement: {placement.order_string} (rank r on GPU r, node r // "
             f"{topo.gpus_per_node})"] + fault_notes
    fault_report = None
    if not faults.empty:  # the same run on a healthy cluster, for the comparison
        healthy_net = network_from_args(args, dataclasses.replace(topo, faults=Faults()))
        with Progress("simulating the healthy cluster for the comparison"):
            healthy = simulate(prog, healthy_net, placement=placement, fuse=not args.no_fuse)
        fault_report = faults.report(result.iteration_ns, healthy.iteration_ns)
    if prog.world_size < topo.num_gpus:
        extra.append(f"the layout uses {prog.world_size} of the topology's {topo.num_gpus} GPUs")
    if model_run is not None:
        extra += model_run.assumptions()
    report_extra = dict(model_run.report_extra(result.iteration_ns)) if model_run else {}
    report_extra.update(fault_report or {})
    rep = build_report(result, workload=args.workload or args.model, topology=args.topo,
                       extra_assumptions=extra, extra=report_extra or None)
    if args.json is not None:
        write_json(args.json, rep)
    if not args.quiet and not is_stdout(args.json):  # `--json -`: stdout holds the JSON only
        notable = notable_ranks(result) if fault_report else []
        sys.stdout.write(format_report(rep, verbose=args.verbose, notable=notable))
    viz.write_outputs(args, result, rep, placement=placement, gpus_per_node=topo.gpus_per_node)
    if args.timing:
        print(f"timing: simulate {t_sim:.3f} s, {result.events} events "
              f"({result.events / max(t_sim, 1e-9):,.0f} events/s), "
              f"{len(result.ranks)} simulated ranks; process so far "
              f"{time.perf_counter() - _T0:.3f} s", file=sys.stderr)
    return 0


def _subcommand(name: str) -> Callable[[list[str]], int]:
    import importlib

    module, _ = SUBCOMMANDS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise UsageError(f"subcommand {name!r} is not available in this build") from None
        raise
    return mod.main


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``simrun`` console script; returns the exit code. Run as the program
    (``argv`` None), signals after the command end it quietly (:mod:`sim.process`)."""
    from sim.process import exit_status, quiet_shutdown, terminate_as_interrupt

    as_program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # nothing to run: say how to run something (usage error, exit 2)
        sys.stderr.write(
            "usage: simrun (--workload PATH|NAME | --model PATH|NAME) --topo PATH|NAME "
            "[options]\n       simrun <subcommand> [options]\n\n" + build_parser().epilog
            + "\n\nexample: simrun --workload aicb-gpt-h16384-tp8-pp16-dp8-1024gpu --topo "
            "dgx-a100-1024\nrun 'simrun --help' for every flag, with its unit and default\n")
        return 2
    restore = terminate_as_interrupt()
    try:
        if argv and argv[0] in SUBCOMMANDS:
            return int(_subcommand(argv[0])(argv[1:]) or 0)
        return run(argv)
    except SimrunError as e:
        print(f"simrun: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP
        code, word = exit_status(e)
        print(f"simrun: {word}", file=sys.stderr)
        return code
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - last-resort guard: no traceback for users
        if os.environ.get("SIMRUN_DEBUG"):
            traceback.print_exc()
        print(f"simrun: internal error: {type(e).__name__}: {e} (set SIMRUN_DEBUG=1 for a "
              "traceback)", file=sys.stderr)
        return 1
    finally:
        restore()
        if as_program:
            quiet_shutdown()


if __name__ == "__main__":
    sys.exit(main())

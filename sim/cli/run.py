"""``simrun --workload W --topo T`` (or ``--model M``): the main run's flags and its scenario."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from sim import __version__
from sim.cli.args import (
    add_compute_arguments,
    add_fault_arguments,
    add_layout_arguments,
    add_model_arguments,
    add_network_arguments,
    add_output_arguments,
    add_set_argument,
    add_watchdog_argument,
    check_model_only_flags,
    compute_options,
    fault_options,
    layout_request,
    model_input,
    network_options,
    output_options,
    warn_topology,
)
from sim.cli.host_args import add_host_dispatch_argument, host_dispatch_ns
from sim.cli.jobs import add_job_arguments, add_job_config_argument, assumption_lines, expand
from sim.cli.simulation_args import add_interference_arguments
from sim.cli.types import (
    Parser,
    given_flags,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    sample_count,
)
from sim.errors import UsageError
from sim.files.outputs import is_stdout
from sim.options import applicable
from sim.report.build import fault_context
from sim.scenario import (
    Scenario,
    SimulationOptions,
    WorkloadInput,
    run_scenario,
    variability,
    write_figures_of,
    write_report,
)
from sim.workload.registry import is_collective_log


def build_parser(subcommands: dict[str, tuple[str, str]]) -> Parser:
    """The parser of the main run; ``subcommands`` (name: (module, help)) go in the epilog."""
    sub = "\n".join(f"  simrun {name:<11} {helptext}"
                    for name, (_, helptext) in subcommands.items())
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
                   help="workload file (AICB text, AICB physical-format CSV with --model, or "
                        "operator table), a folder of per-rank Chakra .et traces (written by "
                        "--chakra, Chakra's generators or converted from PyTorch; the 'chakra' "
                        "extra), or the name of a shipped example ('simrun list workloads')")
    g.add_argument("--format", choices=("aicb", "optable"),
                   help="force a workload reader (default: detected from the content)")
    g.add_argument("--topo", metavar="PATH|NAME", required=True,
                   help="cluster topology YAML file, or the name of a shipped one "
                        "('simrun list topologies')")
    g.add_argument("--nodes", type=positive_int,
                   help="number of nodes (default: the topology file's node count)")
    g.add_argument("--nproc-per-node", type=positive_int, metavar="K",
                   help="processes per node, as torchrun's --nproc-per-node (SLURM "
                        "--ntasks-per-node): each node's first K GPUs run ranks, the rest idle; "
                        "rank r on node r // K (e.g. 64 of an NVL72 rack's 72 GPUs, so that "
                        "power-of-two TP/EP groups stay in one rack; default: every GPU)")
    add_set_argument(g)
    add_job_arguments(g)
    add_job_config_argument(g)
    add_layout_arguments(p)
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
    g.add_argument("--full-simulation", action="store_true",
                   help="simulate every microbatch of a model run (default: where its pipeline "
                        "is periodic, three short runs extrapolated exactly, the same report; "
                        "docs/sweeps.md)")
    add_watchdog_argument(g)
    add_interference_arguments(g)
    g.add_argument("--jitter", type=nonneg_float, default=0.0, metavar="CV",
                   help="variability: multiply every kernel time by a seeded lognormal factor "
                        "(mean 1, coefficient of variation CV) and every transfer by the same "
                        "truncated below at 1; runs --samples samples of every rank and reports "
                        "p50/p90/p99 iteration time and the mean slowdown (default: 0, none)")
    g.add_argument("--samples", type=sample_count, metavar="N",
                   help="variability samples with --jitter (default: 1)")
    g.add_argument("--seed", type=nonneg_int, metavar="S",
                   help="seed of the --jitter draws (default: 0); same seed, same output")
    add_host_dispatch_argument(g)
    add_network_arguments(p)
    add_compute_arguments(p)
    add_fault_arguments(p)
    g = p.add_argument_group("outputs")
    g.add_argument("--json", metavar="PATH", help="write the report as JSON (schema: "
                                                  "docs/report-schema.md)")
    g.add_argument("--quiet", action="store_true", help="do not print the report")
    g.add_argument("--verbose", action="store_true",
                   help="print every stage, per-layer totals and every assumption (default: a "
                        "short summary with the assumptions that matter most)")
    g.add_argument("--timing", action="store_true",
                   help="print wall times (s) and simulated events per second to stderr")
    add_output_arguments(p)
    return p


def scenario_of(args: argparse.Namespace, given: set[str] | None = None) -> Scenario:
    """The :class:`Scenario` the parsed arguments describe (usage errors name the flag);
    ``given``: the flags on the command line (:func:`sim.cli.types.given_flags`), refused
    where they do not apply to the input."""
    given = set() if given is None else given
    if args.workload and args.model and is_collective_log(args.workload):
        # AICB's physical-format log: its collectives, the model's compute
        applicable.check_given(given, "aicb-csv")
        workload = dataclasses.replace(model_input(args), collective_log=args.workload)
    elif bool(args.workload) == bool(args.model):
        raise UsageError("give --workload PATH or --model PATH (exactly one; both only for "
                         "AICB's physical-format CSV)", field="--workload")
    elif args.model:
        applicable.check_given(given, "model")
        workload = model_input(args)
    else:
        check_model_only_flags(args, given)
        workload = WorkloadInput(args.workload, args.format,
                                 bytes_per_element=args.bytes_per_element,
                                 missing_backward_ratio=args.missing_backward_ratio,
                                 pp_comm_bytes=args.pp_comm_bytes,
                                 row_placement=args.row_placement,
                                 given_flags=frozenset(given))
    return Scenario(
        workload=workload, topology=args.topo, layout=layout_request(args), nodes=args.nodes,
        network=network_options(args), faults=fault_options(args),
        simulation=SimulationOptions(per_rank=args.per_rank, fuse=not args.no_fuse,
                                     periodic=not args.full_simulation,
                                     max_sim_time_s=args.max_sim_time_s,
                                     placement=args.placement,
                                     nccl_channels=args.nccl_channels,
                                     comm_overlap_slowdown=args.comm_overlap_slowdown,
                                     host_dispatch_ns=host_dispatch_ns(args),
                                     **_variability(args)),
        outputs=output_options(args), compute=compute_options(args),
        topology_overrides=tuple(args.set), nproc_per_node=args.nproc_per_node)


def _variability(args: argparse.Namespace) -> dict:
    """``--jitter``, ``--samples`` and ``--seed``; the latter two need the first."""
    if not args.jitter:
        for flag, value in (("--samples", args.samples), ("--seed", args.seed)):
            if value is not None:
                raise UsageError("needs --jitter CV > 0 (without noise every sample is the "
                                 "deterministic run)", field=flag)
    return {"jitter_cv": args.jitter, "samples": args.samples or 1, "seed": args.seed or 0}


def run(argv: list[str], subcommands: dict[str, tuple[str, str]], t0: float,
        megatron: list[str] | None = None) -> int:
    """The main job: workload + topology → simulated iteration → report. ``t0``: process
    start (perf_counter), for ``--timing``; ``megatron``: Megatron-LM arguments
    (``simrun megatron ... -- ARGS``)."""
    parser = build_parser(subcommands)  # parsing leaves it as it was; given_flags spends it
    argv, job, spec = expand(argv, parser, megatron)
    args = parser.parse_args(argv)
    given = given_flags(parser, argv)
    scenario = scenario_of(args, given)
    if spec is not None:
        scenario = dataclasses.replace(
            scenario, workload=dataclasses.replace(scenario.workload, spec=spec))
    res = run_scenario(scenario)
    if job is not None:
        res.report["assumptions"] += assumption_lines(job)
    applicable.check_effect(given, res.report["assumptions"], res.model_run, args.set)
    warn_topology(res.topology)
    write_report(res)
    if not args.quiet and not is_stdout(args.json):  # `--json -`: stdout holds the JSON only
        from sim.report.text import format_report  # the table's code loads when it is printed

        sys.stdout.write(format_report(res.report, verbose=args.verbose,
                                       **fault_context(res.result, res.healthy)))
        if "variability" in res.report:
            sys.stdout.write(variability.line(res.report["variability"]))
    write_figures_of(res)
    if args.timing:
        result, t_sim = res.result, res.simulate_s
        runs = result.periodic_runs
        done = sum(e for _, e in runs) if runs else result.events
        how = (f"extrapolated from short runs of {', '.join(str(m) for m, _ in runs)} "
               f"microbatches: {done} simulated, " if runs else "")
        print(f"timing: simulate {t_sim:.3f} s, {result.events} events "
              f"({how}{done / max(t_sim, 1e-9):,.0f} events/s), "
              f"{len(result.ranks)} simulated ranks; process so far "
              f"{time.perf_counter() - t0:.3f} s", file=sys.stderr)
    return 0

"""Argument groups shared by ``simrun`` and its subcommands, and their typed options.

Each ``add_*`` registers a group of flags; the matching function turns the parsed arguments
into the typed option object the scenario takes (:mod:`sim.scenario.options`). A new flag goes
next to its group here and into the option dataclass its converter fills.
"""

from __future__ import annotations

import argparse
import sys

from sim.cli.calibration_args import add_calibration_arguments, calibration_of
from sim.cli.training_args import add_training_arguments, training_of
from sim.cli.types import (
    fraction,
    nonneg_int,
    positive_int,
    scale_factor,
    sim_time_s,
    slowdown,
)
from sim.errors import UsageError
from sim.faults import parse_link, parse_nic, parse_slow
from sim.limits import parse_float
from sim.models.compute_setup import ComputeOptions
from sim.network.factory import ROUTINGS
from sim.options.registry import file_refusals
from sim.parallel.layout import LayoutRequest
from sim.pipeline.schedules import SCHEDULES
from sim.runtime.watchdog import DEFAULT_MAX_SIM_TIME_S
from sim.runtime.watchdog import FLAG as WATCHDOG_FLAG
from sim.scenario.options import FaultOptions, ModelInput, NetworkOptions, OutputOptions
from sim.topology.spec import PROTOCOLS


def add_set_argument(g: argparse._ActionsContainer) -> None:
    """``--set KEY=VALUE`` (repeatable): what-if overrides of topology fields."""
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one topology field, validated like the file (repeatable; "
                        "units as in the file: e.g. fabric.link_bandwidth_gbps=800 in Gb/s, "
                        "node.gpu.hbm_GBps=4800 in GB/s, fabric.levels[0].oversubscription=3); "
                        "listed in the report's assumptions (default: none)")


def warn_topology(topo) -> None:
    """Print the topology's physical-consistency warnings to stderr (also in the report)."""
    for w in topo.warnings:
        print(f"simrun: warning: {w}", file=sys.stderr)


def add_layout_arguments(p: argparse.ArgumentParser) -> None:
    """Parallel-layout overrides shared by the run and other subcommands."""
    g = p.add_argument_group("parallel layout (override the workload header)")
    g.add_argument("--tp", "--tensor-model-parallel-size", type=positive_int, dest="tp",
                   help="tensor-parallel size (default: from the file, else 1)")
    g.add_argument("--pp", "--pipeline-model-parallel-size", type=positive_int, dest="pp",
                   help="pipeline stages (default: from the file, else 1)")
    g.add_argument("--ep", "--expert-model-parallel-size", type=positive_int, dest="ep",
                   help="expert-parallel size (default: from the file, else 1)")
    g.add_argument("--vpp", "--virtual-pipeline-model-parallel-size", type=positive_int,
                   dest="vpp",
                   help="virtual pipeline size = model chunks per stage (default: header vpp if "
                        "it is a valid Megatron virtual pipeline size, else 1)")
    g.add_argument("--microbatches", type=positive_int,
                   help="microbatches per iteration (default: header ga, else 1)")
    g.add_argument("--gpus", type=positive_int,
                   help="total GPUs; DP = GPUs / (TP·PP·CP) (default: header all_gpus, else "
                        "all GPUs of the topology)")
    g.add_argument("--schedule", choices=SCHEDULES,
                   help="pipeline schedule (default: interleaved if vpp > 1, else 1f1b); "
                        "zb-h1, zb-h2, zb-v: Qi et al.'s zero-bubble schedules, backward split "
                        "into input- and weight-gradient passes (zb-h2: 2·PP−1 microbatches in "
                        "flight; zb-v: two chunks per stage in V placement, vpp 2; both need ≥ "
                        "2·PP−1 microbatches); dualpipe: DeepSeek-V3's bidirectional DualPipe "
                        "(--model only; even PP, vpp 2, ≥ 2·PP microbatches); docs/schedules.md")
    add_group_size_argument(g)
    g.add_argument("--pp-comm-bytes", type=nonneg_int,
                   help="bytes sent between adjacent stages per microbatch (default: header "
                        "pp_comm, else derived from the TP collective sizes; stated in output)")
    g.add_argument("--row-placement", choices=("megatron", "all"), default="megatron",
                   help="which AICB rows run on which stage: 'megatron' puts embedding rows on "
                        "the first and output/loss rows on the last stage; 'all' runs every row "
                        "on every stage (default: %(default)s)")
    g.add_argument("--placement", default="tp-dp-pp", metavar="ORDER",
                   help="rank-to-GPU order, fastest dimension first (default: %(default)s)")


def add_group_size_argument(g: argparse._ActionsContainer) -> None:
    """``--microbatch-group-size`` (also ``simrun sweep``'s)."""
    g.add_argument("--microbatch-group-size",
                   "--microbatch-group-size-per-virtual-pipeline-stage", type=positive_int,
                   dest="microbatch_group_size",
                   help="interleaved schedule: microbatches per group N, in [PP, microbatches] "
                        "(Megatron's microbatch_group_size_per_vp_stage; default PP)")


def layout_request(args: argparse.Namespace) -> LayoutRequest:
    """The layout the flags ask for (``--dp``, ``--context-parallel-size``, ``--zero`` and
    ``--fsdp`` are model-group flags; absent elsewhere). ``--fsdp`` is ZeRO stage 3."""
    zero = getattr(args, "zero", 0) or (3 if getattr(args, "fsdp", False) else None)
    return LayoutRequest(tp=args.tp, pp=args.pp, dp=getattr(args, "dp", None), ep=args.ep,
                         vpp=args.vpp, microbatches=args.microbatches, gpus=args.gpus,
                         schedule=args.schedule,
                         microbatch_group_size=args.microbatch_group_size,
                         cp=getattr(args, "cp", None), zero=zero, etp=getattr(args, "etp", None))


def add_model_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Add ``--model``, ``--dp``, ``--micro-batch``, ``--global-batch`` and the training options
    (a "model-driven workload" group). ``required``: ``--model`` must be given."""
    g = parser.add_argument_group("model-driven workload (--model instead of --workload)")
    g.add_argument("--model", metavar="PATH|NAME", required=required,
                   help="model spec YAML, a Hugging Face config.json (read by its "
                        "'architectures': docs/workload-formats.md), or the name of a shipped "
                        "spec ('simrun list models'): generate the workload for the layout "
                        "given by --tp/--pp/--dp/--vpp/--ep")
    g.add_argument("--dp", type=positive_int, metavar="N",
                   help="data-parallel size (default: GPUs / (TP·PP), GPUs = --gpus or the "
                        "topology's)")
    g.add_argument("--micro-batch", "--micro-batch-size", type=positive_int, default=1,
                   metavar="B", dest="micro_batch",
                   help="sequences per microbatch (default: %(default)s)")
    g.add_argument("--global-batch", "--global-batch-size", type=positive_int, metavar="B",
                   dest="global_batch",
                   help="sequences per iteration; microbatches = global / (micro·DP) (required "
                        "unless --microbatches is given)")
    add_training_arguments(g)
    g.add_argument("--context-parallel-size", "--cp", type=positive_int, default=1, metavar="N",
                   dest="cp",
                   help="context parallelism (Megatron-Core ring attention): each sequence "
                        "split over N ranks; needs a fused attention backend (default: "
                        "%(default)s)")
    g.add_argument("--zero", type=int, choices=(1, 2, 3), default=0, metavar="STAGE",
                   help="DeepSpeed ZeRO stage: 1 shards the optimizer state, 2 also the "
                        "gradients, 3 also the parameters (per-layer all-gathers)")
    g.add_argument("--expert-tensor-parallel-size", type=positive_int, metavar="N", dest="etp",
                   help="MoE: expert tensor-parallel size, each expert's weights split N ways; "
                        "the stage's TP·DP·CP ranks form ETP x EP x EDP expert groups "
                        "(Megatron-Core; default: the TP size)")
    g.add_argument("--ignore-memory", action="store_true",
                   help="simulate even when the layout does not fit in GPU memory")


def check_model_only_flags(args: argparse.Namespace, given: set[str]) -> None:
    """Flags that change generated workloads only, refused with a workload file before it is
    read: the declared training options (:func:`sim.options.registry.file_refusals`, the
    verdict table's reason) and ``--context-parallel-size``."""
    if args.cp != 1:
        raise UsageError("applies to --model runs (a workload file fixes its rows)",
                         field="--context-parallel-size")
    refused = file_refusals(given)
    if refused:
        flag, why = refused[0]
        raise UsageError(why, field=flag)
    if args.fsdp and args.zero not in (0, 3):
        raise UsageError("FSDP FULL_SHARD is ZeRO stage 3; do not combine with another --zero",
                         field="--fsdp")


def model_input(args: argparse.Namespace) -> ModelInput:
    """``--model`` and its training options; the flags that only apply to workload files are
    refused."""
    if args.pp_comm_bytes is not None:
        raise UsageError("applies to workload files; with --model the pipeline message is "
                         "derived from the model", field="--pp-comm-bytes")
    if args.row_placement != "megatron":
        raise UsageError("applies to workload files; generated workloads place rows as "
                         "Megatron does", field="--row-placement")
    return ModelInput(args.model, training_of(args, args.micro_batch),
                      ignore_memory=args.ignore_memory)


def add_compute_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the compute-model flags (docs/kernel-tables.md)."""
    g = parser.add_argument_group("compute model (docs/kernel-tables.md)")
    add_model_compute_arguments(g)
    g.add_argument("--source-gpu", metavar="NAME",
                   help="workload files: the GPU their compute times were measured on; times "
                        "are scaled to the topology's GPU by the compute models' time ratio")
    g.add_argument("--compute-scale", type=scale_factor, metavar="F",
                   help="workload files: multiply every compute time by F instead")


def add_model_compute_arguments(g: argparse._ActionsContainer) -> None:
    """``--kernel-table`` and ``--compute-efficiency`` (also ``simrun sweep``'s)."""
    g.add_argument("--kernel-table", metavar="FILE|NAME",
                   help="measured kernel times (CSV, e.g. from simrun profile, or a shipped "
                        "table's name: 'simrun list kernels') to time operators by; 'none': "
                        "roofline only (default: the topology GPU's shipped table, "
                        "if any)")
    g.add_argument("--compute-efficiency", type=fraction, metavar="FRACTION",
                   help="large-GEMM fraction of the GPU's dense peak for the roofline (needed "
                        "for a GPU the catalogue does not know; replaces a known GPU's)")
    g.add_argument("--sustained-slowdown", type=slowdown, metavar="F",
                   help="factor on kernel-table times for the sustained load of training (the "
                        "GPU at its power limit; 1: times as measured, kernel by kernel; "
                        "default: the table's measured sustained_slowdown_<dtype>)")
    add_calibration_arguments(g)


def compute_options(args: argparse.Namespace) -> ComputeOptions:
    """The :class:`ComputeOptions` of :func:`add_compute_arguments`."""
    return ComputeOptions(kernel_table=args.kernel_table,
                          compute_efficiency=args.compute_efficiency,
                          source_gpu=args.source_gpu, compute_scale=args.compute_scale,
                          sustained_slowdown=args.sustained_slowdown,
                          calibration=calibration_of(args),
                          calibration_any_cluster=args.calibration_any_cluster)


def add_network_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--algorithm``, ``--protocol`` and ``--routing`` (a "network model" group)."""
    g = parser.add_argument_group("network model")
    g.add_argument("--algorithm", metavar="NAME",
                   help="collective algorithm: auto (least predicted time over algorithms and "
                        "protocols, like NCCL), ring, tree (double binary tree, all-reduce), "
                        "nvls (NVLink SHARP all-reduce in one node), "
                        "hierarchical (2-D: intra-node, inter-node, intra-node), direct; or "
                        "per operation, e.g. 'allreduce=tree,allgather=ring' (default: the "
                        "topology file's collectives.algorithm, else auto)")
    g.add_argument("--protocol", choices=PROTOCOLS,
                   help="NCCL protocol: auto, LL, LL128 or Simple (default: the topology "
                        "file's, else auto)")
    g.add_argument("--nccl-nvls-enable", type=int, choices=(0, 1), metavar="0|1",
                   help="NCCL_NVLS_ENABLE: 1 lets auto choose NVLS (NVLink SHARP) all-reduce, "
                        "0 never; only where the topology's NVSwitches declare nvls: true "
                        "(default: 1 there, as NCCL)")
    g.add_argument("--nccl-collnet-enable", type=int, choices=(0, 1), metavar="0|1",
                   help="NCCL_COLLNET_ENABLE: 1 lets auto choose SHARP (CollNet) all-reduce "
                        "across nodes; only where the topology's fabric declares sharp: true "
                        "(default: 0, as NCCL)")
    g.add_argument("--nccl-algo", metavar="LIST",
                   help="NCCL_ALGO in NCCL's syntax: what auto may choose, e.g. 'ring,tree', "
                        "'^nvls', 'allreduce:tree;allgather:ring' (names: Ring, Tree, NVLS, "
                        "CollNetDirect; NCCL's others are not modelled) (default: all)")
    g.add_argument("--nccl-proto", metavar="LIST",
                   help="NCCL_PROTO in NCCL's syntax: the protocols auto may choose, e.g. "
                        "'LL,Simple', '^LL128', 'allreduce:Simple' (default: all)")
    g.add_argument("--routing", choices=ROUTINGS,
                   help="fabric routing, overriding the topology's fabric.routing: dmodk "
                        "(InfiniBand subnet manager fat-tree tables, D mod K), adaptive "
                        "(InfiniBand adaptive routing: even spreading over all up-links), ecmp "
                        "(per-flow hashing onto equal-cost paths), spray (Spectrum-X packet "
                        "spraying); InfiniBand fabrics take dmodk/adaptive/ecmp, RoCE ecmp/spray "
                        "(default: the topology's, itself dmodk on InfiniBand, ecmp on RoCE)")


def network_options(args: argparse.Namespace) -> NetworkOptions:
    return NetworkOptions(algorithm=args.algorithm, routing=args.routing,
                          protocol=args.protocol, nvls_enable=_given(args.nccl_nvls_enable),
                          nccl_algo=args.nccl_algo, nccl_proto=args.nccl_proto,
                          collnet_enable=_given(args.nccl_collnet_enable))


def _given(flag: int | None) -> bool | None:
    """A 0|1 switch as given (None: not given)."""
    return None if flag is None else bool(flag)


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "non-uniform clusters (the affected ranks are simulated individually)")
    g.add_argument("--slow-gpu", action="append", default=[], metavar="GPU:FACTOR",
                   help="GPU's compute takes FACTOR times as long (e.g. 17:1.5); repeatable")
    g.add_argument("--slow-node", action="append", default=[], metavar="NODE:FACTOR",
                   help="every GPU of NODE computes FACTOR times slower; repeatable")
    g.add_argument("--degrade-link", action="append", default=[], metavar="SPEC:FACTOR",
                   help="scale a link's bandwidth by FACTOR in (0, 1]: nic:NODE.K, "
                        "nvlink:GPU or uplinks:LEVEL.BLOCK (e.g. nic:3.2:0.5); repeatable")
    g.add_argument("--fail-nic", action="append", default=[], metavar="NODE.K",
                   help="NIC K of NODE is down; its traffic reroutes to another NIC of the "
                        "node; repeatable")


def fault_options(args: argparse.Namespace) -> FaultOptions:
    """The fault flags, parsed (one-line errors naming the flag)."""
    return FaultOptions(
        slow_gpus=tuple(parse_slow(t) for t in args.slow_gpu),
        slow_nodes=tuple(parse_slow(t, "--slow-node") for t in args.slow_node),
        degraded_links=tuple(parse_link(t) for t in args.degrade_link),
        failed_nics=tuple(parse_nic(t) for t in args.fail_nic))


def add_watchdog_argument(group: argparse._ActionsContainer) -> None:
    """Register ``--max-sim-time-s`` on ``group``."""
    group.add_argument(WATCHDOG_FLAG, type=sim_time_s, default=DEFAULT_MAX_SIM_TIME_S,
                       metavar="SECONDS",
                       help="watchdog: stop with exit code 2 if the simulated iteration has not "
                            "finished after this much simulated time, in seconds "
                            "(default: %(default)g)")


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the timeline/plot flags on ``parser``."""
    g = parser.add_argument_group("timelines and plots")
    g.add_argument("--trace", metavar="PATH",
                   help="write a Chrome trace-event JSON of the iteration (open it in "
                        "ui.perfetto.dev or chrome://tracing): one process per stage, one track "
                        "per stream, times in µs; a .gz suffix compresses it")
    g.add_argument("--trace-format", choices=("chrome", "kineto"), default="chrome",
                   help="chrome: one Chrome trace-event file; kineto: --trace names a folder "
                        "of per-rank Kineto-shaped JSON files (rank<r>.trace.json) that "
                        "HolisticTraceAnalysis loads (docs/workload-formats.md) "
                        "(default: %(default)s)")
    g.add_argument("--chakra", metavar="DIR",
                   help="write the workload as per-rank Chakra execution traces (DIR/"
                        "simrun.<rank>.et, MLCommons et_def.proto) for ASTRA-sim; needs the "
                        "'chakra' extra (docs/workload-formats.md)")
    g.add_argument("--trace-ranks", metavar="RANKS", default="stage-reps",
                   help="ranks shown by --trace and --plot: 'stage-reps' (one rank per stage, "
                        "the one in the report), 'all' (every simulated rank), or global ranks "
                        "like 0,8,16 or 0-7 (other than stage representatives need --per-rank) "
                        "(default: %(default)s)")
    g.add_argument("--force", action="store_true",
                   help="write a --trace estimated over 200 MB (refused by default; the "
                        "estimate counts the events of the ranks shown)")
    g.add_argument("--plot", metavar="PATH",
                   help="draw the pipeline timeline (one row per stage, time in ms) to a .png, "
                        ".svg or .pdf file")
    g.add_argument("--plot-window", metavar="START:END", type=plot_window,
                   help="draw only this time window of the --plot timeline (ms from the "
                        "iteration's start, e.g. 0:250)")
    g.add_argument("--plot-microbatches", metavar="N", type=positive_int,
                   help="draw only the window of the --plot timeline in which microbatches "
                        "0..N-1 run (from the first op of microbatch 0 to the end of the last "
                        "op of microbatch N-1 on any row)")
    g.add_argument("--breakdown-plot", metavar="PATH",
                   help="draw a stacked bar per stage of compute / optimizer / exposed "
                        "communication / bubble (ms) to a .png, .svg or .pdf file")


def output_options(args: argparse.Namespace) -> OutputOptions:
    """The output flags; ``--force`` only qualifies a ``--trace`` and ``--trace-ranks`` a
    ``--trace`` or ``--plot``: without them each is refused (it would change nothing)."""
    if args.force and not args.trace:
        raise UsageError("only allows writing a large --trace; no --trace was given",
                         field="--force")
    if args.trace_format != "chrome" and not args.trace:
        raise UsageError("chooses the format of a --trace; no --trace was given",
                         field="--trace-format")
    for flag, given in (("--plot-window", args.plot_window),
                        ("--plot-microbatches", args.plot_microbatches)):
        if given is not None and not args.plot:
            raise UsageError("chooses what the --plot timeline shows; no --plot was given",
                             field=flag)
    if args.plot_window is not None and args.plot_microbatches is not None:
        raise UsageError("give --plot-window or --plot-microbatches, not both",
                         field="--plot-microbatches")
    if args.trace_ranks != "stage-reps" and not (args.trace or args.plot):
        raise UsageError("chooses the ranks of a --trace or --plot; neither was given",
                         field="--trace-ranks")
    return OutputOptions(json=args.json, trace=args.trace, trace_ranks=args.trace_ranks,
                         plot=args.plot, breakdown_plot=args.breakdown_plot, force=args.force,
                         trace_format=args.trace_format, chakra=args.chakra,
                         plot_window_ms=args.plot_window,
                         plot_microbatches=args.plot_microbatches)


def plot_window(text: str) -> tuple[float, float]:
    """argparse type of ``--plot-window``: ``START:END`` in ms, 0 ≤ START < END."""
    a, sep, b = text.partition(":")
    lo, hi = parse_float(a.strip()), parse_float(b.strip())
    if not sep or lo is None or hi is None or not 0 <= lo < hi:
        raise argparse.ArgumentTypeError(f"expected START:END in ms with 0 ≤ START < END, "
                                         f"got {text!r}")
    return lo, hi

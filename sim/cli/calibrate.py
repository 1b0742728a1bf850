"""``simrun calibrate``: fit the calibration knobs (:mod:`sim.calibration.knobs`) to the user's
own measurements and write a calibration profile (:mod:`sim.calibration.profile`); or turn
PyTorch profiler traces into a kernel table (:mod:`sim.calibration.kineto`).

Measurements: ``--runs FILE`` (measured runs in the ``simrun validate`` case format),
``--megatron-log LOG`` (a Megatron-LM training log: the layout and options from its printed
arguments through ``--megatron-args``' translation, :mod:`sim.jobs`; the iteration time the
median of its iteration lines after ``--warmup`` iterations), ``--nccl-tests FILE`` (the
network's bus-bandwidth factor, fitted first and then held). Times in s, bandwidths in GB/s.
"""

from __future__ import annotations

import argparse
import math

from sim.calibration.fit import Fit, MeasuredRun, fit_knobs
from sim.calibration.knobs import KNOBS, Knobs
from sim.calibration.nccl_tests import check_gpu, fit_network, read_nccl_tests, time_curve
from sim.calibration.profile import Profile, sha256_of, write_profile
from sim.calibration.runs import case_run, case_topology
from sim.cli.types import Parser, nonneg_int, positive_int
from sim.errors import InputError, UsageError
from sim.files.outputs import check_output_paths
from sim.topology import load_topology
from sim.validation.cases import load_cases

#: iteration lines at or below this iteration are warm-up (default of ``--warmup``; an
#: assumption: Megatron-LM's first logged interval holds start-up and compilation)
WARMUP = 10


def build_parser() -> Parser:
    p = Parser(prog="simrun calibrate",
               description="Fit simrun's calibration knobs (GEMM efficiency scale, network "
                           "bus-bandwidth factor, attention scale, memory-bound scale, "
                           "per-kernel overhead) to measured runs and write a calibration "
                           "profile for --calibration; or turn PyTorch profiler traces into a "
                           "kernel table (docs/calibration.md).")
    p.add_argument("--runs", action="append", default=[], metavar="FILE",
                   help="measured runs in the simrun validate case format (repeatable)")
    p.add_argument("--megatron-log", action="append", default=[], metavar="LOG",
                   help="a Megatron-LM training log (arguments block + iteration lines; "
                        "repeatable); needs --topo")
    p.add_argument("--nccl-tests", action="append", default=[], metavar="FILE",
                   help="nccl-tests output (all_reduce_perf and friends; repeatable); needs "
                        "--topo")
    p.add_argument("--kineto", nargs="+", default=[], metavar="TRACE",
                   help="PyTorch profiler traces (.json or .json.gz), one per rank: written "
                        "as a kernel table (--kernel-table-out) with a match report")
    p.add_argument("--topo", metavar="PATH|NAME",
                   help="the cluster the logs, nccl-tests and traces were measured on")
    p.add_argument("--nodes", type=positive_int,
                   help="nodes of --topo for the nccl-tests (default: as many as the ranks)")
    p.add_argument("--warmup", type=nonneg_int, default=WARMUP, metavar="N",
                   help="Megatron-LM logs: iteration lines at or below iteration N are "
                        "warm-up, left out of the median (default: %(default)s)")
    p.add_argument("--stack", default="unknown", metavar="TEXT",
                   help="the software stack the measurements ran (recorded in the profile; "
                        "default: %(default)s)")
    p.add_argument("--out", metavar="PROFILE", help="calibration profile (YAML) to write")
    p.add_argument("--kernel-table-out", metavar="CSV",
                   help="kernel table to write from --kineto traces")
    p.add_argument("--gpu", metavar="NAME",
                   help="--kineto: the GPU the traces ran on when they do not say (checked "
                        "against the traces' deviceProperties when they do)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun calibrate``; returns the exit code."""
    args = build_parser().parse_args(argv)
    inputs = {"--runs": args.runs, "--megatron-log": args.megatron_log,
              "--nccl-tests": args.nccl_tests, "--kineto": args.kineto}
    check_output_paths({"--out": args.out, "--kernel-table-out": args.kernel_table_out},
                       {k: v for k, v in inputs.items() if v})
    if args.kineto:
        from sim.calibration.kineto import kineto_main

        kineto_main(args)
    measured = args.runs or args.megatron_log or args.nccl_tests
    if not measured:
        if args.kineto:
            return 0
        raise UsageError("give measurements: --runs, --megatron-log, --nccl-tests or --kineto",
                         field="--runs")
    if not args.out:
        raise UsageError("the profile to write is required with measurements", field="--out")
    if (args.megatron_log or args.nccl_tests) and not args.topo:
        raise UsageError("--megatron-log and --nccl-tests need the cluster they ran on",
                         field="--topo")
    profile, notes = calibrate(args)
    write_profile(profile, args.out)
    print("\n".join(report_lines(profile) + ["  " + n for n in notes]))
    print(f"wrote {args.out}")
    return 0


def calibrate(args: argparse.Namespace) -> tuple[Profile, list[str]]:
    """The profile of the measurements the flags name, and the efficiency-by-size lines of
    the nccl-tests."""
    base, measurements, notes, inputs = Knobs(), {}, [], []
    topo_name = gpu = None
    measured_nets = []
    for f in args.nccl_tests:
        fit, table, topo, tests = _nccl(f, args)
        measured_nets.append((tests, topo))
        base = base.with_value("network_busbw_factor", fit.knobs.network_busbw_factor)
        measurements["network_busbw_factor"] = (
            f"nccl-tests {f} ({fit.residuals[0][0] if fit.residuals else ''}.."
            f"{table[-1]['size_bytes']} B fitted, {table[0]['size_bytes']}.."
            f"{table[-1]['size_bytes']} B measured, {topo.num_gpus} GPUs of {topo.name}; "
            "WARNING: collectives of other sizes or rank counts extrapolate)")
        notes += [f"{f}: {row['size_bytes']} B measured {row['measured_us']:.2f} us, "
                  f"predicted {row['predicted_us']:.2f} us (efficiency "
                  f"{row['efficiency']:.3f}), calibrated {row['calibrated_us']:.2f} us"
                  for row in table]
        inputs.append({"path": f, "sha256": sha256_of(f), "what": "nccl-tests output"})
        topo_name, gpu = topo.name, topo.gpu.name
    runs: list[MeasuredRun] = []
    for f in args.runs:
        _, cases = load_cases(f)
        runs += [case_run(c, f) for c in cases]
        inputs.append({"path": f, "sha256": sha256_of(f), "what": "measured runs (validate "
                                                                  "case format)"})
        for c in cases:
            topo = case_topology(c)
            topo_name, gpu = _same_cluster(topo_name, gpu, topo, f)
    for f in args.megatron_log:
        run, topo = megatron_run(f, args.topo, args.warmup)
        runs.append(run)
        inputs.append({"path": f, "sha256": sha256_of(f), "what": "Megatron-LM log"})
        topo_name, gpu = _same_cluster(topo_name, gpu, topo, f)
    candidates = [k.name for k in KNOBS if not (args.nccl_tests
                                                and k.name == "network_busbw_factor")]
    fit = fit_knobs(runs, candidates, base) if runs else Fit(base, (), {}, (), ())
    for name in fit.identified:
        measurements[name] = "; ".join(r.what for r in runs)
    knobs = fit.knobs
    curves = []
    for tests, topo in measured_nets:  # by size, against the final bus-bandwidth factor
        curve, left = time_curve(tests, topo, knobs)
        curves += [curve] if curve is not None else []
        notes += left
    residuals = tuple({"run": n, "measured_s": m, "predicted_s": p, "error_pct": round(e, 4),
                       "uncalibrated_error_pct": round(u[3], 4)}
                      for (n, m, p, e), u in zip(fit.residuals, fit.uncalibrated, strict=True))
    lo, hi = fit.range_pct()
    spread = max((r.spread_pct for r in runs), default=0.0)
    not_id = tuple(f"{k}: {why}" for k, why in fit.not_identified.items()
                   if k not in measurements)
    profile = Profile(gpu=gpu or "", topology=topo_name or "", knobs=knobs,
                      measurements=measurements, stack=args.stack, not_identified=not_id,
                      inputs=tuple(inputs), residuals=residuals,
                      range_pct=(min(lo, 0.0) - spread, max(hi, 0.0) + spread),
                      curves=tuple(curves))
    return profile, notes


def _same_cluster(topo_name, gpu, topo, file: str):
    """The one cluster every measurement ran on (a profile is of one GPU and topology)."""
    if topo_name is not None and (topo_name, gpu) != (topo.name, topo.gpu.name):
        raise InputError(f"measured on {topo.gpu.name} ({topo.name}), the other measurements "
                         f"on {gpu} ({topo_name}): a profile is of one cluster; calibrate each "
                         "apart", file=file)
    return topo.name, topo.gpu.name


def _nccl(f: str, args: argparse.Namespace):
    """The fit of one nccl-tests output on ``--topo``."""
    tests = read_nccl_tests(f)
    probe = load_topology(args.topo)
    check_gpu(tests, probe.gpu.name)
    if tests.op is None:
        raise InputError("the output does not say which test ran (no 'Collective test "
                         "starting' line)", file=f, field="collective")
    if tests.ranks is None:
        raise InputError("the output lists no ranks ('#  Rank  N ... device' lines)", file=f,
                         field="ranks")
    nodes = args.nodes or max(1, math.ceil(tests.ranks / probe.gpus_per_node))
    topo = load_topology(args.topo, nodes=nodes)
    if tests.ranks > topo.num_gpus:
        raise UsageError(f"{f} ran on {tests.ranks} ranks, {topo.num_gpus} GPUs in {nodes} "
                         "nodes", field="--nodes")
    fit, table = fit_network(tests, topo, tests.op, tests.ranks)
    return fit, table, topo, tests


def megatron_run(path: str, topo_path: str, warmup: int) -> tuple[MeasuredRun, object]:
    """A Megatron-LM log as a measured run on ``topo_path`` (:mod:`sim.cli.calibrate_log`)."""
    from sim.cli.calibrate_log import log_run

    return log_run(path, topo_path, warmup)


def report_lines(profile: Profile) -> list[str]:
    """What the fit found: each knob, what could not be identified, each run's residual."""
    out = [f"calibration of {profile.gpu} ({profile.topology}), stack: {profile.stack}"]
    out += [f"  {line}" for line in profile.assumptions()]
    out += [f"  not identified: {x}" for x in profile.not_identified]
    out += [f"  run {r['run']}: measured {r['measured_s']:.4g} s, predicted "
            f"{r['predicted_s']:.4g} s ({r['error_pct']:+.2f}%; uncalibrated "
            f"{r['uncalibrated_error_pct']:+.2f}%)" for r in profile.residuals]
    out.append(f"  range of a prediction under this profile: {profile.range_pct[0]:+.2f}% .. "
               f"{profile.range_pct[1]:+.2f}%")
    return out

"""``simrun sweep``: simulate every valid parallel layout of a model on N GPUs and rank them.

    simrun sweep --model workloads/models/gpt3-175b.yaml --topo topologies/dgx-a100-1024.yaml \\
        --gpus 1024 --tp 2,4,8 --pp 4,8,16 --vpp 1,2,3 --micro-batch 1,2 --global-batch 1536 \\
        --sequence-parallel --recompute selective --distributed-optimizer --out sweep-175b

See docs/sweeps.md. Exit codes: 0 (also when some layouts are infeasible or failed: they are
results), 2 bad input, 130 interrupted (finished layouts are on disk; rerun with ``--resume``).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sim.errors import UsageError
from sim.inputs import read_bytes  # bounded, never blocks (not Path.read_bytes: a FIFO hangs)


def _parser() -> argparse.ArgumentParser:
    from sim.cli import Parser, add_set_argument, positive_float, positive_int
    from sim.models.parallel import DTYPES, RECOMPUTE
    from sim.network import add_network_arguments

    p = Parser(prog="simrun sweep",
               description="Enumerate the valid parallel layouts of a model on N GPUs, check "
                           "their memory, simulate each and rank them (times in s, memory in GB "
                           "= 1e9 bytes).")
    g = p.add_argument_group("inputs")
    g.add_argument("--model", metavar="PATH", required=True, help="model spec YAML")
    g.add_argument("--topo", metavar="PATH", required=True, help="cluster topology YAML")
    g.add_argument("--nodes", type=positive_int, help="number of nodes (default: the file's)")
    add_set_argument(g)
    g.add_argument("--gpus", type=positive_int,
                   help="GPUs every layout uses: TP·PP·DP = GPUS (default: all of the topology)")
    g = p.add_argument_group("layout space (comma-separated lists)")
    g.add_argument("--tp", metavar="LIST", help="TP sizes (default: powers of two up to the "
                                                "GPUs of one node)")
    g.add_argument("--pp", metavar="LIST", help="PP sizes (default: divisors of the layer "
                                                "count)")
    g.add_argument("--vpp", metavar="LIST", default="1",
                   help="model chunks per stage; > 1 uses the interleaved schedule (default: "
                        "%(default)s)")
    g.add_argument("--micro-batch", metavar="LIST", default="1",
                   help="micro batch sizes (default: %(default)s)")
    g.add_argument("--ep", metavar="LIST", default="1",
                   help="expert-parallel sizes, MoE models (default: %(default)s)")
    g = p.add_argument_group("training (shared by every layout)")
    g.add_argument("--global-batch", type=positive_int, required=True,
                   help="sequences per iteration")
    g.add_argument("--sequence-parallel", action="store_true")
    g.add_argument("--recompute", choices=RECOMPUTE, default="none")
    g.add_argument("--dtype", choices=DTYPES, default="bf16")
    g.add_argument("--distributed-optimizer", action="store_true")
    g.add_argument("--flash-attention", action="store_true")
    g.add_argument("--no-overlap-grad-reduce", action="store_true")
    g.add_argument("--placement", default="tp-dp-pp", metavar="ORDER",
                   help="rank-to-GPU order, fastest dimension first (default: %(default)s)")
    add_network_arguments(p)
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
    g.add_argument("--limit", type=positive_int,
                   help="run at most this many not-yet-done layouts, then stop (continue later "
                        "with --resume)")
    g.add_argument("--top", type=positive_int, default=30,
                   help="feasible layouts shown in the table (default: %(default)s; all are in "
                        "the CSV)")
    g.add_argument("--no-plot", action="store_true", help="do not write ranking.png/heatmap.png")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar (default: a bar on stderr when it is a terminal)")
    g.add_argument("--quiet", action="store_true", help="do not print the table")
    return p


def _sha256(path: str) -> str:
    return hashlib.sha256(read_bytes(path)).hexdigest()


def settings_of(args: argparse.Namespace, model, topo, gpus: int, training) -> dict[str, Any]:
    """What a resumed sweep must share with the original (the layout lists may differ)."""
    return {
        "schema": "simrun.sweep-settings/1",
        "files": {"model": args.model, "topology": args.topo},  # informative, not compared
        "model": asdict(model),
        "topology": {"name": topo.name, "sha256": _sha256(topo.path), "nodes": topo.num_nodes,
                     **({"overrides": list(topo.overrides)} if topo.overrides else {})},
        "gpus": gpus,
        "training": asdict(training),
        "network": {"algorithm": args.algorithm, "routing": args.routing,
                    "protocol": args.protocol},
        "placement": args.placement,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun sweep``; returns the exit code (errors raise to sim.cli)."""
    from sim.cli import warn_topology
    from sim.models.spec import load_model
    from sim.sweep.evaluate import SweepContext
    from sim.sweep.output import ranked, table_lines, write_outputs
    from sim.sweep.runner import run_tasks
    from sim.sweep.space import Space, Training, enumerate_layouts, parse_list
    from sim.sweep.store import ResultStore
    from sim.topology import load_topology
    from sim.words import plural

    args = _parser().parse_args(argv)
    if args.resume and args.overwrite:
        raise UsageError("give --resume or --overwrite, not both", field="--resume")
    if args.scheduler:  # the optional extra, checked before any work
        from sim.sweep.runner import dask_client

        dask_client()
    model = load_model(args.model)
    topo = load_topology(args.topo, nodes=args.nodes, overrides=args.set)
    warn_topology(topo)
    gpus = args.gpus or topo.num_gpus
    if gpus > topo.num_gpus:
        raise UsageError(f"{gpus} GPUs requested but {args.topo} has {topo.num_gpus}; use "
                         "--nodes", field="--gpus")
    training = Training(
        global_batch=args.global_batch, sequence_parallel=args.sequence_parallel,
        recompute=args.recompute, dtype=args.dtype,
        distributed_optimizer=args.distributed_optimizer, flash_attention=args.flash_attention,
        overlap_grad_reduce=not args.no_overlap_grad_reduce)
    space = Space(gpus=gpus,
                  tp=parse_list(args.tp, "--tp") if args.tp else None,
                  pp=parse_list(args.pp, "--pp") if args.pp else None,
                  vpp=parse_list(args.vpp, "--vpp"),
                  micro_batch=parse_list(args.micro_batch, "--micro-batch"),
                  ep=parse_list(args.ep, "--ep"))
    layouts, skipped = enumerate_layouts(model, space, training, topo.gpus_per_node)
    if not layouts:
        why = "; ".join(f"{k}: {r}" for k, r in skipped[:3])
        raise UsageError(f"no valid layout among {len(skipped)} combinations ({why}"
                         f"{' …' if len(skipped) > 3 else ''})", field="--tp")
    if args.dtype not in topo.gpu.peak_tflops:
        raise UsageError(f"GPU {topo.gpu.name} has no {args.dtype} peak", field="--dtype")
    out = Path(args.out or f"sweep-{model.name}-{gpus}gpu")
    store = ResultStore(out)
    done = store.open(settings_of(args, model, topo, gpus, training), resume=args.resume,
                      overwrite=args.overwrite)
    keys = {lay.key for lay in layouts}
    already = sum(1 for k in done if k in keys)
    pending = [lay for lay in layouts if lay.key not in done]
    if args.limit:
        pending = pending[:args.limit]
    ctx = SweepContext(model, topo, training, algorithm=args.algorithm, routing=args.routing,
                       protocol=args.protocol, placement=args.placement)
    err = sys.stderr
    print(f"sweep {model.name} on {gpus} GPUs of {topo.name}: "
          f"{plural(len(layouts), 'valid layout')} ({plural(len(skipped), 'combination')} "
          f"skipped as invalid), {already} already done, "
          f"{len(pending)} to run; results in {out}/", file=err)
    bar = _progress(len(layouts), already, disabled=args.no_progress)
    t0 = time.perf_counter()

    def on_result(row: dict[str, Any]) -> None:
        store.append(row)
        done[row["layout"]] = row
        bar.update(1)
        bar.set_postfix_str(f"{row['layout']}: {row['status']}", refresh=False)

    previous = _raise_on_sigterm()
    try:
        backend = run_tasks(ctx, pending, on_result, workers=args.workers,
                            scheduler=args.scheduler, connect_timeout_s=args.scheduler_timeout)
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
    wall = time.perf_counter() - t0
    rows = ranked(done[lay.key] for lay in layouts if lay.key in done)
    complete = len(rows) == len(layouts)
    ok = [r for r in rows if r["status"] == "ok"]
    summary = {
        "title": f"{model.name} on {gpus} GPUs ({topo.name}), global batch "
                 f"{args.global_batch}: layouts ranked by iteration time",
        "settings": settings_of(args, model, topo, gpus, training),
        "complete": complete,
        "layouts": len(layouts),
        "ok": len(ok),
        "infeasible": sum(r["status"] == "infeasible" for r in rows),
        "errors": sum(r["status"] == "error" for r in rows),
        "best": ok[0]["layout"] if ok else None,
        "skipped_invalid": [{"layout": k, "reason": r} for k, r in skipped],
    }
    paths = write_outputs(out, rows, summary, plot=not args.no_plot)
    if not args.quiet:
        print(f"{model.name} on {gpus} GPUs, global batch {args.global_batch}: "
              f"{plural(len(ok), 'feasible layout')} ranked by iteration time "
              f"(exposed comm: mean over stages)")
        for line in table_lines(rows, top=args.top):
            print("  " + line)
    print(f"ran {plural(len(pending), 'layout')} in {wall:.1f} s on {backend}; "
          f"{'complete' if complete else f'{len(rows)} of {len(layouts)} done (--resume)'}; "
          f"wrote {', '.join(str(p) for p in paths)}", file=err)
    return 0


def _raise_on_sigterm():
    """Treat SIGTERM like Ctrl-C while layouts run (same clean stop); returns the old handler."""
    import signal

    from sim.process import Terminated

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        raise Terminated(signum)

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def _restore_sigterm(previous) -> None:
    import signal

    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _progress(total: int, initial: int, *, disabled: bool):
    from tqdm import tqdm

    # a bar only on a terminal (never in pipes, files or CI logs), closed before any message
    return tqdm(total=total, initial=initial, desc="sweep", unit="layout", file=sys.stderr,
                disable=disabled or not sys.stderr.isatty(), mininterval=0.5, delay=2.0,
                dynamic_ncols=True)  # shown once the sweep has taken 2 s (tqdm's delay)

"""``simrun collective``: flags of the nccl-tests-style predictor (:mod:`sim.network.predict`)."""

from __future__ import annotations

import sys

from sim.cli.args import add_network_arguments, network_options
from sim.cli.types import Parser, positive_int
from sim.comm import CollKind
from sim.errors import InputError, UsageError
from sim.files.outputs import check_output_paths, is_stdout, write_json
from sim.limits import MAX_ALLTOALL_PAIRS
from sim.network.factory import parse_algorithm
from sim.network.plans import ALGORITHMS_FOR
from sim.network.predict import OPS, ROW_KEYS, format_rows, header_lines, parse_sizes, predict_rows
from sim.scenario import network_of
from sim.topology import load_topology


def build_parser() -> Parser:
    p = Parser(prog="simrun collective",
               description="Predict nccl-tests-style time, algbw and busbw of one collective "
                           "on a topology (times in µs on screen, s in JSON; bandwidths in "
                           "GB/s = 1e9 bytes/s).")
    p.add_argument("--topo", metavar="PATH|NAME", required=True,
                   help="cluster topology YAML file, or the name of a shipped one "
                        "('simrun list topologies')")
    p.add_argument("--nodes", type=positive_int, help="override the topology's node count")
    p.add_argument("--nproc-per-node", type=positive_int, metavar="K",
                   help="processes per node, as torchrun's --nproc-per-node: each node's first "
                        "K GPUs run ranks (rank r on node r // K); default: every GPU")
    p.add_argument("--op", choices=tuple(OPS), default="allreduce",
                   help="collective (default: %(default)s)")
    p.add_argument("--gpus", type=positive_int, metavar="N",
                   help="number of GPUs (ranks 0..N-1 in placement order; more than one node "
                        "spans nodes; default: one node's GPUs)")
    p.add_argument("--sizes", default="8:1G", metavar="A:B",
                   help="message sizes in bytes, doubling from A to B; suffixes K, M, G = 2^10, "
                        "2^20, 2^30 (default: %(default)s)")
    p.add_argument("--json", metavar="PATH", help="also write the rows as a JSON list "
                                                  "(keys: " + ", ".join(ROW_KEYS) + ")")
    add_network_arguments(p)
    return p


def _check_work(op: str, gpus: int) -> None:
    """Refuse, before any work, an all-to-all of more than :data:`~sim.limits.MAX_ALLTOALL_PAIRS`
    rank pairs (memory grows with the pairs)."""
    if OPS[op] is CollKind.ALLTOALL and gpus * gpus > MAX_ALLTOALL_PAIRS:
        raise UsageError(f"an all-to-all of {gpus} ranks is {gpus * gpus} flows; at most "
                         f"{MAX_ALLTOALL_PAIRS} (2,048 ranks, ~0.8 GB)", field="--gpus")


def _asked_algorithm(text: str | None, op: str) -> str | None:
    """The algorithm ``--algorithm`` fixes for ``op`` (None: auto or not given); refused with
    one line where it never runs ``op`` (a simulation's single ``--algorithm`` leaves the
    operations it does not apply to on auto; here there is one operation)."""
    asked = parse_algorithm(text)
    if isinstance(asked, dict):
        asked = asked.get(op)
    if asked in (None, "auto"):
        return None
    allowed = ALGORITHMS_FOR[OPS[op]]
    if asked not in allowed:
        raise UsageError(f"{asked} does not run {op} (for {op}: {', '.join(allowed)} or auto)",
                         field="--algorithm")
    return asked


def _fallback_note(asked: str | None, op: str, gpus: int, rows: list[dict]) -> list[str]:
    """A ``#`` line where the asked algorithm does not apply to these ranks (e.g. NVLS across
    nodes) and auto's choice ran instead, naming what ran."""
    ran = sorted({r["algorithm"].split("/")[0] for r in rows} - {asked})
    if asked is None or not ran:
        return []
    return [f"# --algorithm {asked} does not apply to {op} over these {gpus} GPUs: auto's "
            f"choice ran instead ({', '.join(ran)}; column 'algorithm')"]


def main(argv: list[str]) -> int:
    """Entry point of ``simrun collective``; returns the exit code."""
    args = build_parser().parse_args(argv)
    check_output_paths({"--json": args.json}, {"--topo": args.topo}, stdout_ok=("--json",))
    sizes = parse_sizes(args.sizes)
    topo = load_topology(args.topo, nodes=args.nodes, nproc_per_node=args.nproc_per_node)
    gpus = args.gpus if args.gpus is not None else topo.gpus_per_node
    if not 2 <= gpus <= topo.num_gpus:
        raise InputError(f"must be between 2 and the topology's {topo.num_gpus} GPUs, got {gpus}",
                         field="--gpus")
    _check_work(args.op, gpus)
    asked = _asked_algorithm(args.algorithm, args.op)
    net = network_of(topo, network_options(args))
    rows = predict_rows(args.op, gpus, sizes, net)
    head = header_lines(topo, args.op, gpus, net) + _fallback_note(asked, args.op, gpus, rows)
    if not is_stdout(args.json):  # `--json -`: stdout holds the JSON only
        sys.stdout.write("\n".join(head) + "\n" + format_rows(rows))
    if args.json:
        write_json(args.json, rows)
    return 0

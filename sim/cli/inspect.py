"""``simrun inspect FILE``: flags of the model-description inspector (:mod:`sim.models.inspect`)."""

from __future__ import annotations

import sys

from sim.cli.fields import cli_error
from sim.cli.types import Parser, positive_int
from sim.errors import SimrunError
from sim.models.inspect import Sizes, describe

SIZE_FLAGS = ("hidden", "heads", "ffn-hidden", "vocab", "seq-len", "layers", "kv-heads", "pp")
SIZE_HELP = {
    "hidden": "hidden size (elements per token)", "heads": "attention heads",
    "ffn-hidden": "MLP hidden size (elements per token)", "vocab": "vocabulary size (tokens)",
    "seq-len": "sequence length (tokens)", "layers": "transformer layers in the model",
    "kv-heads": "key/value heads (grouped-query attention)",
    "pp": "pipeline stages the file describes one of",
}


def build_parser() -> Parser:
    ap = Parser(prog="simrun inspect",
                description="Print what simrun infers from a model description.")
    ap.add_argument("file", help="a per-rank parameter table or a Megatron-Core module tree "
                                 "(text)")
    for flag in SIZE_FLAGS:
        ap.add_argument(f"--{flag}", type=positive_int, default=None, metavar="N",
                        help=f"{SIZE_HELP[flag]}, where the file does not say it (default: "
                             "inferred from the file)")
    ap.add_argument("--name", default=None,
                    help="model name for the summary (default: the file's name)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for bad input, with a one-line message)."""
    try:  # bad flags too are one line (Parser raises UsageError)
        args = build_parser().parse_args(argv)
        sizes = Sizes(**{f.replace("-", "_"): getattr(args, f.replace("-", "_"))
                         for f in SIZE_FLAGS}, name=args.name)
        for line in describe(args.file, sizes):
            print(line)
    except SimrunError as exc:
        print(f"simrun inspect: error: {cli_error(exc)}", file=sys.stderr)
        return exc.exit_code
    return 0

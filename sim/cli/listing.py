"""``simrun list [KIND]``: the shipped inputs usable by name (:mod:`sim.files.catalog`)."""

from __future__ import annotations

import sys
from pathlib import Path

from sim.cli.types import Parser
from sim.errors import InputError
from sim.files.catalog import KINDS, describe, first_sentence, head_lines, shipped
from sim.models.vocab.spec import load_model


def build_parser() -> Parser:
    ap = Parser(prog="simrun list",
                description="List the shipped inputs that every flag taking such a file also "
                            "accepts by name (e.g. --topo dgx-a100-1024, --model gpt3-175b).")
    ap.add_argument("kind", nargs="?", choices=tuple(KINDS),
                    help="which kind to list (default: every kind)")
    ap.add_argument("--paths", action="store_true",
                    help="also print the installed path of each file (default: off)")
    return ap


def model_summary(path: Path) -> str:
    """A model spec's title (first comment sentence) and its shape."""
    title = first_sentence(head_lines(path)).split(" (")[0].rstrip(":.")
    try:
        m = load_model(path)
    except InputError as e:
        return f"(invalid: {e})"
    moe = f", {m.moe.experts} experts top-{m.moe.top_k}" if m.moe else ""
    return (f"{title}: {m.layers} layers, hidden {m.hidden}, {m.heads} heads, "
            f"sequence {m.seq_len}{moe}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``simrun list``; returns the exit code."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    kinds = [args.kind] if args.kind else list(KINDS)
    out = []
    for k in kinds:
        files = shipped(k)
        if len(kinds) > 1:
            out.append(f"{k}:")
        width = max((len(n) for n in files), default=0)
        for name, path in files.items():
            text = model_summary(path) if k == "models" else describe(k, path)
            out.append(f"  {name:<{width}}  {text}")
            if args.paths:
                out.append(f"  {'':<{width}}  {path}")
        if not files:
            out.append("  (none installed)")
    if not args.kind:
        out += ["inputs (which flag takes which file):", *INPUTS]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


#: the input flags of the run and what each reads, then the files each output flag writes
#: (docs/workload-formats.md, docs/job-formats.md)
INPUTS = (
    "  --workload       AICB text, AICB physical-format CSV (with --model) or operator table "
    "(or a name above), or a folder of per-rank Chakra .et traces (the 'chakra' extra)",
    "  --model          model spec YAML or Hugging Face config.json (or a name above)",
    "  --megatron-args  Megatron-LM launch script, file of arguments, or training log "
    "(its 'arguments' block)",
    "  --job-config     torchtitan job TOML, NeMo 1 launcher training YAML or "
    "Megatron-Bridge ConfigContainer dump (run_config.yaml)",
    "  --topo           topology YAML (or a name above)",
    "  --kernel-table   kernel-time CSV (or a name above)",
    "  --calibration    calibration profile YAML written by 'simrun calibrate'",
    "outputs (which flag writes which file):",
    "  --json           the report, JSON (docs/report-schema.md)",
    "  --trace          Chrome trace-event JSON; with --trace-format kineto a folder of per-rank "
    "Kineto JSON that HolisticTraceAnalysis loads",
    "  --chakra         a folder of per-rank Chakra .et traces (the 'chakra' extra)",
    "  --plot, --breakdown-plot  figures (PNG, SVG or PDF by suffix)",
)

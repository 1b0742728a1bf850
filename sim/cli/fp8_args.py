"""``--fp8-recipe``: Megatron-Core's FP8 scaling recipe of an ``--dtype fp8`` run
(:mod:`sim.models.features.fp8`); its own module to keep :mod:`sim.cli.args` small."""

from __future__ import annotations

import argparse

from sim.models.features.fp8 import DEFAULT_RECIPE, NOT_MODELLED, RECIPES


def fp8_recipe(text: str) -> str:
    """argparse type: a recipe simrun models; Megatron-Core's block-scaling recipes and
    anything else are refused with a one-line reason."""
    if text in RECIPES:
        return text
    if text in NOT_MODELLED:
        raise argparse.ArgumentTypeError(
            f"{text} (block scaling) is a Megatron-Core recipe simrun does not model; use "
            f"{' or '.join(RECIPES)}")
    raise argparse.ArgumentTypeError(f"expected {' or '.join(RECIPES)}, got {text!r}")


def add_fp8_arguments(g: argparse._ActionsContainer) -> None:
    """Add ``--fp8-recipe`` to the model-driven workload group."""
    g.add_argument("--fp8-recipe", type=fp8_recipe, metavar="RECIPE",
                   help="with --dtype fp8: Megatron-Core's FP8 recipe as Transformer Engine runs "
                        "it: delayed (scales from the amax history, one amax all-reduce per "
                        "model chunk and microbatch in forward and in backward) or tensorwise "
                        "(current scaling: an amax pass over every tensor before its cast); "
                        f"mxfp8 and blockwise are refused (default: {DEFAULT_RECIPE}, "
                        "Megatron-Core's)")


def recipe_of(args: argparse.Namespace) -> str:
    """The recipe asked for, else the default."""
    return getattr(args, "fp8_recipe", None) or DEFAULT_RECIPE

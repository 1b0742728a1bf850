"""``--calibration PROFILE`` and ``--calibration-any-cluster``: the flags of a calibration
profile (:mod:`sim.calibration.profile`), shared by the run, ``simrun sweep``, ``simrun
generate`` and ``simrun validate``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sim.cli.types import positive_int
from sim.errors import UsageError

if TYPE_CHECKING:  # the profile reader loads when a run names a profile
    from sim.calibration.profile import Profile


def add_calibration_arguments(g: argparse._ActionsContainer) -> None:
    """Register the calibration flags in the group (or parser) ``g``."""
    g.add_argument("--calibration", metavar="PROFILE",
                   help="calibration profile written by 'simrun calibrate': its fitted knobs "
                        "time every operator and scale the links' bus bandwidth, each an "
                        "assumption line naming its measurement (docs/calibration.md)")
    g.add_argument("--calibration-any-cluster", action="store_true",
                   help="use the --calibration profile even on another GPU or topology than "
                        "it was made on (a WARNING in the report)")


def calibration_of(args: argparse.Namespace) -> Profile | None:
    """The profile the flags name (read and checked), or ``None``."""
    if args.calibration is None:
        if args.calibration_any_cluster:
            raise UsageError("needs --calibration PROFILE", field="--calibration-any-cluster")
        return None
    from sim.calibration.profile import load_profile

    return load_profile(args.calibration)


def add_validate_calibration_arguments(ap: argparse.ArgumentParser) -> None:
    """``simrun validate``'s calibration flags: the profile's, and
    ``--calibrate-within-source K`` (:mod:`sim.calibration.within_source`)."""
    g = ap.add_argument_group("calibration (docs/calibration.md)")
    g.add_argument("--calibrate-within-source", type=positive_int, metavar="K",
                   help="for each source (validation file), fit the calibration knobs on its K "
                        "cases with the fewest GPUs and predict the others again under them; "
                        "prints uncalibrated and calibrated errors per source")
    add_calibration_arguments(g)


def validation_calibration(args: argparse.Namespace, groups, rows) -> tuple[list[str], dict]:
    """The printed lines and JSON entries of the calibration flags of ``simrun validate``
    (``groups``: (file, cases) in order; ``rows``: the uncalibrated rows, which gain the
    calibrated fields)."""
    from sim.calibration.within_source import calibrate_within_source, lines, with_profile

    profile = calibration_of(args)
    if profile is not None and args.calibrate_within_source:
        raise UsageError("give --calibration or --calibrate-within-source, not both",
                         field="--calibration")
    if profile is not None:
        summary = with_profile(groups, rows, profile, args.calibration_any_cluster, args.workers)
        return lines(summary), {"calibration": summary}
    if args.calibrate_within_source:
        summary = calibrate_within_source(groups, rows, args.calibrate_within_source,
                                          args.workers)
        return lines(summary), {"calibration_within_source": summary}
    return [], {}

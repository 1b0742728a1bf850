"""The compute model a run uses: roofline efficiencies of the topology GPU's family, plus a
kernel table (the GPU's shipped one, or ``--kernel-table``), or ``--compute-efficiency``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.errors import UsageError
from sim.kernels.gpus import CatalogGpu, find, known_names
from sim.kernels.lookup import TableLookup
from sim.kernels.table import read_table, shipped_table
from sim.models.compute import GENERIC, ComputeModel, Timer, family_model


@dataclass(frozen=True)
class ComputeOptions:
    """User choices for the compute model: ``kernel_table`` (path or ``None``: the GPU's
    shipped table, if any; ``"none"``: roofline only) and ``compute_efficiency`` (large-GEMM
    fraction of dense peak for a GPU the catalogue does not know, or to override it)."""

    kernel_table: str | None = None
    compute_efficiency: float | None = None


@dataclass
class ComputeSetup:
    """What a run times operators with: roofline model, optional table lookup, notes."""

    cm: ComputeModel
    lookup: TableLookup | None
    notes: list[str]
    entry: CatalogGpu | None


def resolve_compute(gpu, opts: ComputeOptions | None = None, *, need: bool = True
                    ) -> ComputeSetup:
    """The compute model for topology GPU ``gpu`` (a :class:`~sim.topology.gpu.GpuSpec`).

    Known GPU: its family's roofline efficiencies, plus its shipped kernel table (when it has
    one) or ``--kernel-table``. Unknown GPU: :class:`UsageError` naming the known ones, unless
    ``--compute-efficiency`` is given (then the generic efficiency set scaled to it, with a
    warning). ``need=False``: an unknown GPU gets the generic set and a WARNING note (used where
    no command-line choice reaches, e.g. the shipped test topologies' made-up ``test-gpu``).
    """
    opts = opts or ComputeOptions()
    entry = find(gpu.name)
    notes: list[str] = []
    if opts.compute_efficiency is not None:
        cm = scaled_generic(opts.compute_efficiency)
        if entry is None:
            notes.append(f"WARNING: GPU {gpu.name} is not in the GPU catalogue ({known_names()}"
                         f"); compute uses --compute-efficiency {opts.compute_efficiency:g}")
        else:
            notes.append(f"--compute-efficiency {opts.compute_efficiency:g} replaces the "
                         f"{entry.family} roofline efficiencies")
    elif entry is not None:
        cm = family_model(entry.family)
    elif need:
        raise UsageError(f"GPU {gpu.name!r} of the topology is not in the GPU catalogue "
                         f"(known: {known_names()}); name one of them in node.gpu.name or give "
                         "--compute-efficiency FRACTION", field="--compute-efficiency")
    else:
        cm = GENERIC
        notes.append(f"WARNING: GPU {gpu.name} is not in the GPU catalogue (known: "
                     f"{known_names()}); its operators are timed by the roofline with the "
                     f"generic efficiencies ({GENERIC.gemm_efficiency:.0%} of its peak for "
                     "large GEMMs); --compute-efficiency sets them")
    table = None
    if opts.kernel_table not in (None, "none"):
        table = read_table(opts.kernel_table)
    elif opts.kernel_table is None and entry is not None and entry.kernel_table:
        table = shipped_table(entry.kernel_table)
    lookup = None
    if table is not None:
        lookup = TableLookup(table, slots=(entry.sms if entry and entry.sms else 132))
        notes.append(table.describe())
    return ComputeSetup(cm, lookup, notes, entry)


def scaled_generic(eff: float):
    """The generic efficiency set with its large-GEMM efficiency set to ``eff`` and the other
    matrix efficiencies scaled in proportion (memory efficiency and overheads unchanged)."""
    if not 0 < eff <= 1:
        raise UsageError(f"must be a fraction in (0, 1], got {eff:g}",
                         field="--compute-efficiency")
    f = eff / GENERIC.gemm_efficiency
    return replace(GENERIC, family=f"given ({eff:g} of peak)", gemm_efficiency=eff,
                   bmm_efficiency=GENERIC.bmm_efficiency * f,
                   flash_fwd_efficiency=GENERIC.flash_fwd_efficiency * f,
                   flash_bwd_efficiency=GENERIC.flash_bwd_efficiency * f)


def timer_for(gpu, setup: ComputeSetup, backend: str) -> Timer:
    """A fresh :class:`Timer` (tallies at zero) for ``gpu`` under ``setup``."""
    return Timer(gpu, setup.cm, setup.lookup, backend)

"""The compute model a run uses: roofline efficiencies of the topology GPU's family, plus a
kernel table (the GPU's shipped one, or ``--kernel-table``), or ``--compute-efficiency``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sim.assumption import Assumption
from sim.errors import UsageError
from sim.kernels.gpus import CatalogGpu, find, known_names
from sim.topology.gpu import GpuSpec

if TYPE_CHECKING:  # the compute model and kernel tables load on first use (workload files
    # whose GPU is the topology's never need them)
    from sim.kernels.lookup import TableLookup
    from sim.models.compute import ComputeModel, Timer


@dataclass(frozen=True)
class ComputeOptions:
    """User choices for the compute model: ``kernel_table`` (path or ``None``: the GPU's
    shipped table, if any; ``"none"``: roofline only), ``compute_efficiency`` (large-GEMM
    fraction of dense peak for a GPU the catalogue does not know, or to override it); for
    workload files ``source_gpu`` and ``compute_scale`` (:func:`source_compute_scale`);
    ``sustained_slowdown`` (``--sustained-slowdown``): the factor on kernel-table times for the
    sustained load of training (``None``: the table's measured ``sustained_slowdown_<dtype>``,
    1 where it has none); ``calibration`` (``--calibration``): a
    :class:`~sim.calibration.profile.Profile` whose knobs time every operator, refused on
    another GPU unless ``calibration_any_cluster``."""

    kernel_table: str | None = None
    compute_efficiency: float | None = None
    source_gpu: str | None = None
    compute_scale: float | None = None
    sustained_slowdown: float | None = None
    calibration: Any = None
    calibration_any_cluster: bool = False


@dataclass
class ComputeSetup:
    """What a run times operators with: roofline model, optional table lookup, notes."""

    cm: ComputeModel
    lookup: TableLookup | None
    notes: list[str]
    entry: CatalogGpu | None
    sustained_slowdown: float | None = None
    knobs: Any = None
    calibration: Any = None  # the --calibration profile the knobs come from
    transfer: Any = None  # lookup is another GPU's table (sim.models.compute_transfer)

    def sustained(self, dtype: str) -> tuple[float, str]:
        """Factor on kernel-table times for a run in ``dtype``, and the report line saying
        where it came from (docs/kernel-tables.md, "Sustained load")."""
        if self.lookup is None:
            return 1.0, ""
        if self.sustained_slowdown is not None:
            return self.sustained_slowdown, (
                f"sustained load: kernel-table times × {self.sustained_slowdown:g} "
                "(--sustained-slowdown)")
        d = "fp8" if dtype == "fp8" else "bf16"
        key = f"sustained_slowdown_{d}"
        table = self.lookup.table
        text = table.meta.get(key)
        if text is None:
            return 1.0, (f"sustained load: not modelled (the kernel table has no {key}: its "
                         "times, measured one kernel at a time, are used as they are; "
                         "--sustained-slowdown F sets one)")
        measured_on = find(table.gpu)
        if self.entry is None or measured_on is None or measured_on.name != self.entry.name:
            # a GPU's clock under its power limit is its own: the factor is not carried over
            return 1.0, (f"sustained load: not applied (the table's {key} {float(text):g} was "
                         f"measured on {table.gpu}, this run's GPU is "
                         f"{self.entry.name if self.entry else 'another'}; "
                         "--sustained-slowdown F sets one)")
        unc = table.meta.get(f"sustained_uncertainty_{d}")
        return float(text), (
            f"sustained load: kernel-table times × {float(text):g} (the table's {key}: a "
            "layer's kernels run back to back, at the GPU's power limit, against the same "
            "kernels in short bursts as the table times them"
            + (f"; uncertainty: {unc}" if unc else "")
            + "; --sustained-slowdown 1 turns it off)")


def resolve_compute(gpu, opts: ComputeOptions | None = None,
                    entry: CatalogGpu | None = None) -> ComputeSetup:
    """The compute model for topology GPU ``gpu`` (a :class:`~sim.topology.gpu.GpuSpec`);
    ``entry``: the catalogue entry to time it as (default: the catalogue's entry of its name;
    :mod:`sim.validation.transfer_a100` passes an edited one).

    Known GPU: its family's roofline efficiencies, plus its shipped kernel table (when it has
    one) or ``--kernel-table``; a datasheet-only GPU outside the A100 family without
    ``--kernel-table`` is timed by H100 SXM's table transferred to it
    (:mod:`sim.models.compute_transfer`), the rule printed. A GPU the catalogue does not know
    needs an explicit large-GEMM
    efficiency: ``--compute-efficiency`` (a WARNING in the report) or the topology's
    ``node.gpu.compute_efficiency`` (a GPU declared in its topology file, like the test
    topologies' ``test-gpu``); the generic efficiency set is scaled to it. Neither: a
    :class:`UsageError` naming the known GPUs — never a silent generic fallback.
    """
    opts = opts or ComputeOptions()
    from sim.kernels.lookup import TableLookup
    from sim.kernels.table import read_table, shipped_table
    from sim.models.compute import TRANSFER_SOURCE, family_model

    entry = entry or find(gpu.name)
    notes: list[str] = []
    declared = gpu.compute_efficiency
    transferred = (entry is not None and entry.status != "measured"
                   and entry.family != "A100")
    if opts.compute_efficiency is not None:
        cm = scaled_generic(opts.compute_efficiency)
        if entry is None:
            notes.append(Assumption(f"WARNING: GPU {gpu.name} is not in the GPU catalogue "
                                    f"({known_names()}); compute uses --compute-efficiency "
                                    f"{opts.compute_efficiency:g}", "gpu-unknown", departs=True))
        else:
            notes.append(f"--compute-efficiency {opts.compute_efficiency:g} replaces the "
                         f"{entry.family} roofline efficiencies")
    elif entry is not None:
        cm = family_model(entry.family)
    elif declared is not None:
        cm = replace(scaled_generic(declared, field="node.gpu.compute_efficiency"),
                     family=f"{gpu.name}: generic scaled to {declared:g}, not measured")
        notes.append(f"GPU {gpu.name} is not in the GPU catalogue: declared in the topology, "
                     f"its operators are timed by the roofline at its node.gpu."
                     f"compute_efficiency {declared:g} of the dense peak for large GEMMs (the "
                     "generic efficiency set scaled to it; not measured)")
    else:
        raise UsageError(f"GPU {gpu.name!r} of the topology is not in the GPU catalogue "
                         f"(known: {known_names()}); name one of them in node.gpu.name, declare "
                         "node.gpu.compute_efficiency in the topology or give "
                         "--compute-efficiency FRACTION", field="compute_efficiency")
    table, transfer = None, None
    if opts.kernel_table not in (None, "none"):
        table = read_table(opts.kernel_table)
    elif opts.kernel_table is None and entry is not None and entry.kernel_table:
        table = shipped_table(entry.kernel_table)
    elif opts.kernel_table is None and transferred:
        from sim.models.compute_transfer import source_transfer

        transfer, name = source_transfer(entry)
        table = shipped_table(name)
    if transferred:
        from sim.models.compute_transfer import ROOFLINE_RULE, rule

        roof = ("at --compute-efficiency's efficiencies" if opts.compute_efficiency is not None
                else "at H100's efficiencies")
        mamf = transfer and transfer.mamf and (entry.name, *transfer.mamf)
        said = (rule(roofline=roof, exp_rates=transfer.exp_rates, mamf=mamf or None)
                if transfer else ROOFLINE_RULE)
        notes.append(Assumption(f"compute of {entry.name} transferred from {TRANSFER_SOURCE} "
                                f"SXM: {said}",
                                "gpu-transfer", departs=True))
    lookup = None
    if table is not None:
        slots, why = _slots(table, entry if transfer is None else None)
        lookup = TableLookup(table, slots=slots)
        notes.append(("transferred: " if transfer else "") + table.describe()
                     + f"; attention tile model on {slots} SMs ({why})")
    elif opts.sustained_slowdown is not None:
        raise UsageError("scales kernel-table times, and this run has no kernel table: its "
                         "compute is timed by the roofline", field="sustained_slowdown")
    knobs = None
    if opts.calibration is not None:  # the topology check is the scenario's (the network)
        from sim.calibration.profile import check_applies

        notes += check_applies(opts.calibration, gpu=gpu.name,
                               override=opts.calibration_any_cluster)
        notes += opts.calibration.assumptions()
        knobs = opts.calibration.knobs
    return ComputeSetup(cm, lookup, notes, entry, opts.sustained_slowdown, knobs,
                        opts.calibration, transfer)


def _slots(table, entry: CatalogGpu | None) -> tuple[int, str]:
    """SMs the attention tile model schedules on: the table's ``# sms:`` header, else the
    catalogue's count for the GPU, else 132 (an H100 SXM's), said so."""
    text = table.meta.get("sms", "")
    if text.isdigit() and int(text) > 0:
        return int(text), "the table's sms header"
    if entry is not None and entry.sms:
        return entry.sms, f"{entry.name} in the GPU catalogue"
    return 132, "assumed: neither the table nor the catalogue gives the SM count"


def scaled_generic(eff: float, field: str = "--compute-efficiency"):
    """The generic efficiency set with its large-GEMM efficiency set to ``eff`` and the other
    matrix efficiencies scaled in proportion (memory efficiency and overheads unchanged);
    ``field`` names where ``eff`` came from in the error for a value outside (0, 1]."""
    from sim.models.compute import GENERIC

    if not 0 < eff <= 1:
        raise UsageError(f"must be a fraction in (0, 1], got {eff:g}", field=field)
    f = eff / GENERIC.gemm_efficiency
    return replace(GENERIC, family=f"given ({eff:g} of peak)", gemm_efficiency=eff,
                   bmm_efficiency=GENERIC.bmm_efficiency * f,
                   flash_fwd_efficiency=GENERIC.flash_fwd_efficiency * f,
                   flash_bwd_efficiency=GENERIC.flash_bwd_efficiency * f)


def timer_for(gpu, setup: ComputeSetup, backend: str, fp8_recipe: str = "") -> Timer:
    """A fresh :class:`Timer` (tallies at zero) for ``gpu`` under ``setup``; ``fp8_recipe``
    (Megatron-Core's ``--fp8-recipe``): ``"mxfp8"`` times a transferred GPU's fp8 GEMMs as
    MXFP8 ones (:meth:`sim.models.compute_transfer.Transfer.block_scaled`)."""
    from sim.models.compute import Timer

    transfer = setup.transfer
    if transfer is not None and fp8_recipe == "mxfp8":
        transfer = replace(transfer, mxfp8=True)
    return Timer(gpu, setup.cm, setup.lookup, backend, knobs=setup.knobs, transfer=transfer)


REFERENCE_GEMM = (8192, 8192, 8192)  # the op whose time ratio relates two GPUs' compute


def _reference_ns(gpu, setup: ComputeSetup) -> float:
    from sim.models.compute import Timer
    from sim.models.vocab.ops import gemm

    op = gemm("reference", *REFERENCE_GEMM)
    return Timer(gpu, setup.cm, setup.lookup, transfer=setup.transfer).op_ns(op, "bf16")[0]


def source_compute_scale(file_gpu: str | None, topo_gpu, *, source_gpu: str | None = None,
                         compute_scale: float | None = None,
                         topo_setup: ComputeSetup | None = None) -> tuple[float, str | None]:
    """Factor for the compute times of a workload file measured on another GPU, and the
    report line saying what was done (``None``: nothing to say: the file names no GPU and the
    topology's is not in the catalogue).

    The file's GPU is ``--source-gpu`` or the file's own ``gpu`` header field. When it differs
    from the topology's GPU, every compute time is multiplied by the compute models' time ratio
    of one reference operator, a ``8192³`` bf16 GEMM, on the topology's GPU (its kernel table
    where it has one, else its roofline) over the file's GPU (same rule); ``--compute-scale F``
    multiplies by ``F`` instead. A file that names no GPU is used as it is, and said so
    when the topology's GPU is in the catalogue. A file's GPU that the catalogue does not know
    is refused; when the topology's GPU is the unknown one (test topologies), the times are
    used as they are with a WARNING naming ``--compute-scale``.
    """
    if compute_scale is not None:
        if not compute_scale > 0:
            raise UsageError(f"must be > 0, got {compute_scale:g}", field="compute_scale")
        return compute_scale, Assumption(f"compute times of the workload file multiplied by "
                                         f"{compute_scale:g} (--compute-scale)",
                                         "compute-scale")
    name = source_gpu or file_gpu
    topo_entry = find(topo_gpu.name)
    if name is None:
        if topo_entry is None:
            return 1.0, None
        return 1.0, Assumption(f"compute times as in the workload file: it does not name the "
                               f"GPU it was measured on; if that is not the topology's "
                               f"{topo_entry.name}, --source-gpu NAME scales them by the "
                               "compute models' time ratio and --compute-scale F by a factor",
                               "compute-as-is")
    src = find(name)
    if src is None:
        raise UsageError(f"GPU {name!r} is not in the GPU catalogue (known: {known_names()})",
                         field="source_gpu")
    origin = "--source-gpu" if source_gpu else "the file's gpu header field"
    if src is topo_entry:
        return 1.0, Assumption(f"compute times as in the workload file, measured on "
                               f"{src.name} ({origin}), the topology's GPU", "compute-as-is")
    if topo_entry is None:
        return 1.0, Assumption(f"WARNING: compute times measured on {src.name} used as they "
                               f"are: the topology's GPU {topo_gpu.name!r} is not in the GPU "
                               "catalogue, so no compute model relates the two (--compute-scale "
                               "F scales them)", "compute-unscaled", departs=True)
    src_gpu = GpuSpec(src.name, dict(src.peak_tflops), src.hbm_GB, src.hbm_GBps)
    t_src = _reference_ns(src_gpu, resolve_compute(src_gpu))
    t_dst = _reference_ns(topo_gpu, topo_setup or resolve_compute(topo_gpu))
    f = t_dst / t_src
    return f, Assumption(
        f"compute times measured on {src.name} ({origin}) scaled by {f:.4f} to the "
        f"topology's {topo_entry.name}: the ratio of a {'x'.join(map(str, REFERENCE_GEMM))}"
        f" bf16 GEMM's time on {topo_entry.name} ({t_dst / 1e6:.3f} ms) to that on "
        f"{src.name} ({t_src / 1e6:.3f} ms) in their compute models; --compute-scale "
        "overrides", "compute-scaled")


def scale_workload(wl, factor: float):
    """``wl`` (a :class:`~sim.program.workload.Workload`) with every compute time × ``factor``
    (rounded to whole ns); the same object when ``factor == 1``."""
    if factor == 1.0:
        return wl

    def ph(p):
        return replace(p, compute_ns=round(p.compute_ns * factor))

    layers = [replace(x, forward=ph(x.forward), input_grad=ph(x.input_grad),
                      weight_grad=ph(x.weight_grad)) for x in wl.layers]
    return replace(wl, layers=layers)

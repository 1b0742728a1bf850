"""The transfer rule checked out of sample on A100 against Korthikanti et al. Table 4.

The GPUs without a measured kernel table (B200, GB200, GB300, H200, MI300X) are timed by the
transfer rule (:mod:`sim.models.compute_transfer`): H100 SXM's measured kernel table, each
kernel rescaled by H100's over the GPU's maximum achievable matmul rate (MAMF) when it is
compute-bound and by the HBM ratio when it is memory-bound, the roofline at H100's
efficiencies on the GPU's peaks where the table has no answer. A100 is not timed that way in
simrun (its roofline is fitted to Table 4: :mod:`sim.validation.table4`), which makes it the
one GPU where the rule can be checked against measured times it was not fitted to.

The check times the five Table 4 configurations of :mod:`sim.validation.table4` (one 22B GPT
layer, b = 4, s = 2048, TP 8, bf16, unfused attention, the same program, network and
asynchronous TP overlap) with A100's operators timed by the rule exactly as
:func:`sim.models.compute_setup.resolve_compute` times a transferred GPU:
:func:`~sim.models.compute_transfer.source_transfer` for the A100 SXM4 80 GB catalogue entry
(the topology's GPU) with the A100 SXM bf16 MAMF supplied here (:data:`A100_MAMF_BF16`), H100's
shipped table, H100's roofline efficiencies for what the table does not answer, no
sustained-load factor (step 4 of the rule). Nothing in the catalogue or in how A100 is timed
changes: the rate lives here, not in ``sim/data/gpus.csv``, whose ``mamf_*`` cells are read
only by the transfer rule, which never times an A100 (a cell there would change nothing and
would have to say 40 or 80 GB, which the measurement does not).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from sim.models.compute_setup import ComputeSetup
from sim.models.vocab.ops import OpKind
from sim.validation import table4

#: A100 SXM bf16 MAMF, TFLOP/s: stas00/ml-engineering commit
#: 744d01e18b79512572f64a6bbd8b5f4a725203a7, compute/accelerator/README.md line 351,
#: "Maximum Achievable Matmul FLOPS comparison table", row "NVIDIA A100 SXM" (271.2 of 312,
#: 86.9%; torch 2.6.0+cu126, best shape 1024x10240x5120); the row does not say 40 or 80 GB
#: (the two have the same tensor cores and clocks: 312 TFLOP/s bf16 dense, NVIDIA A100 datasheet)
A100_MAMF_BF16 = 271.2
MAMF_ROW = ("stas00/ml-engineering 744d01e1, compute/accelerator/README.md line 351 'Maximum "
            "Achievable Matmul FLOPS comparison table': row NVIDIA A100 SXM, bf16 271.2 (torch "
            "2.6.0+cu126, best shape 1024x10240x5120; 40 or 80 GB not said)")
#: the parts a layer's compute time is split into (:func:`layer_parts`)
PARTS = ("GEMM", "attention BMM", "memory-bound")


def transfer_setup() -> ComputeSetup:
    """How a run on Table 4's topology GPU (A100 SXM4 80 GB) would time its operators were A100
    a transferred GPU with bf16 MAMF :data:`A100_MAMF_BF16`:
    :func:`~sim.models.compute_setup.resolve_compute` with the GPU's catalogue entry given
    that rate and a family other than A100's (the one family the rule never transfers), so
    the setup is the one any transferred GPU gets — H100's table and rates, H100's roofline
    efficiencies where the table has no answer, no sustained-load factor."""
    from sim.kernels.gpus import find
    from sim.models.compute_setup import resolve_compute
    from sim.topology import load_topology

    gpu = load_topology(table4.TOPOLOGY).gpu
    entry = find(gpu.name)
    if entry is None or entry.family != "A100":
        raise ValueError(f"{table4.TOPOLOGY}: GPU {gpu.name} is not an A100 of the catalogue")
    entry = dataclasses.replace(entry, family="A100 (timed by the transfer rule: check only)",
                                mamf_tflops={"bf16": A100_MAMF_BF16}, mamf_from=MAMF_ROW)
    return resolve_compute(gpu, entry=entry)


def _part(op) -> str:
    if op.kind is OpKind.GEMM:
        return "GEMM"
    if op.kind is OpKind.BMM:
        return "attention BMM"
    if op.kind in (OpKind.ELEMENTWISE, OpKind.OPTIMIZER):
        return "memory-bound"
    raise ValueError(f"operator {op.name}: kind {op.kind} not expected in the 22B layer")


def layer_ops(sp: bool, recompute: str, setup: ComputeSetup | None = None,
               layer: int = table4.LAYER) -> list[tuple[str, str, str, float, str]]:
    """``(direction, part, operator name, ns, source)`` of every operator of transformer layer
    ``layer`` in one Table 4 configuration timed by ``setup`` (``None``: A100's shipped
    roofline), by the timer the program's generator builds (its GEMM kinds, sustained factor);
    direction ``"fwd"`` (forward phases) or ``"bwd"`` (input- and weight-gradient phases,
    recomputation included); the sums are checked against the program's phases."""
    from sim.models.assumptions import gpu_family
    from sim.models.compute_setup import timer_for
    from sim.models.optimizer import grad_bytes
    from sim.models.plan import build_model_plan
    from sim.parallel.config import attention_kernel

    run = table4.prepare_row(sp, recompute, setup).model_run
    par, gpu = run.par, run.gpu
    timer = timer_for(gpu, run.compute, attention_kernel(par.training, gpu_family(gpu)),
                      par.fp8_recipe)
    timer.main_grad_fp32 = not par.zero and grad_bytes(par.dtype, par.grad_reduce_in_bf16) == 4
    timer.sustained = run.compute.sustained(par.dtype)[0]
    prefix = f"layer{layer}_"
    rows = [r for r in build_model_plan(run.model, par).stages[0].chunks[0]
            if r.name.startswith(prefix)]
    out = [(d, op, *timer.op_ns(op, par.dtype)) for d, phases in
           (("fwd", ("fwd",)), ("bwd", ("ig", "wg"))) for r in rows for ph in phases
           for op in getattr(r, ph)]
    _check_against_program(run.program, prefix, out)
    return [(d, _part(op), op.name, t, "roofline" if how == "roofline" else "table")
            for d, op, t, how in out]


def layer_parts(sp: bool, recompute: str, setup: ComputeSetup,
                layer: int = table4.LAYER) -> dict[tuple[str, str, str], tuple[float, float]]:
    """Compute time (ns, one microbatch) of transformer layer ``layer`` of one Table 4
    configuration by ``(direction, part, source)``: direction ``"fwd"`` or ``"bwd"``
    (:func:`layer_ops`), part one of :data:`PARTS`, source where ``setup`` (the transfer)
    timed the operators: ``"table"`` (H100's rows, transferred) or ``"roofline"`` (the
    fallback); per key ``(A100's shipped roofline ns, setup's ns)`` of the same operators."""
    ship, moved = (layer_ops(sp, recompute, s, layer) for s in (None, setup))
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    for (d, part, name, t0, _), (d1, _, name1, t1, how) in zip(ship, moved, strict=True):
        if (d, name) != (d1, name1):
            raise RuntimeError(f"operators differ: {d} {name} against {d1} {name1}")
        key = (d, part, how)
        a, b = out.get(key, (0.0, 0.0))
        out[key] = (a + t0, b + t1)
    return out


def _check_against_program(program, prefix: str, parts: list) -> None:
    """Raise if ``parts`` (:func:`layer_ops`' operators and times) do not add up to the
    compute of the program's phases of the layer (whole ns per phase: at most one ns per phase
    apart)."""
    layers = [x for x in program.stages[0].chunks[0] if x.name.startswith(prefix)]
    for direction, fields in (("fwd", ("forward",)), ("bwd", ("input_grad", "weight_grad"))):
        prog = sum(getattr(x, f).compute_ns for x in layers for f in fields)
        mine = math.fsum(t for d, _, t, _ in parts if d == direction)
        if abs(prog - mine) > len(layers) * len(fields):
            raise RuntimeError(f"{prefix[:-1]} {direction}: operators add up to {mine:.0f} ns, "
                               f"the program's phases to {prog} ns")


@dataclass(frozen=True)
class CheckRow:
    """One Table 4 configuration: measured, A100 roofline (shipped, fitted) and transfer-rule
    (not fitted) layer times, ms, forward and backward, and the share (0..1) of the transfer
    run's layer compute time that came from H100's table rows (the rest: roofline fallback)."""

    label: str
    measured: tuple[float, float]
    roofline: tuple[float, float]
    transfer: tuple[float, float]
    table_share: tuple[float, float]

    def errors(self, model: tuple[float, float]) -> tuple[float, float]:
        """Relative errors (model / measured − 1) of ``model`` (fwd, bwd)."""
        return tuple(m / r - 1 for m, r in zip(model, self.measured, strict=True))


def check() -> list[CheckRow]:
    """The five Table 4 configurations (:data:`sim.validation.table4.TABLE_4`), each timed by
    A100's shipped roofline and by the transfer rule (:func:`transfer_setup`)."""
    setup = transfer_setup()
    shipped, moved = table4.table(), table4.table(setup=setup)
    out = []
    for (label, rf, rb, sf, sb), (_, _, _, tf, tb), (_, sp, rc, _, _) in zip(
            shipped, moved, table4.TABLE_4, strict=True):
        parts = layer_parts(sp, rc, setup)
        share = []
        for d in ("fwd", "bwd"):
            tab = math.fsum(t for k, (_, t) in parts.items() if k[0] == d and k[2] == "table")
            share.append(tab / math.fsum(t for k, (_, t) in parts.items() if k[0] == d))
        out.append(CheckRow(label, (rf, rb), (sf, sb), (tf, tb), (share[0], share[1])))
    return out

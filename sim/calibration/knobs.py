"""The calibration knobs: a few named, physical, bounded properties of one software stack on
one cluster that ``simrun calibrate`` fits to the user's measurements (docs/calibration.md,
"Calibrating to your own stack").

Each knob acts on one part of the modelled time, after the kernel table or the roofline has
timed an operator (:meth:`Knobs.op_ns`) or on the topology's links (:func:`calibrated_topology`):

- ``gemm_efficiency_scale`` (dimensionless): every matrix kernel (GEMM, batched matmul, fp32
  matmul) runs at this multiple of the modelled rate (its time ÷ the scale): clocks, power cap,
  cuBLAS/cuBLASLt version of the stack.
- ``attention_scale``: the same for the fused/flash attention kernels (the attention library
  and its version: cuDNN's fused kernel runs 1.5-2.2× faster than FlashAttention-2 on the same
  H100, docs/calibration.md §D).
- ``memory_bound_scale``: the same for streaming kernels (norms, element-wise, loss, optimizer):
  the fraction of HBM bandwidth they reach.
- ``kernel_overhead_us`` (µs): added to every kernel launch: host-side launch gaps the stack
  leaves between kernels (Python overhead, no CUDA graphs).
- ``network_busbw_factor``: every link efficiency of the topology (NVLink, PCIe, NIC, fabric)
  × the factor: the bus bandwidth NCCL reaches on this cluster against the modelled one.

The bounds are assumptions, not measurements: they keep a fit from explaining a modelling error
(a missing operator, a wrong layout) by an implausible stack (docs/calibration.md says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

#: :class:`sim.models.vocab.ops.OpKind` values (a str enum) of each knob's kernels
_MATRIX = ("gemm", "bmm", "fp32_matmul")
_ATTENTION = ("flash_fwd", "flash_bwd")
_STREAMING = ("elementwise", "optimizer")


@dataclass(frozen=True)
class KnobSpec:
    """One knob: ``name``, ``unit``, its neutral value, its bounds and what it means."""

    name: str
    unit: str
    neutral: float
    low: float
    high: float
    means: str


#: the knobs, in the order a fit takes them (one more per independent measured run): the
#: largest share of a training iteration first (its GEMMs), then the network
KNOBS: tuple[KnobSpec, ...] = (
    KnobSpec("gemm_efficiency_scale", "", 1.0, 0.5, 1.3,
             "matrix kernels (GEMM, batched matmul) run at this multiple of the modelled rate "
             "(bounds assumed: half to 1.3x; 1.3 x the best measured H100 GEMM, 77% of peak, "
             "stays below the peak)"),
    KnobSpec("network_busbw_factor", "", 1.0, 0.5, 1.2,
             "every link efficiency of the topology x this factor (the bus bandwidth NCCL "
             "reaches; bounds assumed, no efficiency above 1)"),
    KnobSpec("attention_scale", "", 1.0, 0.5, 2.2,
             "attention kernels run at this multiple of the modelled rate (bounds: cuDNN's "
             "fused kernel is 1.5-2.2x FlashAttention-2's rate, docs/calibration.md §D)"),
    KnobSpec("memory_bound_scale", "", 1.0, 0.5, 1.25,
             "streaming kernels (norms, element-wise, loss, optimizer) run at this multiple of "
             "the modelled rate (bounds assumed; 1.25 x 80% of HBM bandwidth is the peak)"),
    KnobSpec("kernel_overhead_us", "us", 0.0, 0.0, 20.0,
             "host time added to every kernel launch (bounds assumed: 0-20 us)"),
)
SPEC = {k.name: k for k in KNOBS}


@dataclass(frozen=True)
class Knobs:
    """Values of the knobs (neutral: the uncalibrated model)."""

    gemm_efficiency_scale: float = 1.0
    network_busbw_factor: float = 1.0
    attention_scale: float = 1.0
    memory_bound_scale: float = 1.0
    kernel_overhead_us: float = 0.0

    def with_value(self, name: str, value: float) -> Knobs:
        return replace(self, **{name: value})

    def value(self, name: str) -> float:
        return getattr(self, name)

    def changed(self) -> dict[str, float]:
        """The knobs away from their neutral value, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != SPEC[f.name].neutral}

    def compute_neutral(self) -> bool:
        return all(k == "network_busbw_factor" for k in self.changed())

    def op_ns(self, op, t_ns: float) -> float:
        """The time (ns) of ``op`` (a :class:`~sim.models.vocab.ops.Op`) the model gave as
        ``t_ns``, under these knobs."""
        if t_ns <= 0:
            return t_ns
        if op.kind in _MATRIX:
            t_ns /= self.gemm_efficiency_scale
        elif op.kind in _ATTENTION:
            t_ns /= self.attention_scale
        elif op.kind in _STREAMING:
            t_ns /= self.memory_bound_scale
        return t_ns + op.count * self.kernel_overhead_us * 1e3


def out_of_bounds(name: str, value: float) -> str | None:
    """Why ``value`` is not a valid value of knob ``name`` (``None`` if it is)."""
    spec = SPEC.get(name)
    if spec is None:
        return f"unknown knob (known: {', '.join(SPEC)})"
    if not math.isfinite(value) or not spec.low <= value <= spec.high:
        return f"{value:g} is outside the knob's bounds [{spec.low:g}, {spec.high:g}]"
    return None


def calibrated_topology(topo, factor: float):
    """``topo`` (a :class:`~sim.topology.spec.Topology`) with every link efficiency × ``factor``
    (capped at 1: a link cannot beat its line rate); the same object at factor 1."""
    if factor == 1.0:
        return topo

    def eff(e: float) -> float:
        return min(1.0, e * factor)

    node = topo.node
    node = replace(node, pcie=replace(node.pcie, efficiency=eff(node.pcie.efficiency)),
                   nics=replace(node.nics, efficiency=eff(node.nics.efficiency)),
                   nvlink=None if node.nvlink is None
                   else replace(node.nvlink, efficiency=eff(node.nvlink.efficiency)))
    fabric = None if topo.fabric is None else replace(topo.fabric,
                                                      efficiency=eff(topo.fabric.efficiency))
    return replace(topo, node=node, fabric=fabric)

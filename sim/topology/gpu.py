"""GPU hardware description (one entry of a topology file's ``node.gpu`` section)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuSpec:
    """A GPU model.

    ``peak_tflops``: dense peak TFLOP/s (1e12 FLOP/s) per dtype key (``bf16``, ``fp16``,
    ``fp8``, ``fp4`` — NVFP4, data-center Blackwell —, ``fp32``, ``tf32``); ``hbm_GB``: memory
    capacity in GB (1e9 bytes);
    ``hbm_GBps``: memory bandwidth in GB/s (1e9 bytes/s); ``compute_efficiency``: the topology
    file's ``compute_efficiency`` (fraction of the dense peak that large GEMMs reach), which a
    GPU the catalogue (``sim/data/gpus.csv``) does not know needs for its compute to be timed
    (``None``: not given; :func:`sim.models.compute_setup.resolve_compute`).
    """

    name: str
    peak_tflops: dict[str, float] = field(default_factory=dict)
    hbm_GB: float = 0.0
    hbm_GBps: float = 0.0
    compute_efficiency: float | None = None

    def tflops(self, dtype: str) -> float:
        """Peak dense TFLOP/s for ``dtype``; raises KeyError naming the dtype if unknown."""
        try:
            return self.peak_tflops[dtype]
        except KeyError:
            raise KeyError(
                f"GPU {self.name} has no peak_tflops entry for dtype {dtype!r}") from None

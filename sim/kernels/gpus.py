"""The GPU catalogue (``sim/data/gpus.csv``): datasheet peaks, memory, SM count, NVLink
generation, source of every number, and whether a measured kernel table ships for the GPU.

A topology's ``node.gpu.name`` is looked up by its name or an alias, compared without case,
spaces, dashes or underscores. :func:`sim.models.compute_setup.resolve_compute` turns the
topology's GPU and the ``--kernel-table`` / ``--compute-efficiency`` options into the compute
model a run uses.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

DTYPES = ("bf16", "fp16", "fp8", "fp4", "tf32", "fp32")
MAMF_DTYPES = ("bf16", "fp8")  # precisions of the measured achievable matmul rates (mamf_*)


@dataclass(frozen=True)
class CatalogGpu:
    """One catalogue entry (peaks in dense TFLOP/s; ``None``: no published number found)."""

    name: str
    aliases: tuple[str, ...]
    family: str
    status: str  # "measured" or "datasheet-only"
    peak_tflops: dict
    hbm_GB: float
    hbm_GBps: float
    sms: int | None
    nvlink: str
    kernel_table: str
    peaks_from: str  # "vendor datasheet", or what else they rest on (see sim/data/gpus.csv)
    source: str
    exp_tera_per_s: float | None = None  # SFU exponentials, 1e12/s (None: no published figure)
    #: measured maximum achievable matmul rates, TFLOP/s by precision ("bf16", "fp8"; a missing
    #: key: none measured), and which measurement they are (``mamf_from`` of sim/data/gpus.csv)
    mamf_tflops: dict = field(default_factory=dict)
    mamf_from: str = ""


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name).upper()


@lru_cache(maxsize=1)
def catalog() -> tuple[CatalogGpu, ...]:
    """All catalogue entries, in file order."""
    text = (resources.files("sim") / "data" / "gpus.csv").read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    out = []
    for r in csv.DictReader(io.StringIO(body)):
        peaks = {d: float(r[d]) for d in DTYPES if r[d]}
        out.append(CatalogGpu(
            name=r["name"], aliases=tuple(a for a in r["aliases"].split("|") if a),
            family=r["family"], status=r["status"], peak_tflops=peaks,
            hbm_GB=float(r["hbm_GB"]), hbm_GBps=float(r["hbm_GBps"]),
            sms=int(r["sms"]) if r["sms"] else None, nvlink=r["nvlink"],
            kernel_table=r["kernel_table"], peaks_from=r["peaks_from"], source=r["source"],
            exp_tera_per_s=float(r["exp_tera_per_s"]) if r["exp_tera_per_s"] else None,
            mamf_tflops={d: float(r[f"mamf_{d}"]) for d in MAMF_DTYPES if r[f"mamf_{d}"]},
            mamf_from=r["mamf_from"]))
    return tuple(out)


def known_names() -> str:
    return ", ".join(g.name for g in catalog())


def find(name: str) -> CatalogGpu | None:
    """The catalogue entry whose name or alias matches ``name``, else ``None``."""
    k = _key(name)
    for g in catalog():
        if k == _key(g.name) or any(k == _key(a) for a in g.aliases):
            return g
    return None


def describe(g: CatalogGpu) -> str:
    """One line for the report: the GPU, whether simrun has measured kernels of it, its
    datasheet numbers and what they rest on."""
    peaks = ", ".join(f"{d} {v:g}" for d, v in g.peak_tflops.items())
    if g.status == "measured":
        status = f"measured: kernel table sim/data/kernels/{g.kernel_table} measured on it"
    else:
        status = ("datasheet-only: no kernel table measured on it; simrun's compute model "
                  + ("for it is a roofline on these peaks" if g.family == "A100" else
                     "for it is H100 SXM's transferred by these peaks"
                     + (" and achievable matmul rates (MAMF)" if g.mamf_tflops else "")
                     + " and bandwidth (the transfer rule, stated below)"))
    return (f"GPU {g.name} ({status}): dense peaks TFLOP/s {peaks}; HBM {g.hbm_GB:g} GB at "
            f"{g.hbm_GBps:g} GB/s; {g.sms or 'unknown'} SMs; {g.nvlink}; peaks from "
            f"{g.peaks_from}; source: {g.source}")

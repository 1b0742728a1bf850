"""Reader registry: pick a workload reader by content sniffing, or by ``--format``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sim.errors import InputError, UsageError
from sim.files import inputs
from sim.files.catalog import resolve
from sim.program.workload import Workload
from sim.workload import aicb


@dataclass(frozen=True)
class Reader:
    name: str
    description: str
    sniff: Callable[[str], bool]
    read: Callable[..., Workload]


def _needs_model(text: str, file: str, **_) -> Workload:
    """AICB's physical format has no compute times: it is read with a model spec."""
    del text
    raise UsageError(f"{file} is AICB's physical-format collective log (a DeepSpeed ZeRO-3 "
                     "iteration without compute times): give the model spec whose tensors it "
                     "gathers, which times the compute (docs/workload-formats.md)",
                     field="model")


def _reader(module: str) -> object:
    """The reader module ``sim.workload.<module>``, imported on first use (a run pays only for
    the format it reads)."""
    return importlib.import_module(f"sim.workload.{module}")


READERS: dict[str, Reader] = {
    "aicb": Reader("aicb", "SimAI/AICB workload text (ns, bytes)", aicb.sniff,
                   lambda text, file, **_: aicb.read_aicb(text, file)),
    "optable": Reader("optable", "per-operator table (ms, element counts)",
                      lambda text: _reader("optable").sniff(text),
                      lambda text, file, **kw: _reader("optable").read_optable(text, file, **kw)),
    "aicb-csv": Reader("aicb-csv", "AICB physical-format collective log (CSV; with --model)",
                       lambda text: _reader("aicb_csv").sniff(text), _needs_model),
}


def _is_chakra_dir(path: str | Path) -> bool:
    """Whether ``path`` is a folder: per-rank Chakra traces (:mod:`sim.workload.chakra`)."""
    return Path(path).is_dir()


def is_collective_log(path: str | Path) -> bool:
    """Whether the workload file at ``path`` (or a shipped one's name) is AICB's
    physical-format collective log (read with ``--model``: :mod:`sim.scenario.collective_log`)."""
    if _is_chakra_dir(path):
        return False
    return _reader("aicb_csv").sniff(read_text(resolve("workloads", path, "--workload")))


def read_text(path: str | Path) -> str:
    """Read a text file (UTF-8, or UTF-16/32 with a BOM); any I/O or decoding problem becomes
    an :class:`InputError` (see :mod:`sim.files.inputs`)."""
    return inputs.read_text(path)


def read_workload(path: str | Path, fmt: str | None = None, **options) -> Workload:
    """Parse a workload file with the reader ``fmt`` or, if ``None``, the one whose sniffer
    accepts the content. ``options`` go to readers that take them (e.g. ``bytes_per_element``).
    A folder is read as per-rank Chakra traces (:mod:`sim.workload.chakra`)."""
    if _is_chakra_dir(path):
        if fmt not in (None, "chakra"):
            raise UsageError(f"{path} is a folder: per-rank Chakra traces, not {fmt}",
                             field="format")
        return _reader("chakra").read_chakra(path)
    path = resolve("workloads", path, "--workload")
    text = read_text(path)
    if fmt is not None:
        if fmt not in READERS:
            raise InputError(f"unknown format {fmt!r}; choose one of {', '.join(READERS)}",
                             field="format")
        reader = READERS[fmt]
    else:
        # the first reader whose sniffer accepts the text (later ones are not imported)
        reader = next((r for r in READERS.values() if r.sniff(text)), None)
        if reader is None:
            raise InputError(
                "unrecognised workload format (expected an AICB header such as "
                "'HYBRID_TRANSFORMER_FWD_IN_BCKWD ...' or an operator table header with "
                "'forward_compute_time'); force one with --format",
                file=str(path), line=1, field="format",
            )
    return reader.read(text, str(path), **options)

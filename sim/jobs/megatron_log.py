"""Reader of a Megatron-LM training log (stdout of ``pretrain_gpt.py``): the printed
``arguments`` block and the per-iteration lines.

Shapes read, as Megatron-LM prints them (NVIDIA/Megatron-LM at d98e8a64dd):

- ``megatron/training/arguments.py`` ``_print_args``: a line
  ``------------------------ arguments ------------------------``, then one line per argument,
  ``'  {} {} {}'.format(arg, '.' * (48 - len(arg)), value)`` (sorted case-insensitively), then
  ``-------------------- end of arguments ---------------------``. The name is the argparse
  ``dest`` (``tensor_model_parallel_size``), the value Python's ``str`` of it (``None``,
  ``True``, ``[0.9, 0.95]``).
- ``megatron/training/training.py`` ``training_log``: ``[<timestamp>] iteration N/ M |
  consumed samples: ... | elapsed time per iteration (ms): X | throughput per GPU
  (TFLOP/s/GPU): Y | ...`` (the timestamp prefix and the throughput field are absent in older
  releases or without ``--log-throughput``; numbers are padded with spaces).

Lines may carry a launcher's prefix (``0: `` from srun, a logging prefix): the block markers and
the iteration fields are found anywhere in a line. Every problem is an
:class:`~sim.errors.InputError` naming ``file:line`` and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sim.errors import InputError
from sim.files.inputs import read_text, split_lines
from sim.limits import parse_float, parse_int

#: the most arguments one block may hold (Megatron-LM prints about 600)
MAX_ARGUMENTS = 10_000
#: the most iteration lines kept
MAX_ITERATIONS = 1_000_000

_START = re.compile(r"-{3,} arguments -{3,}\s*$")
_END = re.compile(r"-{3,} end of arguments -{3,}\s*$")
_ARG = re.compile(r"^(?P<prefix>.*?) {2}(?P<name>[A-Za-z_][A-Za-z0-9_]*) (?P<dots>\.+)"
                  r"(?: (?P<value>.*))?$")
_ITERATION = re.compile(r"\biteration\s+(?P<it>\S+?)\s*/\s*(?P<total>\S+)\s*\|")
_ELAPSED = re.compile(r"\|\s*elapsed time per iteration \(ms\):\s*(?P<v>[^|]*?)\s*(?:\||$)")
_TFLOPS = re.compile(r"\|\s*throughput per GPU \(TFLOP/s/GPU\):\s*(?P<v>[^|]*?)\s*(?:\||$)")


@dataclass(frozen=True)
class IterationLine:
    """One ``training_log`` line: ``iteration`` (1-based, as printed), ``elapsed_ms`` (the
    mean wall time per iteration over the log interval, ms), ``tflops_per_gpu`` (TFLOP/s per
    GPU as Megatron computes it, or None when not printed) and its ``line`` (1-based)."""

    iteration: int
    elapsed_ms: float
    tflops_per_gpu: float | None
    line: int


@dataclass(frozen=True)
class MegatronLog:
    """A read log: ``arguments`` (argparse dest → printed value, the first block's),
    ``argument_lines`` (dest → 1-based line), ``iterations`` in file order, ``path``."""

    path: str
    arguments: dict[str, str] = field(default_factory=dict)
    argument_lines: dict[str, int] = field(default_factory=dict)
    iterations: list[IterationLine] = field(default_factory=list)

    def line_of(self, name: str) -> int | None:
        """The line of argument ``name`` (None when the log does not print it)."""
        return self.argument_lines.get(name)


def read_megatron_log(path: str | Path) -> MegatronLog:
    """Read a Megatron-LM log file (size bounded by :func:`sim.files.inputs.read_bytes`)."""
    return parse_megatron_log(read_text(path, what="Megatron-LM log"), str(path))


def parse_megatron_log(text: str, file: str) -> MegatronLog:
    """Parse the log ``text`` (``file`` names it in errors). A log with neither an arguments
    block nor an iteration line is refused."""
    lines = split_lines(text)
    log = MegatronLog(file)
    block = _arguments_block(lines, file)
    if block is not None:
        start, end = block
        _read_arguments(lines, start, end, log)
    for i, line in enumerate(lines, 1):
        if "iteration" in line and "elapsed time per iteration" in line:
            if len(log.iterations) >= MAX_ITERATIONS:
                raise InputError(f"more than {MAX_ITERATIONS} iteration lines", file=file,
                                 line=i, field="iteration")
            log.iterations.append(_iteration(line, file, i))
    if block is None and not log.iterations:
        raise InputError("no Megatron-LM 'arguments' block and no 'iteration N/ M | ... | "
                         "elapsed time per iteration (ms): X |' line", file=file,
                         field="arguments")
    return log


def arguments_block_of(text: str, file: str) -> tuple[dict[str, str], dict[str, int]] | None:
    """The first arguments block of ``text`` (values and lines), or None when there is none."""
    lines = split_lines(text)
    block = _arguments_block(lines, file)
    if block is None:
        return None
    log = MegatronLog(file)
    _read_arguments(lines, block[0], block[1], log)
    return log.arguments, log.argument_lines


def _arguments_block(lines: list[str], file: str) -> tuple[int, int] | None:
    """0-based indices of the first block's start marker and its end marker."""
    for i, line in enumerate(lines):
        if _START.search(line):
            for j in range(i + 1, len(lines)):
                if _END.search(lines[j]):
                    return i, j
                if _START.search(lines[j]):
                    break
            raise InputError("an 'arguments' block without its '-- end of arguments --' line "
                             "(truncated log?)", file=file, line=i + 1, field="arguments")
    return None


def _read_arguments(lines: list[str], start: int, end: int, log: MegatronLog) -> None:
    if end - start - 1 > MAX_ARGUMENTS:
        raise InputError(f"more than {MAX_ARGUMENTS} arguments", file=log.path,
                         line=start + 1, field="arguments")
    for i in range(start + 1, end):
        m = _ARG.match(lines[i])
        if m is None:
            raise InputError(f"not an argument line ('  name ..... value'): "
                             f"{lines[i].strip()[:60]!r}", file=log.path, line=i + 1,
                             field="arguments")
        name = m["name"]
        if name in log.arguments:
            raise InputError("argument printed twice", file=log.path, line=i + 1, field=name)
        log.arguments[name] = (m["value"] or "").strip()
        log.argument_lines[name] = i + 1


def _iteration(line: str, file: str, n: int) -> IterationLine:
    m = _ITERATION.search(line)
    it = parse_int(m["it"]) if m else None
    if it is None:
        raise InputError("expected 'iteration N/ M |' before the elapsed time", file=file,
                         line=n, field="iteration")
    m = _ELAPSED.search(line)
    elapsed = parse_float(m["v"]) if m else None
    if elapsed is None or elapsed < 0:
        raise InputError(f"not a non-negative number: {m['v'] if m else ''!r}", file=file,
                         line=n, field="elapsed time per iteration (ms)")
    m = _TFLOPS.search(line)
    tflops = None
    if m:
        tflops = parse_float(m["v"])
        if tflops is None or tflops < 0:
            raise InputError(f"not a non-negative number: {m['v']!r}", file=file, line=n,
                             field="throughput per GPU (TFLOP/s/GPU)")
    return IterationLine(it, elapsed, tflops, n)

"""The per-microbatch block of an AICB file: AICB lists one rank's rows with the block unrolled
``ga`` times between iteration-level rows; :func:`find_structure` recovers that structure
(used by :mod:`sim.workload.stages`; rules in docs/workload-formats.md).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from sim.assumption import Assumption
from sim.errors import InputError
from sim.program.workload import Layer

# Iteration-level rows AICB writes before / after the unrolled microbatch blocks.
ITERATION_ROW = re.compile(
    r"^(grad_gather|grad_param_comm|grad_param_compute|embedding_grads|moe_grad_norm\d*|norm|"
    r"grad_norm|layernorm|embedding_norm|cross_entropy\d*|optimizer\d*|loss\d*)$"
)


@dataclass
class RowStructure:
    """Rows split into iteration-level prologue/epilogue rows and the per-microbatch block."""

    leading: list[Layer]
    block: list[Layer]
    trailing: list[Layer]
    blocks_found: int
    notes: list[str]


def _key(layer: Layer) -> tuple:
    return (layer.name, layer.forward, layer.input_grad, layer.weight_grad)


def find_structure(layers: list[Layer], ga: int, file: str) -> RowStructure:
    """Detect the ``ga`` repeated per-microbatch blocks and the iteration-level rows.

    With ``ga > 1`` the block rows are those whose name occurs a multiple of ``ga`` times; the
    region they span must consist of exactly ``ga`` repetitions (by row name). With ``ga == 1``
    the leading/trailing rows with AICB's iteration-level names are split off.
    """
    names = [lay.name for lay in layers]
    notes: list[str] = []
    if ga > 1:
        counts = Counter(names)
        idx = [i for i, nm in enumerate(names) if counts[nm] % ga == 0]
        if not idx:
            raise InputError(f"ga = {ga} but no row name repeats a multiple of {ga} times, so "
                             "the per-microbatch block cannot be found", file=file, line=1,
                             field="ga")
        start, end = idx[0], idx[-1] + 1
        if (end - start) % ga:
            raise InputError(
                f"ga = {ga} does not divide the {end - start} rows of the repeated region "
                f"(lines {layers[start].line}-{layers[end - 1].line})", file=file, line=1,
                field="ga")
        k = (end - start) // ga
        for i in range(start, end - k):
            if names[i] != names[i + k]:
                raise InputError(
                    f"ga = {ga}: the rows between lines {layers[start].line} and "
                    f"{layers[end - 1].line} do not repeat every {k} rows (line "
                    f"{layers[i + k].line} is {names[i + k]!r}, expected {names[i]!r})",
                    file=file, line=layers[i + k].line, field="name")
        blocks = [layers[start + j * k : start + (j + 1) * k] for j in range(ga)]
        variants = Counter(tuple(_key(x) for x in b) for b in blocks)
        rep_key, rep_count = variants.most_common(1)[0]
        rep = next(b for b in blocks if tuple(_key(x) for x in b) == rep_key)
        if len(variants) > 1:
            diff = sorted({b[i].line for b in blocks for i in range(k)
                           if _key(b[i]) != rep_key[i]})
            notes.append(
                f"the {ga} unrolled blocks are not identical: {rep_count} share the values used "
                f"for every microbatch; rows that differ: lines {_ranges(diff)}")
        notes.append(Assumption(
            f"per-microbatch block: {k} rows (lines {rep[0].line}-{rep[-1].line}), found "
            f"{ga} times = ga", "microbatch-block"))
        return RowStructure(layers[:start], list(rep), layers[end:], ga, notes)
    lead = 0
    while lead < len(names) and ITERATION_ROW.match(names[lead]):
        lead += 1
    trail = len(names)
    while trail > lead and ITERATION_ROW.match(names[trail - 1]):
        trail -= 1
    if trail == lead:
        raise InputError("every row is an iteration-level row; no per-microbatch layers",
                         file=file, field="rows")
    block = layers[lead:trail]
    notes.append(Assumption(f"per-microbatch block: {len(block)} rows (lines "
                            f"{block[0].line}-{block[-1].line}); ga = 1", "microbatch-block"))
    return RowStructure(layers[:lead], block, layers[trail:], 1, notes)


def _ranges(lines: list[int]) -> str:
    out, i = [], 0
    while i < len(lines):
        j = i
        while j + 1 < len(lines) and lines[j + 1] == lines[j] + 1:
            j += 1
        out.append(str(lines[i]) if i == j else f"{lines[i]}-{lines[j]}")
        i = j + 1
    if len(out) > 6:
        out = out[:6] + [f"… ({len(lines)} rows)"]
    return ", ".join(out)


def layer_period(names: list[str]) -> int:
    """Smallest row period of ``names`` (rows per transformer layer); ``len(names)`` if none."""
    n = len(names)
    for p in range(1, n + 1):
        if n % p == 0 and all(names[i] == names[i + p] for i in range(n - p)):
            return p
    return n

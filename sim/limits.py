"""simrun's limits in one place: the work budget, numeric bounds and strict number parsing.

- :data:`MAX_WORK`: one budget for work simrun generates from small inputs, checked before
  anything is allocated: forward/backward ops of the pipeline schedule
  (2·p·v·M, 1 unit each), layer passes of a program (microbatches × layer rows, 1 unit each:
  :func:`check_program_work`), layers of a generated model (:data:`LAYER_UNITS` each), ranks
  named by ``--trace-ranks`` (:data:`TRACE_RANK_UNITS` each). Beyond it a mistyped number
  (``layers: 1000000``, ``--microbatches``, ``0-999999999``) would take minutes and gigabytes
  before saying anything.
- :data:`INT64_MAX`: sizes in bytes and times in ns (``--max-sim-time-s``, message sizes of
  ``simrun collective``) stay within the int64 range of the tools that write workloads.
- :func:`parse_int` / :func:`parse_float`: command-line numbers are read as strictly as numbers
  in files: ASCII digits only, so ``1_6``, `` 8`` and ``٣`` are refused (Python's ``int``
  accepts all three), no ``inf`` or ``nan``.
"""

from __future__ import annotations

import math
import re

from sim.errors import UsageError
from sim.files.inputs import INT64_MAX

MAX_WORK = 1 << 24
"""16,777,216 units of generated work (see the module docstring). Realistic runs stay far
below: 2·p·v·M = 8.4 M ops for p = 128, v = 8, M = 4096; a 1T-parameter GPT (128 layers) with
4096 microbatches is 524,288 layer passes."""

LAYER_UNITS = 4096
"""Units of the budget one layer of a generated model costs: it becomes ~21 operators (a dense
GPT layer: 7 rows of forward, input-grad and weight-grad work), each timed, grouped and compiled
for the engine, ~1 ms per layer on a loaded 2-core machine against ~0.2 µs to allocate one
schedule op. So a model may have up to :data:`MAX_LAYERS` layers (real ones have ≤ 128)."""

MAX_LAYERS = MAX_WORK // LAYER_UNITS

TRACE_RANK_UNITS = 16
"""Units one rank named by ``--trace-ranks`` costs: parsing, checking and tracking it takes ~100
bytes and a track of its own in the trace. So at most :data:`MAX_TRACE_RANKS` ranks (a
1,048,576-rank list takes ~100 MB; a trace of so many tracks is already unreadable)."""

MAX_TRACE_RANKS = MAX_WORK // TRACE_RANK_UNITS

MAX_SAMPLES = 1000
"""Most ``--samples`` of ``--jitter``: each sample simulates every rank (as ``--per-rank`` does,
1–5 s for the 1024-GPU examples on a 2-core machine), so 1,000 samples already take about an
hour; percentiles p50/p90/p99 are stable long before."""

SCALE_RANGE = (1e-3, 1e3)
"""Range of compute-time factors given on the command line (``--compute-scale``, the factor of
``--slow-gpu`` / ``--slow-node``): a GPU 1000× faster or slower than its table is a mistyped
number, and the bound keeps every time within the int64 nanosecond clock."""

MIN_LINK_FACTOR = 1e-6
"""Smallest bandwidth factor of ``--degrade-link``: a link at a millionth of its rate (50 kB/s
for a 400 Gb/s NIC) is a failed link (``--fail-nic``); below it transfer times leave the int64
nanosecond clock."""

MAX_ALLTOALL_PAIRS = 1 << 22
"""Most rank pairs of a ``simrun collective --op alltoall``: every pair is a flow held in memory
(~200 bytes each: 2,048 ranks, 4.2 M pairs, take 0.8 GB and 2–3 s; 4,096 ranks took 3.2 GB and
over two minutes), so at most 2,048 ranks. Message sizes add little (paths are shared)."""

MAX_SIM_TIME_S = INT64_MAX // 10**9
"""Largest ``--max-sim-time-s`` (≈ 292 years: the int64 nanosecond clock)."""

_INT = re.compile(r"\+?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_int(text: str) -> int | None:
    """``text`` as an integer in [0, 2^63−1] written with ASCII digits (optional ``+``), else
    None. No spaces, underscores, signs other than ``+`` or non-ASCII digits."""
    if not isinstance(text, str) or not _INT.fullmatch(text):
        return None
    digits = text.lstrip("+").lstrip("0")
    if len(digits) > 19:  # more digits than 2^63 has: no int() of huge strings
        return None
    value = int(digits or "0")
    return value if value <= INT64_MAX else None


def parse_float(text: str) -> float | None:
    """``text`` as a finite float in plain ASCII decimal or exponent notation, else None
    (no ``inf``, ``nan``, underscores, spaces or non-ASCII digits)."""
    if not isinstance(text, str) or not _FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def check_program_work(program) -> None:
    """Refuse a program whose layer passes (microbatches × layer rows over all stages and
    chunks: every row runs forward and backward for every microbatch) exceed :data:`MAX_WORK`,
    before its simulation allocates anything (a 700 KB workload file with ``--microbatches
    2000`` would be 20 M passes: hours)."""
    if 2 * program.pp * program.vpp * program.microbatches > MAX_WORK:
        return  # too many schedule ops: the schedule's own check says so (sim.pipeline.schedules)
    rows = sum(len(chunk) for st in program.stages for chunk in st.chunks)
    passes = program.microbatches * rows
    if passes > MAX_WORK:
        raise UsageError(f"{program.microbatches:,} microbatches × {rows:,} layer rows = "
                         f"{passes:,} layer passes; simrun's work budget is {MAX_WORK:,} "
                         "(fewer microbatches, or fewer rows per microbatch)",
                         field="microbatches")

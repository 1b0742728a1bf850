"""Fused attention on Blackwell as the transfer rule times it, checked against cuDNN's published
training benchmarks (an out-of-sample check: nothing of simrun is fitted to them or changed).

B200, GB200 and GB300 have no measured kernel table: simrun times their fused attention by the
transfer rule (:mod:`sim.models.compute_transfer`, step 2): H100 SXM's ``attn_cudnn_*`` rows of
``sim/data/kernels/h100-sxm.csv`` (the exact shape, else the tile model of
:mod:`sim.kernels.attention` fitted to those rows), rescaled per kernel by
``r = (1 − f) · MAMF_H100 / MAMF_GPU + f · exp_H100 / exp_GPU`` (bf16 achievable matmul rates
and special-function exponential rates of ``sim/data/gpus.csv``; ``f`` H100's exponential
share, 1/3 forward, 1/6 backward at head dim 128), the 6 µs per-kernel part unscaled.

NVIDIA published cuDNN's forward and backward times of one GQA shape on these GPUs
(github.com/NVIDIA/cudnn-frontend, ``benchmark/sdpa_benchmark_training/artifacts/``; batch 1,
128 query heads, 8 key/value heads, head dim 128, causal, bf16, s = 512 .. 131072). The rows
this check uses (s = 4096 .. 32768), the commits, cuDNN versions, how each was timed and the
licence are in :data:`DATA` (``docs/data/cudnn-sdpa-blackwell.csv``). Two timing methods: the
cuDNN 9.13 rows (B200, GB300) time each call alone with CUDA events around the Python call
(host launch latency inside, an idle GPU between calls), so only s ≥ :data:`COMPARED_FROM`
(calls of 1 ms and more) are compared, s = 4096 is shown for information; the cuDNN 9.17 rows
(GB200, and GB300 re-run) sum the kernels' device time from the profiler.

Each published shape is timed as a transferred run times it: :func:`timer_for` on the GPU's
catalogue entry with :func:`resolve_compute`, backend ``"fused"`` (cuDNN rows), the operator
``Op(name, FLASH_FWD or FLASH_BWD, kernel="attn_fwd" / "attn_bwd", shape=(b, hq, hkv, s, d,
causal))`` in bf16. H100's table has ``attn_cudnn`` rows up to 64 query heads and s 16384, so
every shape here is answered by the fitted tile model (``"interpolated"``): beyond the table in
heads (128) everywhere and in length at s 32768. Times in ms; errors simrun / published − 1.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from sim.errors import InputError
from sim.files.inputs import positive_field

#: the published rows (repository-relative; the check runs from the checkout)
DATA = "docs/data/cudnn-sdpa-blackwell.csv"
_FIELDS = ("source", "gpu", "cudnn", "backend", "timing", "commit", "s", "forward_ms",
           "backward_ms")
#: the published shape (cudnn-frontend benchmark_bf16_sdpa.py sdpa_configs): b, hq, hkv, d
BATCH, Q_HEADS, KV_HEADS, HEAD_DIM = 1, 128, 8, 128
#: the shortest length compared: below it the events-timed calls are under 1 ms (B200 s 4096:
#: 0.642 ms forward), where host launch latency and clocks ramping from idle weigh
COMPARED_FROM = 8192
#: the sources compared against simrun's three Blackwell catalogue entries, in print order
#: (the supplementary "GB300 cuDNN 9.17" is the same GPU timed the GB200 way)
SOURCES = ("B200 cuDNN 9.13", "GB200 cuDNN 9.17", "GB300 cuDNN 9.13", "GB300 cuDNN 9.17")


@dataclass(frozen=True)
class Published:
    """One published shape: ``source`` (a name of :data:`SOURCES`), catalogue ``gpu``, cuDNN
    version, benchmark ``backend`` and ``timing`` (``"events"`` or ``"profiler"``), ``commit``
    of cudnn-frontend, sequence length ``s`` (tokens; queries = keys), forward and backward
    times (ms)."""

    source: str
    gpu: str
    cudnn: str
    backend: str
    timing: str
    commit: str
    s: int
    forward_ms: float
    backward_ms: float


def _positive(r: dict, key: str, line: int, kind=float):
    return positive_field(r, key, file=DATA, line=line, kind=kind)


def parse(text: str) -> list[Published]:
    """The rows of :data:`DATA`'s ``text`` (``#`` lines are its header); an
    :class:`InputError` naming line and field when one is malformed."""
    lines = text.splitlines()
    start = next((i for i, s in enumerate(lines) if not s.startswith("#")), len(lines))
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    if tuple(reader.fieldnames or ()) != _FIELDS:
        raise InputError(f"columns must be {','.join(_FIELDS)}", file=DATA, line=start + 1)
    out = []
    for n, r in enumerate(reader, start=start + 2):
        if r["source"] not in SOURCES:
            raise InputError(f"unknown source {r['source']!r}", file=DATA, line=n,
                             field="source")
        if r["timing"] not in ("events", "profiler"):
            raise InputError(f"must be events or profiler, got {r['timing']!r}", file=DATA,
                             line=n, field="timing")
        out.append(Published(r["source"], r["gpu"], r["cudnn"], r["backend"], r["timing"],
                             r["commit"], _positive(r, "s", n, int),
                             _positive(r, "forward_ms", n), _positive(r, "backward_ms", n)))
    return out


def published(root: Path | None = None) -> list[Published]:
    """The rows of :data:`DATA` under ``root`` (default: this checkout)."""
    root = root or Path(__file__).resolve().parents[2]
    return parse((root / DATA).read_text(encoding="utf-8"))


def gpu_spec(name: str):
    """The :class:`~sim.topology.gpu.GpuSpec` of catalogue entry ``name`` (its datasheet peaks,
    memory and bandwidth), as a topology naming that GPU gets it."""
    from sim.kernels.gpus import find
    from sim.topology.gpu import GpuSpec

    g = find(name)
    if g is None:
        raise ValueError(f"{name} is not a GPU of sim/data/gpus.csv")
    return GpuSpec(g.name, dict(g.peak_tflops), g.hbm_GB, g.hbm_GBps)


def attention_ops(s: int):
    """The published shape at length ``s`` as simrun's forward and backward fused-attention
    operators (:class:`~sim.models.vocab.ops.Op`, shape ``(b, hq, hkv, s, d, causal)``)."""
    from sim.models.vocab.ops import Op, OpKind

    shape = (BATCH, Q_HEADS, KV_HEADS, s, HEAD_DIM, 1)
    return (Op("attn", OpKind.FLASH_FWD, 1, 1, kernel="attn_fwd", shape=shape),
            Op("attn_grad", OpKind.FLASH_BWD, 1, 1, kernel="attn_bwd", shape=shape))


def simrun_times(gpu: str, s: int) -> tuple[tuple[float, str], tuple[float, str]]:
    """simrun's forward and backward time (ms) of the published shape at ``s`` on catalogue
    GPU ``gpu`` and how the table answered (``"interpolated"``: the tile model; ``"measured
    shape"``: a row), by the path a run on that GPU takes (module docstring)."""
    from sim.models.compute_setup import resolve_compute, timer_for

    spec = gpu_spec(gpu)
    timer = timer_for(spec, resolve_compute(spec), "fused")
    fwd, bwd = (timer.op_ns(op, "bf16") for op in attention_ops(s))
    return (float(fwd[0]) / 1e6, fwd[1]), (float(bwd[0]) / 1e6, bwd[1])


@dataclass(frozen=True)
class CheckRow:
    """One published shape against simrun: ``pub`` (:class:`Published`), simrun's forward and
    backward ms and how H100's table answered each."""

    pub: Published
    simrun: tuple[float, float]
    how: tuple[str, str]

    @property
    def errors(self) -> tuple[float, float]:
        """simrun / published − 1, forward and backward."""
        return (self.simrun[0] / self.pub.forward_ms - 1, self.simrun[1] / self.pub.backward_ms - 1)

    @property
    def compared(self) -> bool:
        """Whether the shape is in the comparison (s ≥ :data:`COMPARED_FROM`)."""
        return self.pub.s >= COMPARED_FROM


def check(rows: list[Published] | None = None) -> list[CheckRow]:
    """Every published row (default :func:`published`) with simrun's times, in
    :data:`SOURCES` order, then by length."""
    rows = published() if rows is None else rows
    out = []
    for p in sorted(rows, key=lambda p: (SOURCES.index(p.source), p.s)):
        (tf, hf), (tb, hb) = simrun_times(p.gpu, p.s)
        out.append(CheckRow(p, (tf, tb), (hf, hb)))
    return out


#: the Llama 3 8B validation cases (FP8-CS, TP1 PP1 DP8, s 8192, 32 query heads) whose layer the
#: attention share is read from: (file, case name)
LLAMA3_8B_CASES = (
    ("workloads/validation/megatron-bridge-25.11-b200-fp8.yaml", "B200 LLAMA3-8B 8 GPU"),
    ("workloads/validation/megatron-bridge-25.11-gb200-fp8.yaml", "GB200 LLAMA3-8B 8 GPU"),
    ("workloads/validation/megatron-bridge-25.11-gb300-fp8.yaml", "GB300 LLAMA3-8B 8 GPU"),
)


def layer_attention_share(path: str, name: str,
                          layer: int = 1) -> tuple[float, float, tuple, str]:
    """``(attention ns, layer compute ns, attention shape, attention backend)`` of transformer
    layer ``layer`` (one microbatch, forward + input gradient + weight gradient) of validation
    case ``name`` of file ``path`` (repository-relative), its operators timed as the case's run
    times them (the timer its program's generator builds: attention backend, GEMM kinds, sustained
    factor); attention: the fused kernels (``FLASH_FWD`` / ``FLASH_BWD``)."""
    from sim.models.assumptions import gpu_family
    from sim.models.compute_setup import timer_for
    from sim.models.optimizer import grad_bytes
    from sim.models.plan import build_model_plan
    from sim.models.vocab.ops import OpKind
    from sim.models.vocab.spec import load_model
    from sim.parallel.config import attention_kernel
    from sim.scenario.model_run import fit_model, model_run_of
    from sim.topology import load_topology
    from sim.validation.cases import load_cases

    root = Path(__file__).resolve().parents[2]
    case = next(c for c in load_cases(root / path)[1] if c.name == name)
    topo = load_topology(case.topology_path)
    run = model_run_of(fit_model(load_model(case.model_path), case.par, topo), topo,
                       ignore_memory=True)
    par, gpu = run.par, run.gpu
    timer = timer_for(gpu, run.compute, attention_kernel(par.training, gpu_family(gpu)),
                      par.fp8_recipe)
    timer.main_grad_fp32 = not par.zero and grad_bytes(par.dtype, par.grad_reduce_in_bf16) == 4
    timer.sustained = run.compute.sustained(par.dtype)[0]
    ops = [op for r in build_model_plan(run.model, par).stages[0].chunks[0]
           if r.name.startswith(f"layer{layer}_") for ph in ("fwd", "ig", "wg")
           for op in getattr(r, ph)]
    times = [(op, timer.op_ns(op, par.dtype)[0]) for op in ops]
    attn = [(op, t) for op, t in times if op.kind in (OpKind.FLASH_FWD, OpKind.FLASH_BWD)]
    return (float(sum(t for _, t in attn)), float(sum(t for _, t in times)),
            attn[0][0].shape if attn else (), timer.backend)

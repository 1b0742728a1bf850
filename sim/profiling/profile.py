"""``simrun profile``: measure on the local GPU the kernels a model and layout need (or a
standard sweep) and write a kernel table (docs/kernel-tables.md).

:func:`kernels_for` enumerates, from the model generator's own operators (one transformer
layer, the output layer and the Adam step of the layout), every kernel the table format can
hold, deduplicated: GEMMs ``(m, k, n)`` in the training dtype, the attention kernel of the
backend at ``(b, hq/t, hkv/t, s, d)``, norms / activation / residual kernels at their
``[tokens × width]``, the fused AdamW step. :func:`standard_kernels` is a fixed sweep (the
shapes of the shipped H100 table). :func:`measure` times them with PyTorch (imported only
there): random inputs, ``triton.testing.do_bench`` (warm-up, L2 flushed before every run,
median) when Triton is installed, else CUDA events around each run after writing a 256 MiB
buffer to flush L2 (median of the timed runs). Attention backward and LayerNorm backward are
timed as forward + backward minus forward, as in the shipped table.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.kernels.table import SHAPE_FIELDS, KernelRow, KernelTable
from sim.models.layers import output_rows, transformer_layer_rows
from sim.models.optimizer import adam_ops
from sim.models.vocab.dims import Dims
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig

_TABLE_BACKEND = {"flash": "flash", "fused": "cudnn"}


@dataclass(frozen=True, order=True)
class KernelSpec:
    """A kernel to measure: table ``kind`` and its shape columns (see ``SHAPE_FIELDS``)."""

    kind: str
    shape: tuple[tuple[str, int], ...]


def _spec(kind: str, values: tuple[int, ...]) -> KernelSpec:
    return KernelSpec(kind, tuple(zip(SHAPE_FIELDS[kind], values, strict=True)))


def kernels_for(model: ModelSpec, par: ParallelConfig) -> list[KernelSpec]:
    """The distinct kernels of one layer, the output layer and the Adam step (sorted)."""
    dm = Dims.of(model, par)
    rows = transformer_layer_rows(model, par, dm, 0) + output_rows(model, dm, True)
    ops = [op for r in rows for op in (*r.fwd, *r.ig, *r.wg)]
    ops += list(adam_ops(1_000_000, 1, False))
    out: set[KernelSpec] = set()
    gemm_kind = "gemm_fp8" if par.dtype == "fp8" else "gemm_bf16"
    for op in ops:
        if op.kernel == "gemm":  # op.dtype: the bf16 output layer of an fp8 run
            out.add(_spec(f"gemm_{op.dtype}" if op.dtype else gemm_kind, op.shape))
        elif op.kernel in ("attn_fwd", "attn_bwd"):
            tb = _TABLE_BACKEND.get(par.backend)
            if tb:
                b, hq, hkv, s, d, causal = op.shape
                out.add(_spec(f"attn_{tb}_{op.kernel[5:]}", (b, s, hq, hkv, d, causal)))
        elif op.kernel in SHAPE_FIELDS and op.kernel != "adamw_fused_fp32":
            out.add(_spec(op.kernel, op.shape))
    out.add(_spec("adamw_fused_fp32", (50_000_000,)))
    return sorted(out)


#: the shipped H100 table's grid (sim/data/kernels/h100-sxm.csv): GEMMs ``m × (k, n)`` ...
STD_M = (512, 2048, 8192, 32768)
STD_KN = ((1024, 1024), (1024, 4096), (2048, 6144), (4096, 4096), (4096, 16384), (8192, 8192),
          (12288, 4608), (12288, 6144), (16384, 16384), (1536, 12288))
STD_GEMM_KINDS = ("gemm_bf16", "gemm_bf16_acc32", "gemm_fp8", "gemm_fp8_acc32",
                  "gemm_fp8_fastacc")
#: ... causal attention ``(b, s, hq, hkv, d)`` (the last three: the MHA twins of GQA rows, so
#: that the table shows what the KV-head count does) ...
STD_ATTN = ((8, 1024, 16, 16, 64), (8, 1024, 16, 16, 128), (4, 2048, 12, 12, 128),
            (2, 2048, 16, 16, 128), (1, 4096, 8, 8, 128), (1, 4096, 32, 8, 128),
            (1, 4096, 64, 8, 128), (1, 8192, 8, 8, 128), (1, 8192, 32, 8, 128),
            (1, 16384, 8, 8, 128), (4, 2048, 32, 32, 64),
            (1, 4096, 32, 32, 128), (1, 4096, 64, 64, 128), (1, 8192, 32, 32, 128))
#: ... the same without the causal mask (context parallelism's ring steps are unmasked) ...
STD_ATTN_UNMASKED = ((1, 4096, 8, 8, 128), (1, 4096, 32, 8, 128), (1, 8192, 32, 8, 128),
                     (2, 2048, 16, 16, 128))
#: ... and memory-bound kernels on ``[tokens × h]`` (SwiGLU, compiled per shape, on two)
STD_MEM = ((8192, 1024), (8192, 4096), (4096, 8192), (2048, 12288), (8192, 12288))
STD_MEM_KINDS = ("layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "gelu_fwd",
                 "gelu_bwd", "add", "dropout_add")
STD_GATED = ((8192, 4096), (8192, 14336))


def standard_kernels() -> list[KernelSpec]:
    """A fixed sweep: every GEMM kind of ``STD_GEMM_KINDS`` on ``STD_M × STD_KN``, flash and
    cuDNN attention forward/backward on ``STD_ATTN`` (causal) and ``STD_ATTN_UNMASKED``,
    ``STD_MEM_KINDS`` on ``STD_MEM``, SwiGLU on ``STD_GATED``, AdamW on 50M, 200M and 800M
    parameters."""
    out = [_spec(g, (m, k, n)) for g in STD_GEMM_KINDS for m in STD_M for k, n in STD_KN]
    out += [_spec(f"attn_{be}_{way}", (*a, causal)) for be in ("flash", "cudnn")
            for way in ("fwd", "bwd") for a, causal in [*((a, 1) for a in STD_ATTN),
                                                        *((a, 0) for a in STD_ATTN_UNMASKED)]]
    out += [_spec(k, s) for k in STD_MEM_KINDS for s in STD_MEM]
    out += [_spec(k, s) for k in ("swiglu_fwd", "swiglu_bwd") for s in STD_GATED]
    out += [_spec("adamw_fused_fp32", (p,)) for p in (50_000_000, 200_000_000, 800_000_000)]
    return sorted(out)


def missing_requirement() -> str | None:
    """What stops measuring here (one line), or ``None`` when PyTorch sees a CUDA GPU."""
    try:
        import torch  # optional heavy dependency: only simrun profile needs it
    except ImportError:
        return ("simrun profile needs PyTorch with CUDA: PyTorch is not installed "
                "(pip install 'simrun[profile]')")
    if not torch.cuda.is_available():
        return (f"simrun profile needs a CUDA GPU: PyTorch {torch.__version__} sees none "
                f"(built with CUDA {torch.version.cuda or 'none'})")
    return None


def table_from_times(gpu: str, specs: list[KernelSpec], times_ms: list[float],
                     meta: dict[str, str]) -> KernelTable:
    """A :class:`KernelTable` of measured ``times_ms`` (one per spec, same order)."""
    rows = [KernelRow(s.kind, s.shape, t) for s, t in zip(specs, times_ms, strict=True)]
    return KernelTable(gpu, rows, meta=dict(meta))

"""Timing kernels on the local GPU with PyTorch (``simrun profile``; needs
``pip install 'simrun[profile]'``). Every function imports torch inside: it is an optional heavy
dependency and the rest of simrun never needs it.

Timing: ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")`` when Triton is
installed (it clears L2 before every run); otherwise CUDA events around each run, each preceded
by writing a 256 MiB buffer (larger than any current GPU's L2), median of the runs. Inputs are
random normal (bf16 unless stated). Backward kernels of attention and LayerNorm are timed as
forward + backward minus forward. SwiGLU is compiled into one fused kernel per direction
(``torch.compile``), as Megatron-Core runs it.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Callable

from sim.profiling.profile import KernelSpec, table_from_times


def bench_ms(fn: Callable[[], object], warmup_ms: float = 10.0, rep_ms: float = 40.0) -> float:
    """Median time of ``fn`` in ms (see the module docstring)."""
    import torch  # optional heavy dependency

    try:
        from triton.testing import do_bench  # optional: ships with PyTorch's CUDA wheels
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(max(5, int(rep_ms))):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _gemm(kind: str, m: int, k: int, n: int):
    """``A[m×k] @ B[k×n]`` as the table kind says (docs/kernel-tables.md, "GEMM kinds").

    fp8 (``torch._scaled_mm``, e4m3 operands, B column-major as cuBLASLt's fp8 kernels need,
    unit scales): ``gemm_fp8`` with the split accumulator (``use_fast_accum=False``, TE's
    dgrad/wgrad GEMMs), ``gemm_fp8_fastacc`` with fast accumulation (TE's forward GEMMs),
    both bf16 out; ``gemm_fp8_acc32`` split accumulator, fp32 out (a weight gradient written into
    an fp32 main-grad buffer; ``_scaled_mm`` cannot add into an existing buffer, so the read of
    the old gradient is not in this time). 16-bit: ``A @ B``; ``gemm_bf16_acc32`` is
    ``torch.addmm(C, A, B, out_dtype=float32, out=C)`` with ``C`` fp32: in place, one cuBLAS
    kernel reads the fp32 buffer and writes the sum, as Megatron's ``wgrad_gemm_accum_fp32``
    (``beta = 1``; the out-of-place call would copy C first, a third more traffic)."""
    import torch  # optional heavy dependency

    if kind.startswith("gemm_fp8"):
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        out = torch.float32 if kind == "gemm_fp8_acc32" else torch.bfloat16
        fast = kind == "gemm_fp8_fastacc"
        return lambda: torch._scaled_mm(  # noqa: SLF001 (PyTorch's fp8 GEMM entry point)
            a, b, scale_a=one, scale_b=one, out_dtype=out, use_fast_accum=fast)
    dt = torch.float16 if kind == "gemm_fp16" else torch.bfloat16
    a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)
    if kind == "gemm_bf16_acc32":  # in place: one cuBLAS kernel (beta = 1), no copy of C
        c = torch.randn(m, n, device="cuda", dtype=torch.float32)
        return lambda: torch.addmm(c, a, b, out_dtype=torch.float32, out=c)
    return lambda: a @ b


def _attention(kind: str, b: int, s: int, hq: int, hkv: int, d: int, causal: int):
    import torch  # optional heavy dependency
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[kind.split("_")[1]]
    grad = kind.endswith("_bwd")

    def t(h):
        return torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=grad)

    q, k, v = t(hq), t(hkv), t(hkv)
    dy = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)

    def fwd():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal),
                                                  enable_gqa=hq != hkv)

    if not grad:
        return fwd, None

    def fwd_bwd():
        fwd().backward(dy)

    return fwd_bwd, fwd


def _memory(kind: str, shape: dict):
    import torch  # optional heavy dependency
    import torch.nn.functional as F  # noqa: N812

    if kind == "adamw_fused_fp32":
        p = torch.randn(shape["params"], device="cuda", requires_grad=True)
        p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW([p], fused=True)
        return opt.step, None
    tokens, h = shape["tokens"], shape["h"]
    bwd = kind.endswith("_bwd")
    name = kind.split("_")[0]
    width = 2 * h if name == "swiglu" else h  # SwiGLU reads two halves of width h
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16, requires_grad=bwd)
    y = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(h, device="cuda", dtype=torch.bfloat16, requires_grad=bwd)
    zero = torch.zeros(h, device="cuda", dtype=torch.bfloat16)
    fwd = _fused_swiglu(h, x) if name == "swiglu" else {
        "layernorm": lambda: F.layer_norm(x, (h,), w, zero),
        "rmsnorm": lambda: F.rms_norm(x, (h,), w),
        "gelu": lambda: F.gelu(x, approximate="tanh"),
        "add": lambda: x + y,
        "dropout": lambda: F.dropout(x, 0.1) + y,
    }[name]
    if not bwd:
        return fwd, None
    return (lambda: fwd().backward(y)), fwd


def _fused_swiglu(h: int, x):
    """SwiGLU ``silu(x[:, :h]) * x[:, h:]`` as one fused kernel forward and one backward, as
    Megatron-Core runs it (``bias_swiglu_impl`` under its ``jit_fuser``, i.e. ``torch.compile``);
    eager PyTorch would run it as several kernels with extra passes over memory (measured on an
    H100 for [8192 × 14336] on 2026-11-23: backward 2.73 ms eager, where a fused kernel's 1.17 GB
    take 0.44 ms at 80% of the 3.35 TB/s). Falls back to eager, said in the table's source,
    where compiling fails."""
    import torch  # optional heavy dependency
    import torch.nn.functional as F  # noqa: N812

    def swiglu(t):
        return F.silu(t[:, :h]) * t[:, h:]

    try:
        fused = torch.compile(swiglu, dynamic=False)
        fused(x)
    except Exception:  # noqa: BLE001 (no compiler on this stack: eager, and say so)
        _NOTES.add("SwiGLU timed eagerly (torch.compile failed): several kernels, slower than "
                   "Megatron's fused one")
        return lambda: swiglu(x)
    return lambda: fused(x)


_NOTES: set[str] = set()


def measure(spec: KernelSpec, warmup_ms: float = 10.0, rep_ms: float = 40.0) -> float:
    """Median time in ms of the kernel ``spec`` (backward kinds: fwd+bwd minus fwd)."""
    shape = dict(spec.shape)
    if spec.kind.startswith("gemm_"):
        return bench_ms(_gemm(spec.kind, shape["m"], shape["k"], shape["n"]), warmup_ms, rep_ms)
    if spec.kind.startswith("attn_"):
        fn, fwd = _attention(spec.kind, shape["b"], shape["s"], shape["hq"], shape["hkv"],
                             shape["d"], shape["causal"])
    else:
        fn, fwd = _memory(spec.kind, shape)
    t = bench_ms(fn, warmup_ms, rep_ms)
    if fwd is not None:
        t -= bench_ms(fwd, warmup_ms, rep_ms)
    return t


def device_meta(timer: str) -> tuple[str, dict[str, str]]:
    """The local GPU's name and the table metadata describing this measurement."""
    import torch  # optional heavy dependency

    props = torch.cuda.get_device_properties(0)
    meta = {
        "date": datetime.date.today().isoformat(),
        "source": (f"simrun profile on one {props.name} ({props.multi_processor_count} SMs), "
                   f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}; {timer}; random "
                   "inputs; backward kernels = forward+backward minus forward; SwiGLU fused by "
                   "torch.compile as Megatron-Core fuses it; fp8 GEMMs torch._scaled_mm e4m3 "
                   "with unit scales, gemm_fp8 split accumulator, gemm_fp8_fastacc fast "
                   "accumulation, gemm_fp8_acc32 fp32 out; gemm_bf16_acc32 torch.addmm into an "
                   "fp32 buffer in place"
                   + "".join(f"; {n}" for n in sorted(_NOTES))),
        "sms": str(props.multi_processor_count),
    }
    return props.name, meta


def profile(specs: list[KernelSpec], warmup_ms: float = 10.0, rep_ms: float = 40.0,
            progress: Callable[[str], None] | None = None):
    """Measure ``specs`` on GPU 0; returns ``(KernelTable, skipped)`` where ``skipped`` lists
    ``"kind shape: error"`` for kernels the local stack cannot run (e.g. a backend without a
    kernel for that shape)."""
    try:
        import triton.testing  # noqa: F401  (optional; timing method reported)

        timer = (f"triton.testing.do_bench (warm-up {warmup_ms:g} ms, {rep_ms:g} ms timed, "
                 "L2 cleared before each run, median)")
    except ImportError:
        timer = "CUDA events after a 256 MiB L2-flushing write, median"
    done, times, skipped = [], [], []
    for spec in specs:
        label = f"{spec.kind} {dict(spec.shape)}"
        try:
            t = measure(spec, warmup_ms, rep_ms)
        except (RuntimeError, ValueError, TypeError) as e:  # no kernel or API on this stack
            skipped.append(f"{label}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        if t <= 0:
            skipped.append(f"{label}: backward measured as {t:.6f} ms (fwd+bwd minus fwd ≤ 0)")
            continue
        done.append(spec)
        times.append(round(t, 6))
        if progress:
            progress(f"{label}: {t:.5f} ms")
    name, meta = device_meta(timer)
    return table_from_times(name, done, times, meta), skipped

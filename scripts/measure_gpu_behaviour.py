"""Measure, on the local GPU, behaviours a kernel table alone does not show (docs/kernel-tables.md,
"GEMM kinds", "Sustained load", "The shipped H100 table"; the 2026-11-28 outputs are
docs/measured/h100-2026-11-28/behaviour-*.json).

Run on the GPU machine (needs PyTorch with CUDA; ``nvidia-ml-py`` for clocks and power):
``python scripts/measure_gpu_behaviour.py --out DIR [--parts a,b] [--seconds S]`` writes
``DIR/behaviour.json`` and prints it. Each part is independent; a part that fails is recorded
with its error. Kernel times are ``triton.testing.do_bench`` medians (L2 flushed, 10 ms
warm-up, 40 ms timed), as the kernel tables'.

* ``sustained``: one 8192³ GEMM (fp8 ``torch._scaled_mm`` e4m3, split accumulator, bf16 out;
  then bf16 ``A @ B``) back to back for ``--seconds`` s; per ~0.25 s window the achieved
  TFLOP/s (CUDA events), SM clock, board power and temperature (NVML); the do_bench time before
  and after.
* ``accumulate``: at weight-gradient shapes (``k`` the token count) bf16 ``A @ B``,
  ``torch.mm(out_dtype=float32)``, the out-of-place ``torch.addmm(C, A, B, out_dtype=float32)``
  (a copy of C, then the GEMM adding into it), and fp8 ``_scaled_mm`` with split / fast
  accumulation, bf16 / fp32 out.
* ``accumulate_in_place``: on the shipped table's 40 GEMM shapes, bf16 ``A @ B``,
  ``mm(out_dtype=float32)`` and ``addmm(C, A, B, out_dtype=float32, out=C)`` (in place: one
  cuBLAS kernel with ``beta = 1``, its profiler listing recorded) — what Megatron's
  ``wgrad_gemm_accum_fp32`` runs, and what reading the old gradient costs.
* ``host``: the CPU time PyTorch eager takes to issue one tiny kernel (add, LayerNorm,
  ``F.linear``, ``_scaled_mm``, flash SDPA), ``N`` launches on the host clock, with the GPU
  time of the same kernels; the CPU model is recorded.
* ``layer_sustained``, ``fp8_layer_sustained`` (scripts/gpu_sustained.py): a transformer
  layer's forward + backward (bf16, and the kernels of TE's FP8 recipe emulated) back to back,
  the first 10 iterations against the last quarter's.
* ``fp8_casts``: FP8 cast, cast + transpose, amax and transpose compiled by ``torch.compile``
  beside ``x + y``, achieved bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
import traceback

from gpu_sustained import fp8_layer_sustained, layer_sustained, nvml, reading

SHAPES_WGRAD = ((4096, 8192, 14336), (14336, 8192, 4096), (4096, 8192, 6144),
                (8192, 4096, 8192), (12288, 2048, 6144), (4096, 4096, 4096),
                (1536, 2048, 12288), (2048, 8192, 1536), (8192, 8192, 28672 // 8))


def _bench(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=40, return_mode="median"))


def _gemm(kind: str, m: int, k: int, n: int):
    import torch

    if kind.startswith("fp8"):
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        out = torch.float32 if kind.endswith("fp32") else torch.bfloat16
        fast = "fast" in kind
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,  # noqa: SLF001
                                        out_dtype=out, use_fast_accum=fast)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    if kind == "bf16_out32":
        return lambda: torch.mm(a, b, out_dtype=torch.float32)
    if kind == "bf16_acc32":
        c = torch.randn(m, n, device="cuda", dtype=torch.float32)
        return lambda: torch.addmm(c, a, b, out_dtype=torch.float32)
    return lambda: a @ b


def sustained(seconds: float) -> dict:
    import torch

    nv, h = nvml()
    out = {}
    for kind, secs in (("fp8_split_bf16", seconds), ("bf16", seconds / 2)):
        fn = _gemm(kind, 8192, 8192, 8192)
        flops = 2 * 8192 ** 3
        before = _bench(fn)
        windows = []
        t_end = time.perf_counter() + secs
        per = max(1, int(250.0 / before))  # GEMMs in ~0.25 s (before: ms per GEMM)
        while time.perf_counter() < t_end:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(per):
                fn()
            e.record()
            time.sleep(0.1)  # read NVML while the window's GEMMs run
            r = reading(nv, h)
            e.synchronize()
            ms = s.elapsed_time(e)
            windows.append({"t_s": round(secs - (t_end - time.perf_counter()), 3),
                            "tflops": round(per * flops / (ms * 1e-3) / 1e12, 1), **r})
        after = _bench(fn)
        out[kind] = {"bench_before_ms": before, "bench_after_ms": after,
                     "bench_before_tflops": flops / (before * 1e-3) / 1e12,
                     "bench_after_tflops": flops / (after * 1e-3) / 1e12,
                     "gemms_per_window": per, "windows": windows}
        torch.cuda.synchronize()
        time.sleep(2.0)  # cool down a little before the next kind
    return out


def accumulate() -> list[dict]:
    import torch

    kinds = ("bf16", "bf16_out32", "bf16_acc32", "fp8_split_bf16", "fp8_fast_bf16",
             "fp8_split_fp32")
    rows = []
    for m, k, n in SHAPES_WGRAD:
        row = {"m": m, "k": k, "n": n}
        for kind in kinds:
            try:
                row[kind + "_ms"] = round(_bench(_gemm(kind, m, k, n)), 6)
            except Exception as exc:  # noqa: BLE001 (an API this PyTorch lacks: recorded)
                row[kind + "_ms"] = None
                row[kind + "_error"] = str(exc).splitlines()[0][:200]
            torch.cuda.empty_cache()
        rows.append(row)
    return rows


def host(n: int = 20000) -> dict:
    import torch
    import torch.nn.functional as F  # noqa: N812

    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    a8 = torch.randn(64, 64, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(64, 64, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device="cuda")
    q = torch.randn(1, 4, 128, 64, device="cuda", dtype=torch.bfloat16)
    ln_w = torch.ones(64, device="cuda", dtype=torch.bfloat16)
    cases = {
        "add": lambda: torch.add(x, x, out=y),
        "layer_norm": lambda: F.layer_norm(x, (64,), ln_w),
        "linear_cublas": lambda: F.linear(x, w),
        "scaled_mm_cublaslt": lambda: torch._scaled_mm(a8, b8, scale_a=one,  # noqa: SLF001
                                                       scale_b=one, out_dtype=torch.bfloat16),
        "sdpa_flash_fwd": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
    }
    out = {}
    for name, fn in cases.items():
        try:
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            s.record()
            for _ in range(n):
                fn()
            e.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            out[name] = {"launches": n, "host_us_per_launch": (t1 - t0) / n * 1e6,
                         "wall_us_per_launch": (t2 - t0) / n * 1e6,
                         "gpu_us_per_kernel": s.elapsed_time(e) * 1e3 / n}
        except Exception as exc:  # noqa: BLE001
            out[name] = {"error": str(exc).splitlines()[0][:200]}
    return out


def accumulate_in_place() -> list[dict]:
    """bf16 weight-gradient GEMMs on the shipped table's grid (``STD_M × STD_KN`` of
    sim/profiling/profile.py): ``torch.mm(A, B, out_dtype=float32)`` (fp32 written, nothing read)
    against ``torch.addmm(C, A, B, out_dtype=float32, out=C)`` (in place: PyTorch copies nothing
    when ``out`` is ``C``, cuBLAS reads C and writes the sum, ``beta = 1``); the kernels the
    in-place call launches are listed from ``torch.profiler``."""
    import sys

    import torch

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from sim.profiling.profile import STD_KN, STD_M

    rows = []
    for m in STD_M:
        for k, n in STD_KN:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            c = torch.randn(m, n, device="cuda", dtype=torch.float32)
            row = {"m": m, "k": k, "n": n}
            for name, fn in (("bf16_ms", lambda a=a, b=b: a @ b),
                             ("out32_ms", lambda a=a, b=b: torch.mm(a, b, out_dtype=torch.float32)),
                             ("acc32_inplace_ms", lambda a=a, b=b, c=c: torch.addmm(
                                 c, a, b, out_dtype=torch.float32, out=c))):
                try:
                    row[name] = round(_bench(fn), 6)
                except Exception as exc:  # noqa: BLE001
                    row[name] = None
                    row[name + "_error"] = str(exc).splitlines()[0][:200]
            if not rows:
                try:
                    with torch.profiler.profile(
                            activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                        torch.addmm(c, a, b, out_dtype=torch.float32, out=c)
                        torch.cuda.synchronize()
                    row["inplace_kernels"] = [e.name[:120] for e in prof.events()
                                              if e.device_type.name == "CUDA"]
                except Exception as exc:  # noqa: BLE001
                    row["inplace_kernels"] = str(exc).splitlines()[0][:200]
            rows.append(row)
            a = b = c = None
            torch.cuda.empty_cache()
    return rows


def fp8_casts() -> list[dict]:
    """Fused FP8 cast kernels, as Transformer Engine runs them, emulated with ``torch.compile``
    (one Triton kernel each; compiled once with dynamic shapes): cast (bf16 read, e4m3 written:
    3 B/element), cast + transpose (both layouts written: 4 B), amax (2 B), transpose of an
    FP8 tensor (2 B), beside the element-wise ``x + y`` (6 B) of the same shape; timed as the
    kernel tables are. Achieved bandwidth = bytes / time."""
    import torch

    e4 = torch.float8_e4m3fn

    def cast(x, s):
        return (x.float() * s).to(e4)

    def cast_t(x, s):
        c = (x.float() * s).to(e4)
        return c, c.t().contiguous()

    def amax(x):
        return x.abs().amax()

    def transpose(x8):
        return x8.t().contiguous()

    fns = {name: torch.compile(f, dynamic=True) for name, f in
           (("cast", cast), ("cast_transpose", cast_t), ("amax", amax),
            ("transpose", transpose))}
    return [_cast_row(fns, t, h)
            for t, h in ((8192, 4096), (8192, 14336), (16384, 8192), (4096, 1024))]


def _cast_row(fns: dict, t: int, h: int) -> dict:
    import torch

    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
    x8 = x.to(torch.float8_e4m3fn)
    s = torch.tensor(1.0, device="cuda")
    n = t * h
    row = {"tokens": t, "h": h}
    for name, fn, nbytes in (("add", lambda: x + y, 6 * n),
                             ("cast", lambda: fns["cast"](x, s), 3 * n),
                             ("cast_transpose", lambda: fns["cast_transpose"](x, s), 4 * n),
                             ("amax", lambda: fns["amax"](x), 2 * n),
                             ("transpose", lambda: fns["transpose"](x8), 2 * n)):
        try:
            ms = _bench(fn)
            row[name + "_ms"] = round(ms, 6)
            row[name + "_GBps"] = round(nbytes / (ms * 1e-3) / 1e9, 1)
        except Exception as exc:  # noqa: BLE001
            row[name + "_error"] = str(exc).splitlines()[0][:200]
    return row


def environment() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       "")
    except OSError:
        pass
    smi = ""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,"
                              "clocks.max.sm,clocks.max.mem", "--format=csv"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        pass
    return {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cpu": cpu, "cpus": os.cpu_count(),
            "python": platform.python_version(), "nvidia_smi": smi,
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--parts", default="host,accumulate,sustained")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    result: dict = {"environment": environment()}
    parts = {"host": host, "accumulate": accumulate,
             "sustained": lambda: sustained(args.seconds),
             "layer_sustained": lambda: layer_sustained(args.seconds),
             "accumulate_in_place": accumulate_in_place,
             "fp8_layer_sustained": lambda: fp8_layer_sustained(args.seconds),
             "fp8_casts": fp8_casts}
    for name in args.parts.split(","):
        t0 = time.perf_counter()
        try:
            result[name] = parts[name]()
        except Exception:  # noqa: BLE001 (one part failing keeps the others)
            result[name] = {"error": traceback.format_exc()[-2000:]}
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
        with open(os.path.join(args.out, "behaviour.json"), "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1)[:20000])


if __name__ == "__main__":
    main()

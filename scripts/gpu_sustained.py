"""The sustained-load loops of scripts/measure_gpu_behaviour.py (parts ``layer_sustained`` and
``fp8_layer_sustained``; that script's docstring gives the method): a transformer layer's
kernels run back to back for some seconds, the first iterations (at the boost clock) against
the last quarter's (at the power limit), with NVML's clock and power readings."""

from __future__ import annotations

import os
import time


def reading(nv, h) -> dict:
    if nv is None:
        return {}
    return {"sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)}


def nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # noqa: BLE001 (no NVML: clocks and power not recorded)
        return None, None


def _back_to_back(step, seconds: float, nv, handle) -> dict:
    """``step`` run back to back for ``seconds``, ten per group of CUDA events, NVML read after
    launching each group: the median iteration of the first 10 and of the last quarter."""
    import statistics

    import torch

    times, reads = [], []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(11)]
        evs[0].record()
        for i in range(10):
            step()
            evs[i + 1].record()
        reads.append(reading(nv, handle))
        evs[-1].synchronize()
        times += [evs[i].elapsed_time(evs[i + 1]) for i in range(10)]
    return {"iterations": len(times), "first10_ms": statistics.median(times[:10]),
            "last_quarter_ms": statistics.median(times[3 * len(times) // 4:]),
            "first_reading": reads[0] if reads else {}, "last_reading": reads[-1] if reads else {},
            "median_sm_mhz": statistics.median(r.get("sm_mhz", 0) for r in reads),
            "median_power_w": statistics.median(r.get("power_w", 0) for r in reads)}


def layer_sustained(seconds: float) -> dict:
    """A real transformer layer's forward + backward (scripts/measure_layer.py's ``build_layer``,
    eager PyTorch, cuDNN attention, bf16) run back to back for ``seconds``: per-iteration CUDA
    event times, the median of the first 10 iterations against the median of the last quarter,
    with the SM clock and board power read through NVML in between."""
    import sys

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from measure_layer import CASES, build_layer

    def make_step(name):
        layer, x, dy, params = build_layer(*CASES[name])

        def step():
            x.grad = None
            for q in params:
                q.grad = None
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                layer(x).backward(dy)

        return step

    nv, h = nvml()
    out = {}
    for name in ("llama3-8b-tp1-s8192", "gpt3-175b-tp8-mb4"):
        step = make_step(name)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        out[name] = _back_to_back(step, seconds, nv, h)
        step = None
        torch.cuda.empty_cache()
        time.sleep(2.0)
    return out


def fp8_layer_sustained(seconds: float) -> dict:
    """The kernels of one Llama 3 8B layer (TP 1, 8192 tokens) as Transformer Engine's FP8
    recipe runs them, emulated in PyTorch: per linear a fast-accumulation forward GEMM, a
    split-accumulator dgrad and an fp32-out wgrad (``_scaled_mm`` e4m3, unit scales), an FP8
    cast of each GEMM input (``.to(float8_e4m3fn)``), cuDNN attention forward and backward
    (bf16, 32 query / 8 KV heads, d 128), RMSNorm forward and backward twice, SwiGLU as its
    eager kernels, two residual adds. Run back to back for ``seconds``: the median iteration of
    the first 10 (at the boost clock) against the last quarter's, with NVML readings."""

    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    n, h, qkv, f = 8192, 4096, 6144, 14336
    one = torch.tensor(1.0, device="cuda")
    e4 = torch.float8_e4m3fn

    def mat(r, c, dt=torch.bfloat16):
        return torch.randn(r, c, device="cuda", dtype=dt)

    ops = []
    for k_in, k_out in ((h, qkv), (h, h), (h, 2 * f), (f, h)):
        x, dy = mat(n, k_in), mat(n, k_out)
        w8 = mat(k_out, k_in).to(e4)
        wt8 = w8.t().contiguous()
        x8, dy8 = x.to(e4), dy.to(e4)
        xt8, dyt8 = x.t().contiguous().to(e4), dy.t().contiguous().to(e4)
        ops += [lambda x=x: x.to(e4), lambda dy=dy: dy.to(e4),
                lambda x8=x8, w8=w8: torch._scaled_mm(  # noqa: SLF001
                    x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                    use_fast_accum=True),
                lambda dy8=dy8, wt8=wt8: torch._scaled_mm(  # noqa: SLF001
                    dy8, wt8.t(), scale_a=one, scale_b=one,
                    out_dtype=torch.bfloat16),
                lambda xt8=xt8, dyt8=dyt8: torch._scaled_mm(  # noqa: SLF001
                    dyt8, xt8.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)]
    q = torch.randn(1, 32, n, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    kv = torch.randn(1, 8, n, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    go = torch.randn(1, 32, n, 128, device="cuda", dtype=torch.bfloat16)

    def attention():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True,
                                           enable_gqa=True).backward(go)

    xn = mat(n, h).requires_grad_()
    wn = torch.ones(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    gate = mat(n, 2 * f)
    res_a, res_b = mat(n, h), mat(n, h)
    ops += [attention, lambda: F.rms_norm(xn, (h,), wn).backward(res_a),
            lambda: F.rms_norm(xn, (h,), wn).backward(res_a),
            lambda: F.silu(gate[:, :f]) * gate[:, f:], lambda: res_a + res_b,
            lambda: res_a + res_b]

    def step():
        for op in ops:
            op()

    nv, hdl = nvml()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    time.sleep(3.0)
    return _back_to_back(step, seconds, nv, hdl)

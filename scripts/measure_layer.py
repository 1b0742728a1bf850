"""Time a real transformer layer's forward + backward on the local GPU (bf16, PyTorch).

The reference for the per-layer compute test (tests/test_kernels_layer_measured.py): one
transformer layer as one GPU of a Megatron-LM tensor-parallel group runs it (the TP slice
``heads/tp`` query heads, ``kv_heads/tp`` key/value heads, ``ffn/tp``; norms and residuals over
the full hidden size; no sequence parallelism, no communication), written in plain PyTorch:

* GPT-3-like (``gpt``): LayerNorm → QKV linear (bias) → causal
  ``F.scaled_dot_product_attention`` → projection (bias) → dropout(0.1) + residual → LayerNorm
  → fc1 (bias) → GeLU (tanh) → fc2 (bias) → dropout(0.1) + residual;
* Llama-like (``llama``): RMSNorm → QKV linear (no bias; GQA) → rotary embedding on q and k →
  causal SDPA with ``enable_gqa`` → projection → residual → RMSNorm → fused gate/up linear →
  SwiGLU → down projection → residual.

Attention runs through ``torch.nn.attention.sdpa_kernel`` forced to one backend (``flash``:
PyTorch's FlashAttention-2 kernels; ``cudnn``: cuDNN's fused attention), no attention dropout.
Variants: ``eager_flash``, ``eager_cudnn`` (PyTorch eager: one kernel per operator) and
``compiled_flash``, ``compiled_cudnn`` (``torch.compile`` default mode: Inductor fuses the
element-wise operators — bias + GeLU, dropout + add, rotary, SwiGLU — into Triton kernels, as
Megatron's fused kernels do; the GEMMs stay cuBLAS and attention the SDPA backend's kernel;
compile caches are off, and every variant checks in the profile that its backend's attention
kernels are the ones that ran).

Timing: CUDA events around each iteration on one stream; before every iteration the parameter
and input gradients are set to ``None`` (so the weight-gradient GEMMs write ``.grad`` directly,
no accumulation) and a 256 MiB buffer is written to flush the 50 MB L2; ``WARMUP`` iterations
(compiled: after compilation) then ``ITERS`` timed; median reported (and p10/p90). Forward alone
(autograd recording, as in training) is timed the same way. One further iteration runs under
``torch.profiler`` and the sum of its GPU kernel times is reported (GPU busy time: when it is
close to the event time, the GPU was not waiting for the CPU). Inputs and weights are random
normal (weights scaled 0.02).

Usage (on the GPU machine): ``python scripts/measure_layer.py --out DIR`` writes
``DIR/layers.json`` (every measurement and the environment) and ``DIR/layers.csv`` (the rows
for sim/data/kernels/h100-sxm-layers.csv) and prints a table. ``--cases`` picks cases by name.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

WARMUP, ITERS = 5, 30

# name: (kind, hidden, heads, kv_heads, ffn_hidden, tp, micro_batch, seq_len) — the model files
# of workloads/models/ (gpt3-175b, gpt-22b, llama3-8b, llama3-70b) at these layouts.
CASES = {
    "gpt3-175b-tp8-mb1": ("gpt", 12288, 96, 96, 49152, 8, 1, 2048),
    "gpt3-175b-tp8-mb4": ("gpt", 12288, 96, 96, 49152, 8, 4, 2048),
    "gpt-22b-tp1-mb1": ("gpt", 6144, 64, 64, 24576, 1, 1, 2048),
    "llama3-8b-tp1-s4096": ("llama", 4096, 32, 8, 14336, 1, 1, 4096),
    "llama3-8b-tp1-s8192": ("llama", 4096, 32, 8, 14336, 1, 1, 8192),
    "llama3-70b-tp8-s8192": ("llama", 8192, 64, 8, 28672, 8, 1, 8192),
}
VARIANTS = ("eager_flash", "eager_cudnn", "compiled_flash", "compiled_cudnn")


def build_layer(kind, h, heads, kv_heads, ffn, tp, b, s):
    """``(fn, x, dy, params)``: the layer as a function of its input ``x`` [b, s, h]."""
    import torch  # optional heavy dependency (GPU measurement only)
    import torch.nn.functional as F  # noqa: N812

    dev, dt = "cuda", torch.bfloat16
    d = h // heads
    hq, hkv, f = heads // tp, max(1, kv_heads // tp), ffn // tp
    gated = kind == "llama"

    def w(*shape, scale=0.02):
        return (torch.randn(*shape, device=dev, dtype=dt) * scale).requires_grad_()

    p = {"qkv": w((hq + 2 * hkv) * d, h), "proj": w(h, hq * d),
         "fc1": w((2 if gated else 1) * f, h), "fc2": w(h, f),
         "n1": w(h, scale=1.0), "n2": w(h, scale=1.0)}
    if not gated:
        p.update({"n1b": w(h), "n2b": w(h), "qkvb": w((hq + 2 * hkv) * d), "projb": w(h),
                  "fc1b": w(f), "fc2b": w(h)})
    pos = torch.arange(s, device=dev, dtype=torch.float32)
    inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
    ang = torch.outer(pos, inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(dt)[None, :, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(dt)[None, :, None, :]

    def rope(t):
        t1, t2 = t[..., : d // 2], t[..., d // 2:]
        return t * cos + torch.cat([-t2, t1], -1) * sin

    def attention(y):
        qkv = F.linear(y, p["qkv"], p.get("qkvb"))
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], -1)
        q, k, v = q.view(b, s, hq, d), k.view(b, s, hkv, d), v.view(b, s, hkv, d)
        if gated:
            q, k = rope(q), rope(k)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True,
                                           enable_gqa=hq != hkv)
        return F.linear(o.transpose(1, 2).reshape(b, s, hq * d), p["proj"], p.get("projb"))

    def layer(x):
        if gated:
            x = x + attention(F.rms_norm(x, (h,), p["n1"], 1e-5))
            gu = F.linear(F.rms_norm(x, (h,), p["n2"], 1e-5), p["fc1"])
            g, u = gu.chunk(2, -1)
            return x + F.linear(F.silu(g) * u, p["fc2"])
        x = x + F.dropout(attention(F.layer_norm(x, (h,), p["n1"], p["n1b"])), 0.1)
        u = F.gelu(F.linear(F.layer_norm(x, (h,), p["n2"], p["n2b"]), p["fc1"], p["fc1b"]),
                   approximate="tanh")
        return x + F.dropout(F.linear(u, p["fc2"], p["fc2b"]), 0.1)

    x = torch.randn(b, s, h, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(b, s, h, device=dev, dtype=dt)
    return layer, x, dy, list(p.values())


def time_it(step, clear, warmup=WARMUP, iters=ITERS):
    """Median, p10, p90 (ms) of ``step`` over ``iters`` runs (see the module docstring)."""
    import torch  # optional heavy dependency

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    times = []
    for i in range(warmup + iters):
        clear()
        flush.random_(0, 100)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    times.sort()
    return {"median_ms": statistics.median(times), "p10_ms": times[len(times) // 10],
            "p90_ms": times[(9 * len(times)) // 10], "n": len(times)}


def kernel_breakdown(step, clear):
    """GPU kernel time of one ``step`` under torch.profiler: total ms and the top kernels."""
    import torch  # optional heavy dependency
    from torch.profiler import ProfilerActivity, profile

    clear()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if t > 0:
            rows.append((e.key[:140], e.count, t / 1e3))
    rows.sort(key=lambda r: -r[2])
    return {"kernel_sum_ms": sum(r[2] for r in rows),
            "kernels": [{"name": n, "count": c, "ms": round(t, 5)} for n, c, t in rows[:40]]}


def measure_case(name, variant):
    import torch  # optional heavy dependency
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind, h, heads, kv, ffn, tp, b, s = CASES[name]
    layer, x, dy, params = build_layer(kind, h, heads, kv, ffn, tp, b, s)
    backend = (SDPBackend.CUDNN_ATTENTION if variant.endswith("cudnn")
               else SDPBackend.FLASH_ATTENTION)
    fn = layer
    if variant.startswith("compiled"):
        torch._dynamo.reset()  # noqa: SLF001 (fresh compile per shape)
        fn = torch.compile(layer)

    def clear():
        x.grad = None
        for q in params:
            q.grad = None

    def fwd():
        with sdpa_kernel(backend):
            fn(x)

    def fwd_bwd():
        with sdpa_kernel(backend):
            fn(x).backward(dy)

    t0 = time.time()
    fwd_bwd()  # first call: compilation (compiled variants), autotuning, handles
    fwd()
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    out = {"case": name, "variant": variant, "first_call_s": round(compile_s, 2)}
    out["fwd"] = time_it(fwd, clear)
    out["fwd_bwd"] = time_it(fwd_bwd, clear)
    out["profile"] = kernel_breakdown(fwd_bwd, clear)
    ran = attention_kernels(out["profile"]["kernels"])
    if ran != {variant.split("_")[1]}:
        raise RuntimeError(f"attention ran {sorted(ran)} kernels, not {variant}'s")
    return out


def attention_kernels(kernels) -> set[str]:
    """Which SDPA backend's kernels ran: PyTorch's FlashAttention-2 (``pytorch_flash::``) or
    cuDNN's (``cudnn_generated_..._sdpa_``)."""
    found = set()
    for k in kernels:
        if "pytorch_flash::" in k["name"]:
            found.add("flash")
        elif "sdpa" in k["name"] and "cudnn" in k["name"]:
            found.add("cudnn")
    return found


def environment():
    import torch  # optional heavy dependency

    def smi(q):
        try:
            return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            return f"unavailable ({e})"

    props = torch.cuda.get_device_properties(0)
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "gpu": props.name, "sms": props.multi_processor_count,
        "driver": smi("driver_version"), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": str(torch.backends.cudnn.version()),
        "python": sys.version.split()[0],
        "clocks_power": smi("clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,"
                            "temperature.gpu"),
    }


CSV_HEADER = ("case,kind,hidden,heads,kv_heads,ffn_hidden,tp,micro_batch,seq_len,variant,"
              "fwd_ms,fwd_bwd_ms,fwd_bwd_p10_ms,fwd_bwd_p90_ms,iters,kernel_sum_ms")


def csv_row(r):
    c = CASES[r["case"]]
    return ",".join(map(str, (r["case"], *c, r["variant"], round(r["fwd"]["median_ms"], 4),
                              round(r["fwd_bwd"]["median_ms"], 4),
                              round(r["fwd_bwd"]["p10_ms"], 4), round(r["fwd_bwd"]["p90_ms"], 4),
                              r["fwd_bwd"]["n"], round(r["profile"]["kernel_sum_ms"], 4))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    # Inductor's and AOTAutograd's caches key on the graph, not on the SDPA backend chosen
    # around it: a cached flash graph would be reused for cuDNN (seen on 2026-11-23). Off.
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    import torch  # optional heavy dependency

    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    result = {"environment": environment(), "method": __doc__, "results": [], "errors": []}
    print(json.dumps(result["environment"]), flush=True)
    for variant in args.variants.split(","):
        for name in args.cases.split(","):
            torch.manual_seed(0)
            try:
                r = measure_case(name, variant)
                result["results"].append(r)
                print(f"{name:24s} {variant:15s} fwd {r['fwd']['median_ms']:8.3f} ms  fwd+bwd "
                      f"{r['fwd_bwd']['median_ms']:8.3f} ms (p10 {r['fwd_bwd']['p10_ms']:.3f}, "
                      f"p90 {r['fwd_bwd']['p90_ms']:.3f}; kernels "
                      f"{r['profile']['kernel_sum_ms']:.3f}) first call {r['first_call_s']} s",
                      flush=True)
            except Exception as e:  # noqa: BLE001 (record and go on to the next case)
                result["errors"].append({"case": name, "variant": variant, "error": repr(e),
                                         "trace": traceback.format_exc()[-2000:]})
                print(f"{name} {variant}: ERROR {e!r}"[:300], flush=True)
            torch.cuda.empty_cache()
            result["environment"]["clocks_power_end"] = environment()["clocks_power"]
            with open(os.path.join(args.out, "layers.json"), "w") as fh:
                json.dump(result, fh, indent=1)
    with open(os.path.join(args.out, "layers.csv"), "w") as fh:
        fh.write(CSV_HEADER + "\n")
        for r in result["results"]:
            fh.write(csv_row(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Print every kernel simrun times for one validation case: one transformer layer's operators
(forward, input-gradient, weight-gradient, first-microbatch-only) and the per-iteration extras
(embedding, output layer and loss, FP8 amax reductions, optimizer epilogue), each with its
shape, FLOPs, bytes, predicted time and where the time came from (kernel table or roofline).

Usage (from the repository root)::

    python scripts/layer_kernels.py workloads/validation/nemo-24.07-h100-fp8.yaml \
        "H100 LLAMA2-7B 8 GPU" [--layer 0]

Times are per GPU and per microbatch (the optimizer: per iteration), in microseconds, exactly
as :mod:`sim.models.generator` times them (same rows, same :class:`~sim.models.compute.Timer`).
Used for docs/calibration.md, "Audit: small-model H100 layers".
"""

from __future__ import annotations

import argparse
import sys

from sim.models.compute_setup import resolve_compute, timer_for
from sim.models.generator import gpu_family
from sim.models.optimizer import adam_ops, grad_bytes
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import load_model
from sim.parallel.config import attention_kernel
from sim.topology import load_topology
from sim.validation.cases import load_cases

PHASES = ("fwd", "ig", "wg", "first_fwd")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("case")
    ap.add_argument("--layer", type=int, default=0, help="transformer layer to list (global)")
    a = ap.parse_args(argv)
    _, cases = load_cases(a.file)
    case = next((c for c in cases if c.name == a.case), None)
    if case is None:
        print(f"{a.file}: no case named {a.case!r}", file=sys.stderr)
        return 2
    model, par = load_model(case.model_path), case.par
    gpu = load_topology(case.topology_path).gpu
    setup = resolve_compute(gpu)
    timer = timer_for(gpu, setup, attention_kernel(par.training, gpu_family(gpu)))
    plan = build_model_plan(model, par)
    st = plan.stages[0]
    print(f"# {case.name}: {model.name}, TP{par.tp} PP{par.pp} DP{par.dp} CP{par.cp}, "
          f"micro-batch {par.micro_batch}, {par.microbatches} microbatches, dtype {par.dtype}, "
          f"attention {timer.backend}; per GPU, per microbatch; times in us")
    print("row,phase,op,kernel,shape,flops,bytes,time_us,source")
    totals: dict[str, float] = {}
    for row in st.rows():
        layer = row.tags.get("layer")
        amax = "fp8_amax_reduction" in row.name  # per fp8_autocast region, not per layer
        group = ("extra" if layer is None or amax
                 else "layer" if layer == a.layer else "other_layer")
        if group == "other_layer":
            continue
        for phase in PHASES:
            for op in getattr(row, phase):
                t_ns, how = timer.op_ns(op, par.dtype)
                totals[f"{group}_{phase}"] = totals.get(f"{group}_{phase}", 0.0) + t_ns
                shape = "x".join(str(s) for s in op.shape) if op.shape else ""
                print(f"{row.name},{phase},{op.name},{op.kernel},{shape},{op.flops},"
                      f"{op.bytes},{t_ns / 1e3:.1f},{how}")
    ops = adam_ops(st.params, par.dp_cp, par.shards_optimizer, grad_bytes(par.dtype))
    for op in ops:
        t_ns, how = timer.op_ns(op, par.dtype)
        totals["optimizer"] = totals.get("optimizer", 0.0) + t_ns
        print(f"epilogue,optimizer,{op.name},{op.kernel},{op.shape[0] if op.shape else ''},"
              f"{op.flops},{op.bytes},{t_ns / 1e3:.1f},{how}")
    for k, v in totals.items():
        print(f"# total {k}: {v / 1e3:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The A100 compute model against Korthikanti et al. Table 4: per-layer times of a simulated run,
and the fit of the A100 GEMM efficiency to them.

Source: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
MLSys 2023 (arXiv:2205.05198), Table 4: one layer of the 22B GPT (hidden 6144, 64 heads,
sequence 2048, micro batch 4) at TP 8 on a DGX A100 (Selene), forward and backward time in
ms for five configurations (docs/calibration.md §B). The run is the 2022 Megatron-LM of the
paper's end-to-end cases (``workloads/validation/korthikanti2022-selene.yaml``): bf16, unfused
attention, and the column-parallel linears' backward TP collectives issued asynchronously
(``async_tensor_model_parallel_allreduce``, :mod:`sim.models.features.tp_async`).

One home: each configuration is simulated as ``simrun --model gpt-22b --tp 8 --pp 1 --dp 1
--micro-batch 4 --global-batch 4 --dtype bf16 --attention-backend unfused --topo
dgx-a100-1024 --async-tensor-model-parallel-allreduce`` runs it (the program generator's
operators, the engine with the NCCL per-size network model and the SM-share overlap of the
asynchronous collectives), and the layer's time is read off the engine's timeline of the
middle layer: forward, from the first span of layer ``L`` to the first of layer ``L + 1``;
backward, from the first backward span of layer ``L`` to the first of layer ``L − 1`` (every
exposed TP collective and every slowed GEMM between them included).

The fit (:func:`fit_gemm_efficiency`) varies only the A100 family's large-GEMM efficiency
``η_gemm`` (:data:`sim.models.compute.A100`) and minimises the sum of squared relative errors
over the ten numbers, by golden-section search (deterministic). Times are in ms.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sim.models import compute

if TYPE_CHECKING:
    from sim.models.compute_setup import ComputeSetup

#: Korthikanti et al. Table 4: (configuration, sequence parallel, recompute, fwd ms, bwd ms)
TABLE_4 = (
    ("baseline", False, "none", 7.7, 11.9),
    ("sequence parallel", True, "none", 7.2, 11.8),
    ("full recompute", False, "full", 7.7, 19.5),
    ("selective recompute", False, "selective", 7.7, 13.2),
    ("selective + sequence parallel", True, "selective", 7.2, 13.1),
)
MODEL, TOPOLOGY, TP, MICRO_BATCH = "gpt-22b", "dgx-a100-1024", 8, 4
LAYER = 24  # the middle layer of 48: layers before and after it on both sides
#: the search interval of the fit: 0.5 (far below any published large-GEMM efficiency) to
#: 0.869, the best published A100 bf16 matmul (271.2 of 312 TFLOP/s, stas00/ml-engineering
#: compute/accelerator/README.md at commit 744d01e1, "Maximum Achievable Matmul FLOPS
#: comparison table")
SEARCH = (0.5, 0.869)
TOLERANCE = 1e-4  # the golden-section search's bracket width at the end


@contextmanager
def a100_gemm_efficiency(eta: float | None) -> Iterator[None]:
    """Within the block, the A100 family's compute model with ``η_gemm = eta`` (``None``: the
    shipped model unchanged); restored after it."""
    fams = compute._FAMILIES  # noqa: SLF001 (the one table family_model reads)
    shipped = fams["A100"]
    if eta is not None:
        fams["A100"] = dataclasses.replace(shipped, gemm_efficiency=eta)
    try:
        yield
    finally:
        fams["A100"] = shipped


def prepare_row(sp: bool, recompute: str, setup: ComputeSetup | None = None):
    """One Table 4 configuration ready to simulate (spans recorded), as ``simrun --model``
    prepares it (module docstring). ``setup``: what times its operators (``None``: the
    topology GPU's shipped model, through :func:`sim.api.prepare_model`; a setup: the same
    calls that function makes, with the operators timed by it — the transfer-rule check,
    :mod:`sim.validation.transfer_a100`)."""
    from sim import api
    from sim.parallel.config import Training
    from sim.scenario import steps
    from sim.scenario.model_run import model_run
    from sim.topology import load_topology

    training = Training(global_batch=MICRO_BATCH, micro_batch=MICRO_BATCH, recompute=recompute,
                        sequence_parallel=sp, dtype="bf16", attention_backend="unfused",
                        async_tensor_model_parallel_allreduce=True)
    layout = api.LayoutRequest(tp=TP, pp=1, dp=1)
    # the paper timed one layer; 48 layers without recomputation do not fit in 80 GB, and
    # memory does not change a layer's time in simrun
    if setup is None:
        prepared = api.prepare_model(MODEL, TOPOLOGY, layout, training, ignore_memory=True)
    else:
        topo = load_topology(TOPOLOGY)
        run_ = model_run(MODEL, layout, training, topo, ignore_memory=True, compute=setup)
        prepared = steps.prepare(run_.program, topo, model_run=run_, workload=MODEL,
                                 topology_path=TOPOLOGY)
    return dataclasses.replace(prepared, record_spans=True)


def simulate_row(sp: bool, recompute: str, setup: ComputeSetup | None = None):
    """The engine's result (spans recorded) of one Table 4 configuration
    (:func:`prepare_row`)."""
    from sim.scenario import steps

    return steps.simulate(prepare_row(sp, recompute, setup))


def layer_times_ns(spans, layer: int = LAYER) -> tuple[int, int]:
    """(forward, backward) ns of transformer layer ``layer`` on the timeline ``spans`` of one
    rank running one microbatch (module docstring). Backward spans are those from the first
    input-gradient span on."""
    split = min(s.start_ns for s in spans if s.kind == "input_grad")

    def first(i: int, backward: bool) -> int:
        prefix = f"layer{i}_"
        return min(s.start_ns for s in spans if s.label.startswith(prefix)
                   and (s.start_ns >= split) == backward)

    fwd = first(layer + 1, False) - first(layer, False)
    bwd = first(layer - 1, True) - first(layer, True)
    return fwd, bwd


def table(eta: float | None = None, setup: ComputeSetup | None = None,
          ) -> list[tuple[str, float, float, float, float]]:
    """Rows (configuration, measured fwd, measured bwd, model fwd, model bwd), ms, with the A100
    ``η_gemm = eta`` (``None``: the shipped value), operators timed by ``setup``
    (:func:`prepare_row`)."""
    rows = []
    with a100_gemm_efficiency(eta):
        for label, sp, recompute, fwd_ms, bwd_ms in TABLE_4:
            res = simulate_row(sp, recompute, setup)
            if len(res.ranks) != 1:
                raise RuntimeError(f"{label}: expected one simulated rank, got {len(res.ranks)}")
            f, b = layer_times_ns(res.spans)
            rows.append((label, fwd_ms, bwd_ms, f / 1e6, b / 1e6))
    return rows


def objective(rows) -> float:
    """Sum of squared relative errors of the ten times of ``rows`` (:func:`table`)."""
    return math.fsum(((m - r) / r) ** 2 for _, rf, rb, mf, mb in rows
                     for r, m in ((rf, mf), (rb, mb)))


def fit_gemm_efficiency(lo: float = SEARCH[0], hi: float = SEARCH[1],
                        tol: float = TOLERANCE) -> float:
    """The A100 ``η_gemm`` minimising :func:`objective` in ``[lo, hi]`` (golden-section search
    to a bracket of ``tol``; the objective is unimodal there: every time falls as ``η_gemm``
    rises)."""
    inv = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - inv * (b - a), a + inv * (b - a)
    fc, fd = objective(table(c)), objective(table(d))
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - inv * (b - a)
            fc = objective(table(c))
        else:
            a, c, fc = c, d, fd
            d = a + inv * (b - a)
            fd = objective(table(d))
    return (a + b) / 2

"""--async-tensor-model-parallel-allreduce (Megatron-LM's asynchronous backward TP collectives of
the column-parallel linears): the ``nccl`` overlap on a hand-derived timeline with the NCCL
kernel's SMs, the generated layers' pairing with and without sequence parallelism, the
refusals, and that turning it on never makes an iteration slower."""

import json

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.engine.interference import Interference
from sim.engine.overlap import overlapped_ns
from sim.errors import UsageError
from sim.models import build_model_plan, load_model
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import GemmOverlap, Layer, Phase

TOPO = str(ROOT / "topologies" / "dgx-a100-1024.yaml")
GPT22 = str(ROOT / "workloads" / "models" / "gpt-22b.yaml")


def test_nccl_overlap_is_bulk_with_the_kernels_sms():
    # GEMM at 3/4 speed for the collective's 20 ns, then the rest alone: 20 + 40 − 15
    assert overlapped_ns("nccl", 40, 20, 1, 4, 1) == overlapped_ns("bulk", 40, 20, 1, 4, 1) == 45
    assert overlapped_ns("nccl", 40, 20, 1, 4, 0) == 40  # no SM taken: hidden entirely
    assert overlapped_ns("nccl", 40, 80, 1, 4, 3) == 80 + 40 - 20  # 1/4 speed for 80 ns


def program() -> PipelineProgram:
    """One stage, TP 2 (at 1 GB/s a TP collective of S bytes takes S/2 ns), one microbatch,
    forward only: 10 ns of compute + a 40 ns GEMM beside an all-gather of 40 bytes (20 ns)."""
    ag = Comm(CollKind.ALLGATHER, GroupKind.TP, 40)
    layers = (Layer("L", Phase(50, overlaps=(GemmOverlap(ag, 40, "nccl", 1, 0, 4),))),)
    return PipelineProgram(tp=2, pp=1, dp=1, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [layers])], schedule="1f1b")


@pytest.mark.parametrize("fuse", [True, False])
def test_hand_derived_timeline_with_and_without_interference(fuse):
    """Interference off: the 20 ns all-gather hides under the 40 ns GEMM (10 + 40 = 50).
    A kernel of 1 CTA of 4 SMs (a 40-byte collective runs on one NCCL channel): the GEMM runs
    at 3/4 speed for 20 ns, 10 + 45 = 55, 5 ns of it exposed TP communication."""
    net = AlphaBetaNetwork(0, {GroupKind.TP: 1.0})
    free = simulate(program(), net, fuse=fuse)
    assert free.iteration_ns == 50 and free.ranks[0].exposed_comm_ns[GroupKind.TP] == 0
    res = simulate(program(), net, fuse=fuse, interference=Interference(sms=4, comm_sms=3))
    assert res.iteration_ns == 55
    assert res.ranks[0].compute_ns == 50 and res.ranks[0].exposed_comm_ns[GroupKind.TP] == 5
    assert res.nccl_ctas == {GroupKind.TP: (1,)}


def _pairs(sp: bool, **kw) -> dict:
    model = load_model(ROOT / "workloads/models/gpt-22b.yaml")
    par = make_par(tp=8, global_batch=1, sequence_parallel=sp, **kw)
    rows = {r.name: r for r in build_model_plan(model, par).stages[0].chunks[0]
            if r.name.startswith("layer0_")}
    return {(name[7:], ph): [(c.kind.value, op, how) for c, op, how in getattr(r, ph + "_ovl")]
            for name, r in rows.items() for ph in ("fwd", "ig", "wg") if getattr(r, ph + "_ovl")}


def test_generated_layer_pairs_the_column_parallel_backward_collectives():
    on = {"async_tensor_model_parallel_allreduce": True}
    assert _pairs(True, **on) == {
        ("attn_qkv", "ig"): [("ALLGATHER", "qkv_dgrad", "nccl")],
        ("attn_qkv", "wg"): [("REDUCESCATTER", "qkv_wgrad", "nccl")],
        ("mlp_fc1", "ig"): [("ALLGATHER", "fc1_dgrad", "nccl")],
        ("mlp_fc1", "wg"): [("REDUCESCATTER", "fc1_wgrad", "nccl")],
    }
    assert _pairs(False, **on) == {
        ("attn_qkv", "wg"): [("ALLREDUCE", "qkv_wgrad", "nccl")],
        ("mlp_fc1", "wg"): [("ALLREDUCE", "fc1_wgrad", "nccl")],
    }
    assert _pairs(True) == {} and _pairs(False) == {}  # off by default


@pytest.mark.parametrize("kw, msg", [
    ({"tp": 1}, "TP 1 has no TP communication"),
    ({"tp": 8, "sequence_parallel": True, "tp_comm_overlap": True}, "userbuffers"),
])
def test_refused_where_it_changes_nothing(kw, msg):
    model = load_model(ROOT / "workloads/models/gpt-22b.yaml")
    with pytest.raises(UsageError, match=msg):
        build_model_plan(model, make_par(global_batch=1,
                                               async_tensor_model_parallel_allreduce=True, **kw))


def test_refused_for_workload_files(capsys):
    rc = main(["--workload", str(ROOT / "workloads/aicb-gpt13b-tp8-pp8-512gpu.txt"), "--topo",
               TOPO, "--async-tensor-model-parallel-allreduce"])
    assert rc == 2 and "--async-tensor-model-parallel-allreduce: applies to --model runs" in \
        capsys.readouterr().err


LAYOUTS = [
    ["--tp", 8, "--global-batch", 4, "--micro-batch", 2, "--nodes", 1],
    ["--tp", 8, "--global-batch", 4, "--micro-batch", 4, "--nodes", 1, "--sequence-parallel"],
    ["--tp", 4, "--pp", 2, "--global-batch", 8, "--nodes", 2, "--recompute", "full"],
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=range(len(LAYOUTS)))
def test_turning_it_on_never_makes_an_iteration_slower(tmp_path, layout):
    times, tp = [], []
    for extra in ([], ["--async-tensor-model-parallel-allreduce"]):
        out = tmp_path / f"r{len(times)}.json"
        assert main(["--model", GPT22, "--topo", TOPO, "--quiet", "--json", str(out),
                     *map(str, layout), *extra]) == 0
        rep = json.loads(out.read_text())
        times.append(rep["iteration_time_s"])
        tp.append(sum(s["exposed_comm_s"]["TP"] for s in rep["stages"]))
        if extra:
            assert any(a.startswith("TP backward (Megatron-LM async_tensor_model_parallel")
                       for a in rep["assumptions"])
    assert times[1] < times[0] and tp[1] < tp[0]

"""Expert tensor parallelism (--expert-tensor-parallel-size): Megatron-Core's ETP x EP x EDP
expert groups, the sizes of the expert collectives and gradient reductions, memory, and a
small run with ETP 1 against ETP = TP (hand-derived differences)."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from par_support import make_par

from sim.comm import CollKind, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.models.generator import generate
from sim.models.memory import check_memory
from sim.models.parallel_checks import validate
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import load_model, model_from_dict
from sim.network.simple import AlphaBetaNetwork
from sim.network.symmetry import copies
from sim.parallel.placement import Placement
from sim.topology.gpu import GpuSpec

MOE_SMALL = load_model(ROOT / "workloads/models/moe-gpt-small.yaml")  # h 768, 8 experts, top-2
H, F, K, SEQ = 768, 3072, 2, 1024
GPU = GpuSpec("H100-SXM5-80GB", {"bf16": 989.0}, 80, 3350)


def _stage_groups(pl, kind, stage=0):
    return [g for g in pl.groups(kind) if pl.coord(g[0]).pp == stage]


# ---- groups ---------------------------------------------------------------------------------

def test_groups_16_gpus_tp2_ep4_etp1():
    # Megatron-Core: expert RankGenerator(tp=ETP 1, ep=4, dp=EDP, pp=1), order tp-ep-dp-pp;
    # EDP = world / (ETP·EP·PP) = 16 / 4 = 4. Rank = etp + 1·ep + 4·edp:
    pl = Placement(tp=2, dp=8, pp=1, ep=4, etp=1)
    assert pl.edp == 4
    assert pl.groups(GroupKind.EP) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11),
                                       (12, 13, 14, 15)]
    assert pl.groups(GroupKind.DP_EP) == [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14),
                                          (3, 7, 11, 15)]
    assert pl.groups(GroupKind.ETP) == [(r,) for r in range(16)]
    # the dense groups are untouched: TP pairs, DP of stride 2
    assert pl.group(GroupKind.TP, 5) == (4, 5)
    assert pl.group(GroupKind.DP, 5) == (1, 3, 5, 7, 9, 11, 13, 15)
    # with ETP = TP (Megatron's default) the EP group keeps to one TP rank: stride 2
    default = Placement(tp=2, dp=8, pp=1, ep=4)
    assert default.groups(GroupKind.EP)[:2] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert default.groups(GroupKind.DP_EP)[:2] == [(0, 8), (1, 9)]
    assert default.group(GroupKind.ETP, 3) == default.group(GroupKind.TP, 3) == (2, 3)
    assert Placement(tp=2, dp=8, pp=1, ep=4, etp=2).groups(GroupKind.EP) == \
        default.groups(GroupKind.EP)


def test_groups_tp4_etp2_ep2_two_stages():
    # per stage 8 ranks (TP 4 x DP 2), i = etp + 2·(ep + 2·edp), EDP = 8 / 4 = 2; stage 1 = +8
    pl = Placement(tp=4, dp=2, pp=2, ep=2, etp=2)
    assert _stage_groups(pl, GroupKind.ETP, 1) == [(8, 9), (10, 11), (12, 13), (14, 15)]
    assert _stage_groups(pl, GroupKind.EP, 0) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert _stage_groups(pl, GroupKind.DP_EP, 0) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert pl.expert_coord(13) == (1, 0, 1)  # 13 = 8 + 1 + 2·(0 + 2·1)


@pytest.mark.parametrize("kind", [GroupKind.EP, GroupKind.DP_EP, GroupKind.ETP])
@pytest.mark.parametrize("order", ["tp-dp-pp", "dp-tp-pp"])
def test_symmetric_copies_are_the_stage_groups(kind, order):
    pl = Placement(tp=4, dp=4, pp=2, ep=2, etp=2, order=order)
    for stage in (0, 1):
        groups = _stage_groups(pl, kind, stage)
        got = copies(pl, CollKind.ALLTOALL, kind, groups[1])
        assert got[0] == groups[1]
        assert sorted(got) == sorted(groups)


def test_megatron_refusals():
    with pytest.raises(UsageError, match="must divide the 8 ranks"):
        Placement(tp=2, dp=4, pp=1, ep=3, etp=1)
    # pipeline not slowest: Megatron-Core asserts EDP = DP, i.e. ETP·EP = TP·CP
    with pytest.raises(UsageError, match="ETP·EP = TP·CP"):
        Placement(tp=2, dp=4, pp=2, ep=4, etp=1, order="tp-pp-dp")
    Placement(tp=4, dp=4, pp=2, ep=2, etp=2, order="tp-pp-dp")  # 2·2 = 4·1: allowed
    dense = load_model(ROOT / "workloads/models/gpt2-medium.yaml")
    cases = [
        (dense, dict(tp=2, dp=4, etp=1), "mixture-of-experts"),
        (MOE_SMALL, dict(tp=1, dp=8, ep=4, etp=5), "expert FFN 3072"),
        (MOE_SMALL, dict(tp=2, dp=2, ep=4, etp=4), "ETP·EP = 4·4"),
        (MOE_SMALL, dict(tp=2, dp=8, ep=4, etp=1, zero=1), "ZeRO"),
    ]
    for model, kw, text in cases:
        par = make_par(global_batch=64, sequence_parallel=True, **kw)
        with pytest.raises(UsageError, match=text) as e:
            validate(model, par)
        assert e.value.field == "expert_tensor_parallel_size"


# ---- sizes ----------------------------------------------------------------------------------

def _moe_comms(par):
    rows = build_model_plan(MOE_SMALL, par).stages[0].chunks[0]
    out = []
    for r in rows:
        if r.name.startswith("layer0_moe") or r.name.startswith("layer0_mlp_out"):
            for phase, c in (("fwd", r.fwd_comm), ("ig", r.ig_comm)):
                if c is not None:
                    out.append((r.name, phase, c.kind, c.group, c.size_bytes))
    return rows, out


def test_dispatch_gather_and_gemm_shapes():
    # TP 2 with SP: nt = 1024/2 = 512 tokens per GPU; all-to-all nt·top_k·h·2 bytes in EP
    a2a = 512 * K * H * 2
    # ETP = TP = 2: the TP group gathers n·top_k = 2048 token copies (h·2 bytes each)
    base = make_par(tp=2, dp=8, ep=4, global_batch=8, sequence_parallel=True)
    rows, comms = _moe_comms(base)
    gathers = [c for c in comms if c[3] is GroupKind.TP]
    assert {c[4] for c in gathers} == {2048 * H * 2} and len(gathers) == 4
    assert [c[4] for c in comms if c[3] is GroupKind.EP] == [a2a] * 4  # dispatch/combine, fwd/bwd
    fc1 = next(r for r in rows if r.name == "layer0_moe_fc1")
    # 2 local experts; fc1 over 2048 copies with weights h × F/2
    assert fc1.fwd[0].flops == 2 * 2048 * H * (F // 2)
    assert fc1.expert_params == 2 * (H * F // 2 + F // 2)  # weight + column-parallel bias
    # ETP 1: no gather; the GPU's own 512·2 copies through whole experts (same FLOPs)
    etp1 = make_par(tp=2, dp=8, ep=4, etp=1, global_batch=8, sequence_parallel=True)
    rows1, comms1 = _moe_comms(etp1)
    assert [c for c in comms1 if c[3] in (GroupKind.TP, GroupKind.ETP)] == []
    assert [c[4] for c in comms1 if c[3] is GroupKind.EP] == [a2a] * 4
    fc1 = next(r for r in rows1 if r.name == "layer0_moe_fc1")
    assert fc1.fwd[0].flops == 2 * 1024 * H * F
    assert fc1.expert_params == 2 * (H * F + F)
    # TP 1, ETP 2 (no SP): each GPU's 1024 tokens; the ETP pair gathers 2·1024·2 copies
    etp2 = make_par(tp=1, dp=8, ep=2, etp=2, global_batch=8)
    _, comms2 = _moe_comms(etp2)
    g = [c[1:] for c in comms2 if c[3] is GroupKind.ETP]
    size = 2 * 1024 * K * H * 2
    assert sorted(g) == sorted([("fwd", CollKind.ALLGATHER, GroupKind.ETP, size),
                                ("ig", CollKind.REDUCESCATTER, GroupKind.ETP, size),
                                ("fwd", CollKind.REDUCESCATTER, GroupKind.ETP, size),
                                ("ig", CollKind.ALLGATHER, GroupKind.ETP, size)])
    assert [c[4] for c in comms2 if c[3] is GroupKind.EP] == [1024 * K * H * 2] * 4


def _dp_ep_bytes(par):
    prog = generate(MOE_SMALL, par, GPU)
    total, kinds = 0, set()
    for st in prog.stages[:1]:
        for chunk in st.chunks:
            for lay in chunk:
                for ph in (lay.forward, lay.input_grad, lay.weight_grad):
                    if ph.comm is not None and ph.comm.group is GroupKind.DP_EP:
                        total += ph.comm.size_bytes
                        kinds.add(ph.comm.kind)
    return total, kinds


def test_expert_gradient_reduce_bytes_and_memory():
    kw = dict(tp=2, dp=8, ep=4, global_batch=8, sequence_parallel=True,
              distributed_optimizer=True)
    base, etp1 = make_par(**kw), make_par(etp=1, **kw)
    assert (base.edp, etp1.edp) == (2, 4)  # 16 / (2·4), 16 / (1·4)
    # per GPU: 12 layers × 2 local experts × (fc1 h·F/e + F/e bias, fc2 F/e·h + h bias)
    per_gpu = {e: 12 * 2 * (2 * H * F // e + F // e + H) for e in (1, 2)}
    # fp32 gradients (4 bytes), reduce-scattered over EDP (distributed optimizer)
    assert _dp_ep_bytes(base) == (4 * per_gpu[2], {CollKind.REDUCESCATTER})
    assert _dp_ep_bytes(etp1) == (4 * per_gpu[1], {CollKind.REDUCESCATTER})
    # memory: expert weights 2 bytes, gradients 4, Adam state 12 ÷ EDP
    m2 = check_memory(MOE_SMALL, base, GPU).stages[0]
    m1 = check_memory(MOE_SMALL, etp1, GPU).stages[0]
    extra = per_gpu[1] - per_gpu[2]
    assert m1.weights_bytes - m2.weights_bytes == 2 * extra
    assert m1.grads_bytes - m2.grads_bytes == 4 * extra
    assert m1.optimizer_bytes - m2.optimizer_bytes == 12 * (per_gpu[1] // 4 - per_gpu[2] // 2)


# ---- a small run: ETP 1 against ETP = TP ------------------------------------------------------

TINY = model_from_dict({"name": "tiny-moe", "layers": 2, "hidden": 256, "heads": 4,
                        "vocab": 1024, "seq_len": 256, "moe": {"experts": 4, "top_k": 2}})


def test_small_run_etp1_vs_etp_tp_differences():
    # TP 2 (SP), EP 4, DP 8, PP 1, 2 microbatches; α = 0, 1 GB/s in every group (S/B in ns)
    bw = dict.fromkeys(GroupKind, 1.0)
    res = {}
    for etp in (2, 1):
        par = make_par(tp=2, dp=8, ep=4, etp=etp, global_batch=16,
                             sequence_parallel=True, distributed_optimizer=True)
        prog = generate(TINY, par, GPU)
        r = simulate(prog, AlphaBetaNetwork(0, bw))
        res[etp] = (prog, r.stage_stats()[0], r)
    (_, s2, r2), (_, s1, r1) = res[2], res[1]
    # ETP = TP: per layer and microbatch the expert gather (fwd AG, RS; bwd RS, AG) of
    # n·top_k = 256·2 copies × 256 hidden × 2 bytes = 262,144 B over 2 ranks: ½·S/B = 131,072 ns
    # each; 2 layers × 2 microbatches × 4 = 16 of them, all blocking: ETP 1 saves 2,097,152 ns
    tp = GroupKind.TP
    assert s2.exposed_comm_ns[tp] - s1.exposed_comm_ns[tp] == 16 * 131_072
    # the dispatch/combine all-to-alls are the same: 128 tokens·2·256·2 B over 4 ranks (¾·S/B)
    assert s2.exposed_comm_ns[GroupKind.EP] == s1.exposed_comm_ns[GroupKind.EP] == \
        2 * 2 * 4 * (3 * 131_072 // 4)
    assert s1.exposed_comm_ns[GroupKind.ETP] == s2.exposed_comm_ns[GroupKind.ETP] == 0
    # compute differs only in the expert GEMMs (same FLOPs, other shapes: 512 copies through
    # F/2-wide shards against 256 through whole experts) and the optimizer (whole experts,
    # sharded over EDP 4 instead of 2); every other operator takes the same time
    # (ETP = TP has comm-only rows for the gathers that do not fit a compute row's slot)
    assert all(n.endswith(("_fwd_comm", "_bwd_comm")) for n in set(s2.layers) - set(s1.layers))
    assert set(s1.layers) <= set(s2.layers)
    for name, a in s1.layers.items():
        b = s2.layers[name]
        same = (a.forward_ns, a.input_grad_ns, a.weight_grad_ns) == (
            b.forward_ns, b.input_grad_ns, b.weight_grad_ns)
        assert same == ("moe_fc" not in name), name
    # the stage's time partitions exactly
    for s, r in ((s1, r1), (s2, r2)):
        assert s.compute_ns + s.optimizer_ns + sum(s.exposed_comm_ns.values()) + \
            s.bubble_ns == r.iteration_ns


def test_cli_layout_line_and_refusals(tmp_path):
    base = [sys.executable, "-m", "sim.cli", "--model", "moe-gpt-small", "--topo",
            "dgx-h100-scalable", "--nodes", "2", "--tp", "2", "--pp", "2", "--ep", "4",
            "--global-batch", "64", "--sequence-parallel", "--distributed-optimizer"]
    out = tmp_path / "r.json"
    p = subprocess.run(base + ["--expert-tensor-parallel-size", "1", "--json", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "(EP 4, ETP 1)" in p.stdout
    rep = json.loads(out.read_text())
    assert rep["parallelism"]["etp"] == 1
    assert "ETP" in rep["stages"][0]["exposed_comm_s"]
    wl = [sys.executable, "-m", "sim.cli", "--workload",
          "workloads/aicb-gpt13b-tp8-pp8-512gpu.txt", "--topo", "dgx-a100-512",
          "--expert-tensor-parallel-size", "1"]
    dense = [sys.executable, "-m", "sim.cli", "--model", "gpt2-medium", "--topo",
             "tiny-fattree-8", "--global-batch", "8", "--expert-tensor-parallel-size", "1"]
    for cmd in (wl, dense):
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 2
        assert p.stderr.count("\n") == 1 and "--expert-tensor-parallel-size" in p.stderr


@pytest.mark.parametrize("layout", [["--tp", "2", "--ep", "4", "--expert-tensor-parallel-size",
                                     "1"],
                                    ["--tp", "4", "--ep", "2", "--expert-tensor-parallel-size",
                                     "2", "--pp", "2"]])
def test_symmetric_per_rank_and_hybrid_agree(layout, tmp_path):
    """One simulated rank per stage stands for all (the ETP, EP and EDP copies load the same
    links): symmetric and per-rank runs give the same iteration to the nanosecond; a slow GPU
    switches to hybrid simulation, which per-rank simulation reproduces (within 0.1%)."""
    spec = tmp_path / "tiny-moe.yaml"
    spec.write_text("name: tiny-moe\nlayers: 2\nhidden: 256\nheads: 4\nvocab: 1024\n"
                    "seq_len: 256\nmoe: {experts: 4, top_k: 2}\n")
    base = ["--model", str(spec), "--topo", "dgx-h100-scalable", "--nodes", "2",
            "--global-batch", "32", "--sequence-parallel", "--distributed-optimizer", *layout]
    times = {}
    for name, extra in (("sym", []), ("per", ["--per-rank"]),
                        ("slow", ["--slow-gpu", "5:1.5"]),
                        ("slow-per", ["--slow-gpu", "5:1.5", "--per-rank"])):
        out = tmp_path / f"{name}.json"
        p = subprocess.run([sys.executable, "-m", "sim.cli", *base, *extra, "--json", str(out),
                            "--quiet"], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        times[name] = json.loads(out.read_text())["iteration_time_s"]
    assert times["sym"] == times["per"]
    # hybrid simulation with EP groups is within 0.1% of per-rank here, as it already was
    # before expert TP existed (TP 4, EP 2, PP 2 at ETP = TP: 10.8707 against 10.8635 ms)
    assert times["slow"] == pytest.approx(times["slow-per"], rel=1e-3)
    assert times["slow-per"] > times["sym"]


def test_sweep_dimension_with_the_single_run_rules():
    from sim.parallel.config import Training
    from sim.sweep.evaluate import base_row
    from sim.sweep.output import csv_text, ranked
    from sim.sweep.space import Space, enumerate_layouts

    space = Space(gpus=16, tp=(2,), pp=(1,), ep=(4, 8), etp=(1, 2, 4))
    ok, skipped = enumerate_layouts(MOE_SMALL, space, Training(global_batch=16,
                                                               sequence_parallel=True), 8)
    # ETP 2 = TP is the default layout (no "-etp2" twin); ETP·EP must divide TP·DP = 16
    assert [lay.key for lay in ok] == [
        "tp2-pp1-dp8-vpp1-mb1-ep4", "tp2-pp1-dp8-vpp1-mb1-ep4-etp1",
        "tp2-pp1-dp8-vpp1-mb1-ep4-etp4", "tp2-pp1-dp8-vpp1-mb1-ep8",
        "tp2-pp1-dp8-vpp1-mb1-ep8-etp1"]
    assert "ETP·EP = 4·8 must divide the 16 ranks" in dict(skipped)[
        "tp2-pp1-dp8-vpp1-mb1-ep8-etp4"]
    assert ok[1].config(Training(global_batch=16)).edp == 4
    rows = [dict(base_row(lay), status="ok", iteration_time_s=1.0 + i) for i, lay in
            enumerate(ok[:2])]
    assert "etp" not in rows[0] and rows[1]["etp"] == 1
    lines = csv_text(ranked(rows)).splitlines()
    col = lines[0].split(",").index("etp")
    assert [line.split(",")[col] for line in lines[1:]] == ["2", "1"]  # default: the TP

"""Megatron's delayed gradient reduction (delay_grad_reduce, sim/models/features/grad_sync.py):
hand-derived timelines of tiny 1F1B and interleaved pipelines with and without it, where the
generator puts the bucket collectives, and overlapped gradient reduction never slower than
none (with SM interference) over several pipeline layouts."""

import json

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.engine.interference import Interference
from sim.models import generate
from sim.models.features.grad_sync import delays, launch_points
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import ModelSpec
from sim.network import build_network
from sim.network.simple import AlphaBetaNetwork
from sim.parallel.placement import Placement
from sim.program.pipeline import GradSync, PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.topology import load_topology
from sim.topology.gpu import GpuSpec

A100 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp32": 19.5}, 80, 2039)
TOPO = str(ROOT / "topologies" / "dgx-a100-1024.yaml")
GPT22 = str(ROOT / "workloads" / "models" / "gpt-22b.yaml")
# one of the GPU's 4 SMs held by an asynchronous collective: compute beside it at 3/4 speed
INTF = Interference(sms=4, comm_sms=1)


def _ar(nbytes: int, blocking: bool = False) -> Comm:
    """A DP all-reduce over 2 ranks at 1 GB/s, no latency: 2(n−1)/n · S = S ns."""
    return Comm(CollKind.ALLREDUCE, GroupKind.DP, nbytes, blocking=blocking)


def _sync(name: str, nbytes: int) -> Task:
    return Task(name, TaskKind.GRAD_SYNC, comm=_ar(nbytes))


def _run(stages, schedule="1f1b", vpp=1):
    prog = PipelineProgram(tp=1, pp=2, dp=2, ep=1, vpp=vpp, microbatches=2, pp_bytes=0,
                           stages=stages, schedule=schedule)
    return simulate(prog, AlphaBetaNetwork(0, {GroupKind.DP: 1.0, GroupKind.PP: 1.0}),
                    record_spans=True, interference=INTF)


def _log(res):
    """(start, end, rank, stream, what) of compute, DP and optimizer spans (no idle)."""
    return sorted((s.start_ns, s.end_ns, s.rank, s.stream, s.label) for s in res.spans
                  if s.kind not in ("bubble",) and s.stream != "PP")


OPT = Task("optimizer", TaskKind.OPTIMIZER, compute_ns=5, wait_async=True)


def _stage_1f1b(stage: int, delayed: bool) -> StageProgram:
    """Two layers, every phase 10 ns; L2's weight-grad closes a 20-byte bucket (20 ns)."""
    l1 = Layer("L1", Phase(10), Phase(10), Phase(10))
    l2 = Layer("L2", Phase(10), Phase(10), Phase(10, None if delayed else _ar(20)))
    syncs = (GradSync(0, 1, (_sync("sync", 20),)),) if delayed else ()
    return StageProgram(stage, [(l1, l2)], epilogue=(OPT,), grad_syncs=syncs)


def test_1f1b_per_bucket_on_every_stage():
    """p = 2, M = 2; F = 20, B = 40 per stage. Stage 1: F0 20–40, B0 40–80, F1 80–100, B1 from
    100: L2 100–120, the bucket's all-reduce 120–140 beside L1's backward at 3/4 speed: L1
    input-grad ⌈40/3⌉ = 14 (120–134), weight-grad 6 ns at 3 SM then ⌈22/4⌉ = 6 (134–146).
    Stage 0 gets the last gradient at 146 and repeats it: L2 146–166, all-reduce 166–186, L1
    166–192, optimizer 192–197."""
    res = _run([_stage_1f1b(0, False), _stage_1f1b(1, False)])
    assert res.iteration_ns == 197
    log = _log(res)
    assert (120, 140, 2, "DP", "L2.weight_grad") in log
    assert (166, 186, 0, "DP", "L2.weight_grad") in log
    assert [x for x in log if x[0] >= 140 and x[2] == 0] == [
        (146, 156, 0, "compute", "L2"), (156, 166, 0, "compute", "L2"),
        (166, 176, 0, "compute", "L1"), (166, 186, 0, "DP", "L2.weight_grad"),
        (176, 180, 0, "compute", "slowed by communication"),
        (180, 190, 0, "compute", "L1"), (190, 192, 0, "compute", "slowed by communication"),
        (192, 197, 0, "compute", "optimizer")]


def test_1f1b_stage_1_launches_after_its_last_backward():
    """Delayed: stage 1's B1 runs 100–140 unslowed and launches its bucket at 140 (140–160,
    nothing beside; the rank waits for it, exposed DP); then the optimizer (160–165). Stage 0,
    per bucket as before, gets the gradient at 140: L2 140–160, all-reduce 160–180 beside L1
    160–186, optimizer 186–191: 6 ns earlier than per bucket everywhere (197)."""
    res = _run([_stage_1f1b(0, False), _stage_1f1b(1, True)])
    assert res.iteration_ns == 191
    assert [x for x in _log(res) if x[2] == 2 and x[0] >= 100] == [
        (100, 110, 2, "compute", "L2"), (110, 120, 2, "compute", "L2"),
        (120, 130, 2, "compute", "L1"), (130, 140, 2, "compute", "L1"),
        (140, 160, 2, "DP", "sync"), (140, 160, 2, "compute", "wait DP"),
        (160, 165, 2, "compute", "optimizer")]
    assert [x for x in _log(res) if x[2] == 0 and x[0] >= 140] == [
        (140, 150, 0, "compute", "L2"), (150, 160, 0, "compute", "L2"),
        (160, 170, 0, "compute", "L1"), (160, 180, 0, "DP", "L2.weight_grad"),
        (170, 174, 0, "compute", "slowed by communication"),
        (174, 184, 0, "compute", "L1"), (184, 186, 0, "compute", "slowed by communication"),
        (186, 191, 0, "compute", "optimizer")]


def test_interleaved_launch_points_follow_megatron():
    """p = 2, v = 2, M = 2 (group N = 2): Megatron's table k → (microbatch, chunk) is (0,0),
    (1,0), (0,1), (1,1); backward k runs chunk v−1−c, so chunk 1's last backward is k = 1 and
    chunk 0's k = 3. Rank r launches after backward k + r: rank 0 chunk 1 after 1, chunk 0
    after 3; rank 1 chunk 1 after 2, chunk 0 at 4 ≥ 4 backwards: after the last (3)."""
    par = make_par(pp=2, dp=2, vpp=2, global_batch=4)
    assert par.schedule_name == "interleaved" and par.microbatches == 2
    assert launch_points(par, 0) == [(1, 1), (0, 3)]
    assert launch_points(par, 1) == [(1, 2), (0, 3)]
    one = make_par(pp=4, dp=2, global_batch=16)
    assert [launch_points(one, s) for s in (1, 3)] == [[(0, 7)], [(0, 7)]]
    # non-interleaved 1F1B: a later stage's single gradient bucket (Megatron-Core buckets
    # only pipeline rank 0's first chunk) closes at the end of its last backward, where the
    # delayed launch is too, so no stage delays
    assert not any(delays(one, s) for s in range(4)) and delays(par, 0) and delays(par, 1)
    assert not delays(make_par(pp=2, dp=2, vpp=2, global_batch=4,
                                     delay_grad_reduce=False), 1)
    assert not delays(make_par(pp=4, dp=2, global_batch=16, schedule="gpipe"), 1)


def _stage_interleaved(stage: int, delayed: bool) -> StageProgram:
    """One layer per chunk: F 10, B 20; the chunk's 20-byte bucket on its weight-grad."""
    comm = None if delayed else _ar(20)
    chunks = [(Layer(f"c{c}", Phase(10), Phase(10), Phase(10, comm)),) for c in range(2)]
    syncs = ()
    if delayed:
        after = {0: {1: 1, 0: 3}, 1: {1: 2, 0: 3}}[stage]
        syncs = tuple(GradSync(c, after[c], (_sync(f"sync{c}", 20),)) for c in (1, 0))
    return StageProgram(stage, chunks, epilogue=(OPT,), grad_syncs=syncs)


def test_interleaved_timeline_with_and_without_delay():
    """Forwards: stage 0 F(0,c0) 0–10, F(1,c0) 10–20, F(0,c1) 20–30, F(1,c1) 30–40; stage 1
    F(0,c0) 10–20, F(1,c0) 20–30, F(0,c1) 30–40, B(0,c1) 40–60, F(1,c1) 60–70, B(1,c1)
    70–90; stage 0 B(0,c1) 60–80, B(1,c1) 90–110.
    Per bucket: stage 1 all-reduces chunk 1 at 90–110 beside B(0,c0) (90–116: 14 + 12), then
    B(1,c0) 116–136 (its gradient came at 110) and chunk 0's all-reduce 136–156, optimizer
    156–161. Stage 0 all-reduces chunk 1 at 110–130 beside B(0,c0) from 116 (input-grad 14,
    116–130; weight-grad 130–140), B(1,c0) 140–160 (gradient at 136), chunk 0 160–180,
    optimizer 180–185.
    Delayed: stage 1 B(0,c0) 90–110 unslowed, then launches chunk 1 (110–130) beside B(1,c0)
    110–136; chunk 0 at 136–156, optimizer 156–161. Stage 0 launches chunk 1 after B(1,c1) at
    110 (110–130) beside B(0,c0) 110–136 (gradient at 110), B(1,c0) 136–156, chunk 0
    156–176, optimizer 176–181."""
    per = _run([_stage_interleaved(s, False) for s in (0, 1)], "interleaved", 2)
    late = _run([_stage_interleaved(s, True) for s in (0, 1)], "interleaved", 2)
    assert (per.iteration_ns, late.iteration_ns) == (185, 181)
    dp = [(a, b, r, w) for a, b, r, s, w in _log(per) if s == "DP"]
    assert dp == [(90, 110, 2, "c1.weight_grad"), (110, 130, 0, "c1.weight_grad"),
                  (136, 156, 2, "c0.weight_grad"), (160, 180, 0, "c0.weight_grad")]
    dp = [(a, b, r, w) for a, b, r, s, w in _log(late) if s == "DP"]
    assert dp == [(110, 130, 0, "sync1"), (110, 130, 2, "sync1"), (136, 156, 2, "sync0"),
                  (156, 176, 0, "sync0")]
    assert [x[:2] for x in _log(late) if x[3] == "compute" and x[4] == "optimizer"] == [
        (156, 161), (176, 181)]


GPT_TINY = ModelSpec("tiny", layers=8, hidden=256, heads=4, vocab=1000, seq_len=128)


@pytest.mark.parametrize("vpp", [1, 2])
def test_generator_moves_the_buckets_of_delayed_stages(vpp):
    """Delayed stages carry no asynchronous bucket collective in their layers; their grad
    syncs hold the same collectives (the same bytes as per bucket without delay)."""
    on = generate(GPT_TINY, make_par(pp=2, dp=2, vpp=vpp, global_batch=8), A100)
    off = generate(GPT_TINY, make_par(pp=2, dp=2, vpp=vpp, global_batch=8,
                                            delay_grad_reduce=False), A100)

    def bucket_bytes(st):
        return sorted(lay.weight_grad.comm.size_bytes for ch in st.chunks for lay in ch
                      if lay.weight_grad.comm is not None and not lay.weight_grad.comm.blocking)

    for s_on, s_off in zip(on.stages, off.stages, strict=True):
        assert not s_off.grad_syncs
        moved = sorted(t.comm.size_bytes for g in s_on.grad_syncs for t in g.tasks)
        if vpp == 1:  # 1F1B: nothing delayed (test_interleaved_launch_points_follow_megatron)
            assert not moved and bucket_bytes(s_on) == bucket_bytes(s_off) != []
        else:
            assert not bucket_bytes(s_on) and moved == bucket_bytes(s_off) != []
            assert [g.chunk for g in s_on.grad_syncs] == [c for c, _ in launch_points(
                make_par(pp=2, dp=2, vpp=vpp, global_batch=8), s_on.stage)]


@pytest.mark.parametrize("vpp", [1, 2])
def test_only_stage_0s_first_chunk_is_bucketed(vpp):
    """Megatron-Core's DistributedDataParallel sets bucket_size None on pipeline ranks > 0,
    and Megatron-LM / NeMo pass disable_bucketing for model chunks after the first: with a
    bucket size of 1 parameter (every weighted row closes a bucket), stage 0's first chunk
    has one bucket per weighted row, every other chunk exactly one dense bucket, of all its
    parameters (4 bytes each: fp32 main grads), on the chunk's first weighted row."""
    par = make_par(pp=2, dp=2, vpp=vpp, global_batch=8, delay_grad_reduce=False,
                         ddp_bucket_size=1)
    prog = generate(GPT_TINY, par, A100)
    plan = build_model_plan(GPT_TINY, par)
    for st, sp in zip(prog.stages, plan.stages, strict=True):
        for c, (chunk, rows) in enumerate(zip(st.chunks, sp.chunks, strict=True)):
            got = [lay.weight_grad.comm.size_bytes for lay in chunk
                   if lay.weight_grad.comm is not None and not lay.weight_grad.comm.blocking]
            weighted = [r.params for r in rows if r.params]
            if st.stage == 0 and c == 0:
                assert sorted(got) == sorted(4 * n for n in weighted) and len(got) > 1
            else:
                assert got == [4 * sum(weighted)]
                first = next(i for i, r in enumerate(rows) if r.params)
                assert chunk[first].weight_grad.comm.size_bytes == 4 * sum(weighted)


LAYOUTS = [
    ["--tp", 8, "--pp", 2, "--dp", 2, "--global-batch", 8, "--nodes", 4],
    ["--tp", 4, "--pp", 4, "--dp", 2, "--global-batch", 16, "--nodes", 4,
     "--distributed-optimizer"],
    ["--tp", 4, "--pp", 4, "--vpp", 2, "--dp", 2, "--global-batch", 16, "--nodes", 4],
    ["--tp", 2, "--pp", 16, "--dp", 2, "--global-batch", 32, "--nodes", 8],
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=range(len(LAYOUTS)))
def test_overlap_with_delay_is_never_slower_than_none(tmp_path, layout):
    """--overlap-grad-reduce (delayed, Megatron's default) against --no-overlap-grad-reduce,
    with the default SM interference, down to a 16-stage pipeline."""
    def it(*extra):
        out = tmp_path / "r.json"
        assert main(["--model", GPT22, "--topo", TOPO, "--quiet", "--json", str(out),
                     *map(str, layout), *extra]) == 0
        return json.loads(out.read_text())["iteration_time_s"]

    assert it() <= it("--no-overlap-grad-reduce")
    if "--vpp" not in layout:  # 1F1B: the delay changes nothing, so the flag is refused
        out = tmp_path / "r.json"
        assert main(["--model", GPT22, "--topo", TOPO, "--quiet", "--json", str(out),
                     *map(str, layout), "--no-delay-grad-reduce"]) == 2


@pytest.mark.parametrize("pp,vpp,order", [(2, 1, "tp-dp-pp"), (4, 1, "dp-tp-pp"),
                                           (2, 2, "tp-pp-dp")])
def test_symmetric_equals_per_rank_with_delayed_stages(pp, vpp, order):
    """One simulated rank per stage (its DP peers' reductions are the network's copies) gives
    the same iteration and per-stage breakdown as simulating every rank, with interference."""
    t = load_topology(str(ROOT / "topologies" / "tiny-fattree-8.yaml"))
    dp = 8 // pp
    prog = generate(GPT_TINY, make_par(pp=pp, dp=dp, vpp=vpp, global_batch=4 * dp), A100)
    assert any(st.grad_syncs for st in prog.stages) == (vpp > 1)  # 1F1B: per-chunk buckets
    pl = Placement(1, dp, pp, 1, order)

    def breakdown(res):
        return [(s.stage, s.compute_ns, s.optimizer_ns, s.bubble_ns, s.end_ns,
                 tuple(sorted((g.value, ns) for g, ns in s.exposed_comm_ns.items())))
                for s in res.stage_stats()]

    sym = simulate(prog, build_network(t), placement=pl, interference=INTF)
    full = simulate(prog, build_network(t), placement=pl, per_rank=True, interference=INTF)
    assert sym.iteration_ns == full.iteration_ns and breakdown(sym) == breakdown(full)


GPT1T = str(ROOT / "workloads" / "models" / "gpt-1t.yaml")
SC21_1T = ["--model", GPT1T, "--topo", TOPO, "--nodes", 384, "--tp", 8, "--pp", 64, "--dp", 6,
           "--global-batch", 3072, "--micro-batch", 1, "--recompute", "full", "--dtype", "fp16",
           "--attention-backend", "unfused"]


@pytest.mark.benchmark
def test_sc21_1t_overlap_is_not_slower(tmp_path):
    """The SC'21 1T case (TP 8, PP 64, DP 6 on A100; workloads/validation/
    narayanan2021-selene.yaml): per bucket on every stage, overlapped reduction was slower than
    none (each of the 64 stages' last backward slowed by the SMs its reductions hold, carried
    through the drain one after another); as Megatron runs it — one bucket on every stage but
    the first, launched at the end of its last backward — it is not."""
    def it(*extra):
        out = tmp_path / "r.json"
        assert main([*map(str, SC21_1T), "--quiet", "--json", str(out), *extra]) == 0
        return json.loads(out.read_text())["iteration_time_s"]

    assert it() <= it("--no-overlap-grad-reduce")

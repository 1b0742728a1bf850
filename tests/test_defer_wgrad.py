"""Megatron-Core's defer_embedding_wgrad_compute / wgrad_deferral_limit
(sim/models/features/defer_wgrad.py):
hand-derived 1F1B timelines of a 2-stage pipeline whose last stage defers its output layer's
weight-gradient GEMM (and the sequence-parallel all-gather before it) to the pipeline flush,
the limit, where the generator puts the work, generated layouts never slower, and the
refusals."""

import json

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import UsageError
from sim.models import generate
from sim.models.aicb_writer import aicb_text
from sim.models.features import defer_wgrad
from sim.models.parallel_checks import validate
from sim.models.vocab.rows import Row
from sim.models.vocab.spec import ModelSpec
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase
from sim.topology.gpu import GpuSpec

A100 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp32": 19.5}, 80, 2039)
TOPO = str(ROOT / "topologies" / "dgx-a100-1024.yaml")
GPT22 = str(ROOT / "workloads" / "models" / "gpt-22b.yaml")
# the output layer's sequence-parallel re-gather: 20 bytes over TP 2 at 1 GB/s = 10 ns
AG = Comm(CollKind.ALLGATHER, GroupKind.TP, 20, blocking=True)


def _run(f0: int, b0: int, w: int, limit: int | None, m: int = 3):
    """p = 2, TP 2, M = ``m``, no pipeline transfer time. Stage 0: one layer, F ``f0``, B ``b0``
    (half input-grad, half weight-grad). Stage 1, forward order: L (10/10/10), the output layer
    ``out`` (F 10, input-grad 10, weight-grad ``w``) and ``ce`` (no compute; its input-grad
    comm is the output layer's re-gather AG, 10 ns): F = 20, B = 10 + 10 + w + 20. ``limit``:
    ``None`` = no deferral, else Megatron's wgrad_deferral_limit."""
    s0 = StageProgram(0, [(Layer("L", Phase(f0), Phase(b0 // 2), Phase(b0 - b0 // 2)),)])
    rows = [Row("L"), Row("out", tags={defer_wgrad.DEFER_WGRAD_TAG: 1}),
            Row("ce", tags={defer_wgrad.DEFER_REGATHER_TAG: 1})]
    layers = [Layer("L", Phase(10), Phase(10), Phase(10)),
              Layer("out", Phase(10), Phase(10), Phase(w)), Layer("ce", input_grad=Phase(0, AG))]
    deferred = None
    if limit is not None:
        par = make_par(tp=2, pp=2, global_batch=m, defer_embedding_wgrad_compute=True,
                             wgrad_deferral_limit=limit)
        deferred = defer_wgrad.build(rows, layers, [0, 1, 2], par, 0)
    s1 = StageProgram(1, [tuple(layers)], deferred=deferred)
    prog = PipelineProgram(tp=2, pp=2, dp=1, ep=1, vpp=1, microbatches=m, pp_bytes=0,
                           stages=[s0, s1], schedule="1f1b")
    return simulate(prog, AlphaBetaNetwork(0, {GroupKind.TP: 1.0, GroupKind.PP: 1.0}),
                    record_spans=True)


def _log(res, rank: int):
    """(start, end, what) of one rank's non-empty compute and TP spans (no idle)."""
    return [(s.start_ns, s.end_ns, f"{s.label}.{s.kind}" if s.stream == "compute" else s.label)
            for s in sorted(res.spans, key=lambda s: (s.start_ns, s.end_ns))
            if s.rank == rank and s.kind != "bubble" and s.stream in ("compute", "TP")]


def test_all_deferred_timeline():
    """Stage 1 is the busier stage (F 20, B 60 = AG 10 + out 10 + 20 + L 20). Without
    deferral: S0 F0 0–10, F1 10–20; S1 F0 10–30, B0 30–90; S0 B0 90–110, F2 110–120; S1 F1
    90–110, B1 110–170; S0 B1 170–190; S1 F2 170–190, B2 190–250; S0 B2 250–270: 270.
    Deferred (limit 0 = all three): S1's backward loses the AG (10) and out's weight grad (20):
    B = 30. S1 F0 10–30, B0 30–60; S0 B0 60–80, F2 80–90; S1 F1 60–80, B1 80–110; S0 B1
    110–130; S1 F2 110–130, B2 130–160, then the drain: AG 160–170, GEMM 170–190, AG 190–200,
    GEMM 200–220, AG 220–230, GEMM 230–250; S0 B2 (gradient at 160) 160–180: 250."""
    assert _run(10, 20, 20, None).iteration_ns == 270
    res = _run(10, 20, 20, 0)
    assert res.iteration_ns == 250
    log = _log(res, 2)
    for i, t0 in enumerate((30, 80, 130)):  # out's input grad, then L's: no AG, no wgrad
        assert log[5 * i + 2: 5 * i + 5] == [(t0, t0 + 10, "out.input_grad"),
                                            (t0 + 10, t0 + 20, "L.input_grad"),
                                            (t0 + 20, t0 + 30, "L.weight_grad")]
    assert log[15:] == [(160, 170, "out.deferred_allgather"),
                        (170, 190, "out.deferred_wgrad.weight_grad"),
                        (190, 200, "out.deferred_wgrad"),
                        (200, 220, "out.deferred_wgrad.weight_grad"),
                        (220, 230, "out.deferred_wgrad"),
                        (230, 250, "out.deferred_wgrad.weight_grad")]
    assert [x for x in _log(res, 0) if "grad" in x[2]] == [
        (60, 70, "L.input_grad"), (70, 80, "L.weight_grad"), (110, 120, "L.input_grad"),
        (120, 130, "L.weight_grad"), (160, 170, "L.input_grad"), (170, 180, "L.weight_grad")]
    stats = {s.stage: s for s in res.stage_stats()}
    # stage 1's compute: 3 × (F 20 + B 30) + 3 GEMMs of 20; TP exposed: the 3 drain AGs
    assert stats[1].compute_ns == 3 * 50 + 3 * 20
    assert stats[1].exposed_comm_ns[GroupKind.TP] == 30


def test_deferral_limit():
    """Stage 0 is slow to forward (F 80, B 10): stage 1 idles between microbatches and its
    weight grads were free there. Without deferral: S0 F0 0–80, F1 80–160; S1 F0 80–100, B0
    100–160; S0 B0 160–170, F2 170–250; S1 F1 160–180, B1 180–240; S0 B1 250–260; S1 F2
    250–270, B2 270–330; S0 B2 330–340: 340.
    Limit 0 (all 3): S1 B0 100–130, F1 160–180, B1 180–210, F2 250–270, B2 270–300, drain
    3 × (AG 10 + GEMM 20) 300–390 (S0 B2 300–310): 390, slower than none.
    Limit 1 (microbatch 0 only): B1 180–240 and B2 270–330 as without, drain AG 330–340, GEMM
    340–360: 360. Limit 2: B0 100–130, B1 180–210, B2 270–330, drain 330–390: 390."""
    assert _run(80, 10, 20, None).iteration_ns == 340
    assert [_run(80, 10, 20, k).iteration_ns for k in (0, 1, 2, 3, 9)] == [
        390, 360, 390, 390, 390]
    one = _log(_run(80, 10, 20, 1), 2)
    assert [x for x in one if x[0] >= 330] == [
        (330, 340, "out.deferred_allgather"), (340, 360, "out.deferred_wgrad.weight_grad")]
    assert (180, 190, "ce.input_grad") in one and (100, 110, "out.input_grad") in one


GPT_TINY = ModelSpec("tiny", layers=8, hidden=256, heads=4, vocab=1000, seq_len=128)


@pytest.mark.parametrize("vpp,limit,sp", [(1, 0, True), (2, 0, True), (2, 3, True),
                                          (1, 2, False)])
def test_generator_moves_the_output_layer_wgrad(vpp, limit, sp):
    """Only the stage with the output layer gets a deferral, on its last model chunk: the
    variant chunk has the same layers with logits' weight-grad compute 0 and (SP) no re-gather;
    the drain holds one GEMM per deferred microbatch (the removed compute) and, with SP, as
    many all-gathers of the removed one."""
    par = make_par(tp=2, pp=2, vpp=vpp, global_batch=8, sequence_parallel=sp,
                         defer_embedding_wgrad_compute=True, wgrad_deferral_limit=limit)
    prog = generate(GPT_TINY, par, A100)
    first, last = prog.stages
    assert first.deferred is None and last.deferred is not None
    d = last.deferred
    assert (d.chunk, d.microbatches) == (vpp - 1, limit or 8)
    chunk = last.chunks[d.chunk]
    assert [lay.name for lay in d.layers] == [lay.name for lay in chunk]
    changed = {a.name: (a, b) for a, b in zip(chunk, d.layers, strict=True) if a != b}
    before, after = changed.pop("output_logits")
    gemm_ns = before.weight_grad.compute_ns
    assert gemm_ns > 0 and after == Layer(before.name, before.forward, before.input_grad,
                                          Phase(0, before.weight_grad.comm))
    gathers = [t.comm for t in d.drain if t.comm is not None]
    assert [t.compute_ns for t in d.drain if t.compute_ns] == [gemm_ns] * d.microbatches
    if sp:
        ((before, after),) = changed.values()  # the row carrying the re-gather in backward
        regather = before.input_grad.comm
        assert regather.kind is CollKind.ALLGATHER and after.input_grad.comm is None
        assert gathers == [regather] * d.microbatches
    else:
        assert not changed and gathers == []
    assert any("--defer-embedding-wgrad-compute" in a for a in prog.assumptions)
    with pytest.raises(UsageError, match="deferred to the pipeline flush"):
        aicb_text(prog, stage=0)


LAYOUTS = [
    ["--tp", 8, "--pp", 2, "--dp", 2, "--global-batch", 8, "--nodes", 4, "--sequence-parallel"],
    ["--tp", 4, "--pp", 4, "--dp", 2, "--global-batch", 16, "--nodes", 4,
     "--distributed-optimizer"],
    ["--tp", 4, "--pp", 4, "--vpp", 2, "--dp", 2, "--global-batch", 16, "--nodes", 4,
     "--sequence-parallel"],
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=range(len(LAYOUTS)))
def test_generated_layouts_never_slower(tmp_path, layout):
    """GPT-22B with an even split: the last stage (its layers plus the output layer and loss)
    is the busiest, so moving its output-layer GEMMs into the flush is never slower."""
    def it(*extra):
        out = tmp_path / "r.json"
        assert main(["--model", GPT22, "--topo", TOPO, "--quiet", "--json", str(out),
                     *map(str, layout), *extra]) == 0
        return json.loads(out.read_text())["iteration_time_s"]

    assert it("--defer-embedding-wgrad-compute") <= it()


@pytest.mark.parametrize("kw,match", [
    ({"pp": 1}, "pipeline model parallel is not used"),
    ({"pp": 2, "schedule": "gpipe"}, "1f1b and interleaved schedules only"),
    ({"pp": 2, "dp": 2, "global_batch": 8, "zero": 1}, "not with ZeRO or FSDP"),
    ({"pp": 2, "wgrad_deferral_limit": -1}, "must be >= 0"),
])
def test_refused(kw, match):
    """Megatron-Core's own refusals (PP 1, a negative limit) and simrun's."""
    par = make_par(**{"global_batch": 4, "defer_embedding_wgrad_compute": True, **kw})
    with pytest.raises(UsageError, match=match):
        validate(GPT_TINY, par)


def test_limit_without_deferral_refused():
    with pytest.raises(UsageError, match="applies with --defer-embedding-wgrad-compute"):
        validate(GPT_TINY, make_par(pp=2, global_batch=4, wgrad_deferral_limit=2))


@pytest.mark.parametrize("extra,field", [
    (["--pp", "1", "--defer-embedding-wgrad-compute"], "--defer-embedding-wgrad-compute"),
    (["--pp", "2", "--wgrad-deferral-limit", "2"], "--wgrad-deferral-limit"),
    (["--pp", "2", "--defer-embedding-wgrad-compute", "--wgrad-deferral-limit", "8"],
     "--wgrad-deferral-limit"),
])
def test_cli_refusals(capsys, extra, field):
    """One line, exit 2: PP 1 (Megatron-Core's check), a limit without the option, and a
    limit that reaches the microbatch count (8 here: every one deferred, as with 0)."""
    code = main(["--model", GPT22, "--topo", TOPO, "--quiet", "--tp", "8", "--dp", "1",
                 "--global-batch", "8", "--nodes", "2", *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and field in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("vpp", [1, 2])
def test_symmetric_equals_per_rank(vpp):
    """One simulated rank per stage gives the iteration and per-stage breakdown of simulating
    every rank, with the deferral (the drain's TP all-gathers rendezvous per TP group)."""
    from sim.network import build_network
    from sim.parallel.placement import Placement
    from sim.topology import load_topology

    t = load_topology(str(ROOT / "topologies" / "tiny-fattree-8.yaml"))
    par = make_par(tp=2, pp=2, dp=2, vpp=vpp, global_batch=8, sequence_parallel=True,
                         defer_embedding_wgrad_compute=True, wgrad_deferral_limit=3)
    prog = generate(GPT_TINY, par, A100)
    pl = Placement(2, 2, 2, 1)

    def breakdown(res):
        return [(s.stage, s.compute_ns, s.bubble_ns, s.end_ns,
                 tuple(sorted((g.value, ns) for g, ns in s.exposed_comm_ns.items())))
                for s in res.stage_stats()]

    sym = simulate(prog, build_network(t), placement=pl)
    full = simulate(prog, build_network(t), placement=pl, per_rank=True)
    assert sym.iteration_ns == full.iteration_ns and breakdown(sym) == breakdown(full)

"""The workload generator: program structure, Megatron's communication sizes, DP gradient
sync, the optimizer epilogue, bad layouts and determinism."""

from __future__ import annotations

import pytest
from conftest import WORKLOADS
from par_support import make_par

from sim.comm import CollKind, GroupKind
from sim.errors import UsageError
from sim.models import build_model_plan, generate, load_model
from sim.models.generator import bucket_params
from sim.models.vocab.spec import ModelSpec
from sim.program.pipeline import TaskKind
from sim.topology.gpu import GpuSpec

MODELS = WORKLOADS / "models"
A100_80 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 80, 2039)
H100_80 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
GPT175 = load_model(MODELS / "gpt3-175b.yaml")


def _comms(layers, phases=("forward", "input_grad", "weight_grad")):
    for lay in layers:
        for ph in phases:
            c = getattr(lay, ph).comm
            if c is not None:
                yield ph, c


def _layer_rows(program, stage=0, chunk=0, layer=0):
    return [x for x in program.stages[stage].chunks[chunk]
            if x.name.startswith(f"layer{layer}_")]


def test_layout_and_stage_contents():
    par = make_par(tp=8, pp=8, dp=2, vpp=3, global_batch=64, sequence_parallel=True,
                         recompute="selective")
    prog = generate(GPT175, par, A100_80)
    assert (prog.tp, prog.pp, prog.dp, prog.vpp, prog.microbatches) == (8, 8, 2, 3, 32)
    assert prog.schedule == "interleaved" and prog.world_size == 128
    # virtual stage c·p + r holds layers (c·8 + r)·4 … +3
    plan = build_model_plan(GPT175, par)
    assert plan.stages[3].layers[2] == [76, 77, 78, 79]
    first = [x.name for x in prog.stages[0].chunks[0]]
    last = [x.name for x in prog.stages[7].chunks[2]]
    assert first[:2] == ["embedding", "embedding_dropout"]
    assert last[-5:] == ["final_norm", "output_logits", "output_cross_entropy1",
                         "output_cross_entropy2", "output_cross_entropy3"]
    assert not any(n.startswith("embedding") for n in [x.name for x in prog.stages[1].chunks[0]])
    assert all(x.name.startswith("layer") for x in prog.stages[3].chunks[1])
    # pipeline message b·s·h·2 bytes / t with sequence parallelism
    assert prog.pp_bytes == 1 * 2048 * 12288 * 2 // 8
    for st in prog.stages:
        for chunk in st.chunks:
            for lay in chunk:
                for ph in (lay.forward, lay.input_grad, lay.weight_grad):
                    assert isinstance(ph.compute_ns, int) and ph.compute_ns >= 0


@pytest.mark.parametrize("sp", [False, True])
def test_tp_traffic_per_layer_matches_calibration_c(sp):
    """The f/g operators send 8·b·s·h·(t−1)/t elements per rank per layer per microbatch (ring
    volumes: all-reduce 2(t−1)/t·S, all-gather / reduce-scatter (t−1)/t·S), SP or not. With SP,
    Megatron also re-gathers the sequence-sharded inputs of QKV and fc1 in backward (their
    saved activations): two more all-gathers of b·s·h, 2·b·s·h·(t−1)/t elements."""
    b, s, h, t = 2, 2048, 12288, 8
    par = make_par(tp=t, pp=8, global_batch=16, micro_batch=b, sequence_parallel=sp)
    rows = _layer_rows(generate(GPT175, par, A100_80))
    kinds = []
    sent = regather = 0.0
    for lay in rows:
        for ph, c in _comms([lay], ("forward", "input_grad")):
            assert c.group is GroupKind.TP and c.blocking and c.size_bytes == b * s * h * 2
            factor = 2 * (t - 1) / t if c.kind is CollKind.ALLREDUCE else (t - 1) / t
            if lay.name.endswith(("attn_proj", "mlp_fc2")) and ph == "input_grad":
                assert sp and c.kind is CollKind.ALLGATHER  # the input re-gather
                regather += factor * c.size_bytes
                continue
            sent += factor * c.size_bytes
            kinds.append(c.kind)
    assert sent == pytest.approx(8 * b * s * h * (t - 1) / t * 2)
    assert regather == pytest.approx(2 * b * s * h * (t - 1) / t * 2 if sp else 0)
    if sp:
        assert sorted(k.value for k in kinds) == ["ALLGATHER"] * 4 + ["REDUCESCATTER"] * 4
    else:
        assert kinds == [CollKind.ALLREDUCE] * 4
    assert generate(GPT175, par, A100_80).pp_bytes == b * s * h * 2 // (t if sp else 1)


def test_tp_collectives_sit_where_megatron_runs_them():
    """No SP: all-reduce after the projection and fc2 forward, after the QKV and fc1
    input-gradient (the f operator's backward)."""
    par = make_par(tp=8, pp=8, global_batch=8)
    rows = _layer_rows(generate(GPT175, par, A100_80))
    where = [(lay.name.split("_", 1)[1], ph) for lay in rows
             for ph, c in _comms([lay], ("forward", "input_grad"))]
    assert where == [("attn_qkv", "input_grad"), ("attn_proj", "forward"),
                     ("mlp_fc1", "input_grad"), ("mlp_fc2", "forward")]


def test_full_recompute_reruns_forward_with_its_collectives():
    par = make_par(tp=8, pp=8, global_batch=8, recompute="full")
    rows = _layer_rows(generate(GPT175, par, A100_80))
    rc = [x for x in rows if "recompute" in x.name]
    normal = [x for x in rows if "recompute" not in x.name]
    assert sum(x.input_grad.compute_ns for x in rc) == pytest.approx(
        sum(x.forward.compute_ns for x in normal), abs=len(rc))
    assert [c.kind for _, c in _comms(rc)] == [CollKind.ALLREDUCE] * 2
    # the recompute rows come last: the backward walks rows in reverse and re-runs the
    # forward (in forward order) before any gradient
    assert [x.name for x in rows][-len(rc):] == [x.name for x in rc]
    assert rc[-1].name.endswith("recompute_attn_norm")


@pytest.mark.parametrize("distributed", [False, True])
def test_dp_gradient_sync_covers_every_parameter_once(distributed):
    par = make_par(tp=8, pp=8, dp=4, vpp=3, global_batch=64,
                         distributed_optimizer=distributed)
    prog = generate(GPT175, par, A100_80)
    plan = build_model_plan(GPT175, par)
    for st, sp in zip(prog.stages, plan.stages, strict=True):
        dp = [c for chunk in st.chunks for _, c in _comms(chunk) if c.group is GroupKind.DP]
        # interleaved, Megatron's delayed reduction: every stage's buckets in its grad syncs
        assert not dp and st.grad_syncs
        dp = [t.comm for g in st.grad_syncs for t in g.tasks]
        assert all(not c.blocking for c in dp)
        kind = CollKind.REDUCESCATTER if distributed else CollKind.ALLREDUCE
        assert {c.kind for c in dp} == {kind}
        # fp32 gradients: 4 bytes per parameter, each parameter in exactly one bucket
        assert sum(c.size_bytes for c in dp) == 4 * sp.params
        # buckets are Megatron-sized except the last one of a segment
        assert sum(c.size_bytes >= 4 * bucket_params(4) for c in dp) >= len(dp) - 3 * 3
        labels = [t.label for t in st.epilogue]
        opt = next(t for t in st.epilogue if t.kind is TaskKind.OPTIMIZER)
        assert opt.wait_async and opt.compute_ns > 0
        if st.stage in (0, 7):  # tied embeddings: Megatron's embedding-group all-reduce first
            assert labels[0] == "embedding_grads"
            labels = labels[1:]
        if distributed:
            assert labels == ["optimizer", "param_allgather"]
            ag = st.epilogue[-1].comm
            assert (ag.kind, ag.group, ag.size_bytes) == (CollKind.ALLGATHER, GroupKind.DP,
                                                          2 * sp.params)
        else:
            assert labels == ["optimizer"]


def test_no_overlap_gives_one_blocking_reduction_after_backward():
    par = make_par(tp=8, pp=8, dp=4, global_batch=32, overlap_grad_reduce=False)
    prog = generate(GPT175, par, A100_80)
    plan = build_model_plan(GPT175, par)
    st = prog.stages[0]
    assert not [c for chunk in st.chunks for _, c in _comms(chunk) if c.group is GroupKind.DP]
    task = st.epilogue[0]
    assert task.kind is TaskKind.GRAD_SYNC and task.comm.blocking
    assert task.comm.size_bytes == 4 * plan.stages[0].params


def test_no_dp_no_gradient_collectives():
    prog = generate(GPT175, make_par(tp=8, pp=8, global_batch=8), A100_80)
    assert not [c for st in prog.stages for ch in st.chunks for _, c in _comms(ch)
                if c.group is GroupKind.DP]


def test_moe_all_to_all_in_ep_group():
    m = load_model(MODELS / "mixtral-8x7b.yaml")
    b, s, h, t, k = 1, 4096, 4096, 4, 2
    par = make_par(tp=t, pp=4, dp=8, ep=4, global_batch=32, micro_batch=b,
                         sequence_parallel=True, distributed_optimizer=True)
    prog = generate(m, par, H100_80)
    rows = _layer_rows(prog)
    a2a = [(ph, c) for ph, c in _comms(rows) if c.kind is CollKind.ALLTOALL]
    # dispatch and combine, forward and backward; tokens n/t per GPU, top_k copies each
    assert len(a2a) == 4
    assert all(c.group is GroupKind.EP and c.size_bytes == b * s // t * k * h * 2
               for _, c in a2a)
    dp_ep = [c for ch in prog.stages[0].chunks for _, c in _comms(ch) if c.group is GroupKind.DP_EP]
    plan = build_model_plan(m, par)
    assert sum(c.size_bytes for c in dp_ep) == 4 * plan.stages[0].expert_params
    # 8 experts over ep 4: 2 local experts, each SwiGLU MLP split over TP 4
    per_expert = (h * 2 * 14336 + 14336 * h) // t
    assert plan.stages[0].expert_params == 8 * 2 * per_expert  # 8 layers per stage


@pytest.mark.parametrize("kwargs, flag", [
    (dict(tp=5), "tp"),
    (dict(tp=8, pp=5), "pp"),
    (dict(tp=8, pp=8, dp=3, global_batch=64), "global_batch"),
    (dict(tp=8, pp=8, vpp=3, global_batch=4), "microbatches"),
    (dict(tp=8, pp=8, vpp=5), "pp"),
    (dict(tp=8, pp=8, recompute="some"), "recompute"),
    (dict(tp=8, pp=8, dtype="fp4"), "dtype"),
    (dict(tp=8, pp=8, ep=2, dp=2, global_batch=2), "ep"),
    (dict(tp=8, pp=8, schedule="zb"), "schedule"),
    (dict(tp=8, pp=8, schedule="1f1b", vpp=2, global_batch=16), "vpp"),
    (dict(tp=8, pp=8, micro_batch=0), "micro_batch"),
])
def test_bad_layouts_name_the_flag(kwargs, flag):
    with pytest.raises(UsageError) as err:
        generate(GPT175, make_par(**{"global_batch": 8, **kwargs}), A100_80)
    assert err.value.field == flag


def test_fp8_needs_an_fp8_gpu():
    with pytest.raises(UsageError) as err:
        generate(GPT175, make_par(tp=8, pp=8, global_batch=8, dtype="fp8"), A100_80)
    assert err.value.field == "dtype"
    bf16 = generate(GPT175, make_par(tp=8, pp=8, global_batch=8), H100_80)
    fp8 = generate(GPT175, make_par(tp=8, pp=8, global_batch=8, dtype="fp8"), H100_80)
    f = sum(x.forward.compute_ns for x in fp8.stages[1].chunks[0])
    b = sum(x.forward.compute_ns for x in bf16.stages[1].chunks[0])
    assert 0.5 < f / b < 0.85  # GEMMs at twice the peak, attention and element-wise unchanged


def test_compute_scales_with_micro_batch_and_tp():
    def fwd(**kw):
        prog = generate(GPT175, make_par(pp=8, global_batch=64, **kw), A100_80)
        return sum(x.forward.compute_ns for x in prog.stages[1].chunks[0])

    base = fwd(tp=8, micro_batch=1)
    # twice the tokens: a little under twice the time (per-kernel overheads amortised)
    assert 1.95 < fwd(tp=8, micro_batch=2) / base <= 2.0
    # half the TP degree: GEMMs twice as large (more efficient); replicated element-wise work
    # (no sequence parallelism) does not grow
    assert 1.85 < fwd(tp=4, micro_batch=1) / base < 2.0


def test_assumptions_are_stated():
    par = make_par(tp=8, pp=8, dp=2, global_batch=16, sequence_parallel=True,
                         distributed_optimizer=True)
    text = "\n".join(generate(GPT175, par, A100_80).assumptions)
    for words in ("vocab 51200", "GEMM efficiency", "reduce-scatter", "pipeline message",
                  "tied embeddings", "model FLOPs per iteration", "Adam"):
        assert words in text


def test_deterministic():
    par = make_par(tp=4, pp=4, dp=2, vpp=2, global_batch=32, sequence_parallel=True)
    m = ModelSpec("m", layers=16, hidden=2048, heads=16, vocab=32000, seq_len=1024)
    assert repr(generate(m, par, A100_80)) == repr(generate(m, par, A100_80))

"""Gradient synchronisation of generated programs: a row that completes a dense and an expert
gradient bucket issues both, and the tied word embedding's gradient is all-reduced between the
first and the last stage (Megatron's embedding group)."""

import pytest
from par_support import make_par

from sim.comm import CollKind, GroupKind
from sim.engine import simulate
from sim.models import generate
from sim.models.generator import _layers, bucket_params, embedding_grad_comm
from sim.models.plan import build_model_plan
from sim.models.vocab.rows import Row
from sim.models.vocab.spec import ModelSpec
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import TaskKind
from sim.topology.gpu import GpuSpec

A100 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp32": 19.5}, 80, 2039)


class _ZeroTimer:
    """Times every operator list as 0 ns (only the communications matter here)."""

    def ops_ns(self, ops, dtype, m=1):  # noqa: ARG002 - the Timer interface
        return 0


def test_row_completing_a_dense_and_an_expert_bucket_issues_both():
    # DP 8, EP 2: dense gradients in DP (8 ranks), expert gradients in DP_EP (4 ranks); one
    # row holding more than a bucket of each closes both buckets at once.
    par = make_par(dp=8, ep=2, global_batch=8)
    big = bucket_params(8)
    rows = [Row("layer0_a", params=big, expert_params=big + 5, tags={"layer": 0}),
            Row("layer0_b", params=7, tags={"layer": 0})]
    layers, index = _layers(rows, par, _ZeroTimer())
    assert [lay.name for lay in layers] == ["layer0_a_grad_bucket", "layer0_a", "layer0_b"]
    assert index == [1, 2]
    comms = [(lay.name, lay.weight_grad.comm.group, lay.weight_grad.comm.size_bytes)
             for lay in layers if lay.weight_grad.comm is not None]
    # fp32 gradients, 4 bytes per parameter; buckets fill in backward order, so layer0_b's 7
    # parameters join the dense bucket that layer0_a completes
    assert comms == [("layer0_a_grad_bucket", GroupKind.DP_EP, 4 * (big + 5)),
                     ("layer0_a", GroupKind.DP, 4 * (big + 7))]


GPT_TINY = ModelSpec("tiny", layers=4, hidden=256, heads=4, vocab=1000, seq_len=128)


def test_tied_embedding_allreduce_on_first_and_last_stage_only():
    par = make_par(tp=2, pp=4, dp=2, global_batch=8)
    prog = generate(GPT_TINY, par, A100)
    v_pad = 1024  # 1000 padded to a multiple of 128·tp = 256
    for st in prog.stages:
        emb = [t for t in st.epilogue if t.comm is not None and t.comm.group is GroupKind.EMB]
        if st.stage in (0, 3):
            (task,) = emb
            assert st.epilogue[0] is task  # before the optimizer step
            assert task.kind is TaskKind.GRAD_SYNC and task.wait_async
            c = task.comm
            assert (c.kind, c.blocking, c.size_bytes) == (CollKind.ALLREDUCE, True,
                                                          v_pad // 2 * 256 * 4)
        else:
            assert emb == []


@pytest.mark.parametrize("model, par", [
    (ModelSpec("untied", layers=4, hidden=256, heads=4, vocab=1000, seq_len=128,
               tied_embeddings=False), make_par(pp=2, global_batch=2)),
    (GPT_TINY, make_par(pp=1, dp=2, global_batch=2)),
])
def test_no_embedding_allreduce_when_untied_or_one_stage(model, par):
    plan = build_model_plan(model, par)
    assert all(embedding_grad_comm(plan, s) is None for s in range(par.pp))


def test_embedding_allreduce_timeline():
    # pp = 2, one microbatch, α = 0 and 1 GB/s everywhere: the all-reduce of S bytes between
    # two ranks takes 2·(n−1)/n·S / 1 GB/s = S ns. Stage 0 finishes its backward last, so
    # stage 1 waits for it (idle, counted as bubble) and then both spend S ns in the EMB group.
    par = make_par(pp=2, global_batch=1)
    prog = generate(GPT_TINY, par, A100)
    size = 1024 * 256 * 4
    net = AlphaBetaNetwork(0, dict.fromkeys(GroupKind, 1.0))
    res = simulate(prog, net, record_spans=True)
    emb = sorted((s.rank, s.end_ns - s.start_ns) for s in res.spans if s.stream == "EMB")
    assert [d for _, d in emb] == [size, size]
    ends = {s.rank: s.end_ns for s in res.spans if s.stream == "EMB"}
    assert len(set(ends.values())) == 1  # they finish together
    st = {r.stage: r for r in res.ranks}
    assert st[0].exposed_comm_ns[GroupKind.EMB] == size
    assert st[1].exposed_comm_ns[GroupKind.EMB] == size

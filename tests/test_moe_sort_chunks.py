"""The alltoall dispatcher's second permutation (sim.models.features.moe.sorts_by_local_expert):
Megatron-Core sorts the received token copies by local expert before the grouped GEMM and back
after it; bytes worked out by hand for a tiny MoE model, their exact roofline time, the
expert-TP order of sort and collective, and where it is absent (one local expert, the flex
dispatcher)."""

from dataclasses import replace

from par_support import make_par

from sim.models.compute import A100, ops_time_ns
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import ModelSpec, MoESpec
from sim.topology.gpu import GpuSpec

# a GPU of round bandwidth: at 80% of 2000 GB/s, 1600 bytes per ns
GPU = GpuSpec("round", {"bf16": 100.0}, 80, 2000)
# 1 layer, sequence 8, hidden 16, 8 experts of width 32, top-2
TINY = ModelSpec("tiny-moe", layers=1, hidden=16, heads=2, vocab=128, seq_len=8, ffn_hidden=32,
                 gated_mlp=True, bias=False, norm="rmsnorm", position_embedding="rope",
                 tied_embeddings=False, hidden_dropout=0.0, attention_dropout=0.0,
                 moe=MoESpec(experts=8, top_k=2))


def rows(model=TINY, **kw):
    par = make_par(global_batch=kw.pop("global_batch", 2), flash_attention=True, **kw)
    return {r.name: r for r in build_model_plan(model, par).stages[0].rows()}


def test_sort_and_unsort_hand_derived():
    # EP 2, DP 2 (one sequence of 8 tokens per GPU): 8 · 2 = 16 token copies arrive, 4 local
    # experts; each sort reads and writes 16 × 16 elements of 2 bytes = 1024 bytes, forward
    # and (the inverse sort of the gradient) backward
    r = rows(ep=2, dp=2)
    sort, unsort = r["layer0_moe_sort_by_expert"], r["layer0_moe_unsort_by_expert"]
    assert [(op.name, op.bytes) for op in sort.fwd] == [("moe_sort_by_expert", 1024)]
    assert [(op.name, op.bytes) for op in sort.ig] == [("moe_sort_by_expert_grad", 1024)]
    assert [(op.name, op.bytes) for op in unsort.fwd] == [("moe_unsort_by_expert", 1024)]
    assert [(op.name, op.bytes) for op in unsort.ig] == [("moe_unsort_by_expert_grad", 1024)]
    # one kernel: 2 µs + 1024 B at 1600 B/ns (0.64 ns) = 2000.64 → 2001 ns
    assert ops_time_ns(sort.fwd, GPU, A100, "bf16") == 2001
    # between the all-to-all and fc1, and between fc2 and the combine
    names = [n for n in r if n.startswith("layer0_moe")]
    assert names.index("layer0_moe_sort_by_expert") + 1 == names.index("layer0_moe_fc1")
    assert names.index("layer0_moe_fc2") + 1 == names.index("layer0_moe_unsort_by_expert")


def test_expert_tp_sorts_the_gathered_copies():
    # TP 2 with SP and ETP 2: the dispatcher all-gathers the 2 · 4 tokens' copies of its expert
    # TP group first (8 · 2 = 16 copies), then sorts them (1024 bytes each way)
    r = rows(tp=2, ep=2, dp=2, sequence_parallel=True, global_batch=2)
    assert r["layer0_moe_sort_by_expert"].fwd[0].bytes == 2 * 2 * 16 * 16


def test_a_load_factor_sorts_the_busiest_gpus_copies():
    r = rows(ep=2, dp=2, moe_load_imbalance=1.5)
    assert r["layer0_moe_sort_by_expert"].fwd[0].bytes == 2 * 2 * 24 * 16


def test_absent_with_one_local_expert_or_the_flex_dispatcher():
    one_local = replace(TINY, moe=MoESpec(experts=2, top_k=2))
    assert "layer0_moe_sort_by_expert" not in rows(one_local, ep=2, dp=2)
    assert "layer0_moe_sort_by_expert" not in rows(ep=2, dp=2, moe_token_dispatcher="flex")
    # without expert parallelism Megatron-Core still sorts (one chunk per local expert)
    assert "layer0_moe_unsort_by_expert" in rows(ep=1, dp=2)


def _moe_line(tmp_path, *extra):
    import json

    from conftest import ROOT

    from sim.cli import main
    out = tmp_path / "r.json"
    code = main(["--model", str(ROOT / "workloads/models/moe-gpt-small.yaml"), "--topo",
                 "tiny-2x2", "--ep", "2", "--dp", "4", "--global-batch", "4", *extra,
                 "--json", str(out), "--quiet"])
    assert code == 0
    return next(a for a in json.loads(out.read_text())["assumptions"] if a.startswith("MoE ("))


def test_the_report_states_it(tmp_path):
    # EP 2 inside one of tiny-2x2's nodes, 4 local experts: the flex dispatcher permutes once
    # each way, the alltoall dispatcher twice, so the flag is accepted and the line differs
    assert "sorted by local expert" in _moe_line(tmp_path, "--ep", "2")
    flex = _moe_line(tmp_path, "--ep", "2", "--moe-token-dispatcher-type", "flex")
    assert "sorted by local expert" not in flex
    # and DeepEP sends a token once per destination rank: 8 experts over 2 ranks, top-2, a
    # rank missed with probability C(4, 2)/C(8, 2) = 6/28: 2 · 22/28 = 1.571 copies
    assert "once per destination rank, 1.571 of 2 EP ranks" in flex

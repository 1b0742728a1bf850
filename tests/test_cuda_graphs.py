"""Megatron-Core's CUDA graphs in the host-dispatch model (sim.program.graphs, sim.engine.host,
sim.models.features.cuda_graphs) against hand-derived timelines (µs below, ns in code).

Rule: an eager kernel costs the host t_host to issue; a graph replay (one captured region's
pass of one microbatch) costs t_host once, its kernels then start as soon as the GPU is free.
A segment of kernels d_0..d_{n-1} right after a sync lasts max_i((i+1)·t + Σ_{j≥i} d_j) eager
and t + Σd as one replay."""

import pytest
from par_support import make_par

from sim.cli import main
from sim.comm import GroupKind
from sim.engine import simulate
from sim.engine.host import issue, segment_after_sync_ns
from sim.errors import UsageError
from sim.models.features import cuda_graphs
from sim.network.simple import FreeNetwork
from sim.program.graphs import GraphCapture
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase

US = 1000
LAYER = GraphCapture(frozenset({"layer"}))
ITERATION = GraphCapture(frozenset({"iteration"}))


def _phase(kernels_us):
    ks = tuple(k * US for k in kernels_us)
    return Phase(sum(ks), kernels_ns=ks)


def _program(layers, m=1, capture=None) -> PipelineProgram:
    prog = PipelineProgram(tp=1, pp=1, dp=1, ep=1, vpp=1, microbatches=m, pp_bytes=0,
                           stages=[StageProgram(0, [tuple(layers)])], schedule="1f1b")
    prog.cuda_graphs = capture
    return prog


def _fwd(name, kernels_us):
    return Layer(name, _phase(kernels_us))


def _iteration_us(layers, m=1, capture=None, t_us=2) -> float:
    res = simulate(_program(layers, m, capture), FreeNetwork(), host_dispatch_ns=t_us * US)
    return res.iteration_ns / US


def test_one_layer_host_bound_eager_gpu_bound_captured():
    # kernels 1, 1, 1 µs, t_host 2 µs. Eager: issued 2, 4, 6 → 2→3, 4→5, 6→7: 7 µs
    # = max(2+3, 4+2, 6+1). One replay: launched at 2 → 2→3, 3→4, 4→5: 5 µs = t + Σd.
    lay = [_fwd("layer0_mlp_fc1", (1, 1, 1))]
    assert _iteration_us(lay) == 7 == segment_after_sync_ns((1, 1, 1), 2)
    assert _iteration_us(lay, capture=LAYER) == 5
    # the same by the kernel-by-kernel rule: the replay's kernels carry no launch of their own
    assert issue([(1, 1, 0), (1, 0, 0), (1, 0, 0)], 2, 0, 0)[2] == [(2, 3), (3, 4), (4, 5)]


@pytest.mark.parametrize("ds", [(5, 1, 1), (1, 1, 1), (3, 9, 2, 2, 7), (1,), (4, 0, 4)])
@pytest.mark.parametrize("t", [1, 2, 3])
def test_a_replay_lasts_t_plus_its_kernels(ds, t):
    # eager: the closed form max_i((i+1)·t + Σ_{j≥i} d_j); one replay: t + Σd
    eager = issue([(d, 1, 0) for d in ds], t, 0, 0)[0]
    graph = issue([(d, 1 if i == 0 else 0, 0) for i, d in enumerate(ds)], t, 0, 0)[0]
    assert eager == segment_after_sync_ns(ds, t)
    assert graph == t + sum(ds) <= eager


def test_one_replay_per_layer_and_per_microbatch():
    # layers 0 and 1 of 1, 1, 1 µs: eager 6 kernels issued every 2 µs, the last at 12: 13 µs.
    # Two replays launched at 2 and 4: layer0 2→5, layer1 max(5, 4)→8: 8 = max(2+6, 4+3).
    two = [_fwd("layer0_attn_qkv", (1, 1, 1)), _fwd("layer1_attn_qkv", (1, 1, 1))]
    assert _iteration_us(two) == 13
    assert _iteration_us(two, capture=LAYER) == 8
    # one layer, 2 microbatches: a replay per microbatch, launched at 2 and 4: 2→5, 5→8
    one = [_fwd("layer0_attn_qkv", (1, 1, 1))]
    assert _iteration_us(one, m=2) == 13
    assert _iteration_us(one, m=2, capture=LAYER) == 8
    # full_iteration: one launch for the 12 kernels of both microbatches: 2 + 12 = 14 µs
    # against 12 launches eager: 12·2 + 1 = 25 µs
    assert _iteration_us(two, m=2) == 25
    assert _iteration_us(two, m=2, capture=ITERATION) == 14


def test_rows_of_one_layer_are_one_replay_and_others_stay_eager():
    # embedding (1 µs, eager) then layer0's two rows (1, 1 and 1 µs): eager 4 launches: 9 µs.
    # Captured: embedding issued at 2 (2→3), layer0's replay launched at 4: 4→7.
    rows = [_fwd("embedding", (1,)), _fwd("layer0_attn_norm", (1, 1)),
            _fwd("layer0_attn_qkv", (1,))]
    assert _iteration_us(rows) == 9
    assert _iteration_us(rows, capture=LAYER) == 7
    # full_iteration captures the embedding too: one launch, 2 + 4 = 6 µs
    assert _iteration_us(rows, capture=ITERATION) == 6


def test_forward_and_backward_are_two_replays():
    # one layer, forward 1, 1 µs and backward 1, 1 µs (1F1B, one microbatch): eager 4
    # launches: 4·2 + 1 = 9 µs; replays launched at 2 (F: 2→4) and 4 (B: 4→6): 6 µs
    lay = [Layer("layer0_mlp_fc1", _phase((1, 1)), _phase((1, 1)))]
    assert _iteration_us(lay) == 9
    assert _iteration_us(lay, capture=LAYER) == 6


def test_attn_and_mlp_scopes_are_a_graph_each():
    # attn rows 1, 1 and mlp rows 1, 1 µs, t_host 3 µs. Eager: 4 launches, 4·3 + 1 = 13 µs.
    # Scope attn: attn's replay at 3 (3→5), the mlp kernels eager at 6, 9 (6→7, 9→10): 10.
    # Scope attn,mlp: replays at 3 and 6: 3→5, 6→8: 8. Whole layer: one replay, 3 + 4 = 7.
    rows = [_fwd("layer0_attn_qkv", (1, 1)), _fwd("layer0_mlp_fc1", (1, 1))]
    assert _iteration_us(rows, t_us=3) == 13
    assert _iteration_us(rows, capture=GraphCapture(frozenset({"attn"})), t_us=3) == 10
    assert _iteration_us(rows, capture=GraphCapture(frozenset({"attn", "mlp"})), t_us=3) == 8
    assert _iteration_us(rows, capture=LAYER, t_us=3) == 7


def test_gpu_bound_pays_the_first_launch_either_way():
    # 10, 10, 10 µs: the host is ahead after the first launch: 2 + 30 µs eager and captured
    lay = [_fwd("layer0_mlp_fc1", (10, 10, 10))]
    assert _iteration_us(lay) == 32 == _iteration_us(lay, capture=LAYER)


def test_graphs_change_nothing_with_host_dispatch_off():
    two = [_fwd("layer0_attn_qkv", (1, 1, 1)), _fwd("layer1_attn_qkv", (1, 1, 1))]
    for cap in (None, LAYER, ITERATION):
        res = simulate(_program(two, 2, cap), FreeNetwork())
        assert res.iteration_ns == 12 * US and res.ranks[0].host_wait_ns == 0


def test_region_labels():
    assert LAYER.label("layer3_attn_qkv", None) == "layer3" == LAYER.label(
        "layer3_mlp_fc2", GroupKind.TP)
    assert LAYER.label("recompute_layer3_attn_qkv", None) == "layer3"
    for name, group in (("embedding", None), ("output_logits", None), ("final_norm", None),
                        ("layer3_mlp_fc1", GroupKind.DP), ("layer3_mlp_fc1_grad_bucket",
                                                           GroupKind.DP)):
        assert LAYER.label(name, group) is None
    attn = GraphCapture(frozenset({"attn"}))
    assert attn.label("layer2_attn_norm", None) == "layer2_attn"
    assert attn.label("layer2_mlp_norm", None) is None
    assert ITERATION.label("embedding", GroupKind.DP) == "iteration"


def _check(model_name, **kw):
    from conftest import WORKLOADS  # noqa: PLC0415

    from sim.models import load_model  # noqa: PLC0415

    model = load_model(WORKLOADS / "models" / f"{model_name}.yaml")
    cuda_graphs.check(model, make_par(global_batch=8, **kw))


@pytest.mark.parametrize(("model", "kw", "message"), [
    ("llama3-8b", dict(cuda_graph_impl="transformer_engine", cuda_graph_scope="full_iteration"),
     "To use full iteration cuda graph, please use cuda_graph_impl=local"),
    ("llama3-8b", dict(cuda_graph_impl="local", cuda_graph_scope="moe"),
     "moe cuda graph is only supported for MoE."),
    ("llama3-8b", dict(cuda_graph_impl="local", cuda_graph_scope="full,attn"),
     "full scope cannot be used with other scopes."),
    ("llama3-8b", dict(cuda_graph_impl="local", recompute="full"),
     "full recompute is only supported with full iteration CUDA graph."),
    ("mixtral-8x7b", dict(cuda_graph_impl="transformer_engine", cuda_graph_scope="moe,moe_router",
                          ep=4, dp=4), "must not contain both moe and moe_router"),
    ("mixtral-8x7b", dict(cuda_graph_impl="transformer_engine", cuda_graph_scope="moe_preprocess",
                          ep=4, dp=4), "moe_preprocess cuda graph is only supported with"),
    ("mixtral-8x7b", dict(cuda_graph_impl="transformer_engine", cuda_graph_scope="moe",
                          ep=4, dp=4), "moe cuda graph is only supported with drop-padding"),
    ("mixtral-8x7b", dict(cuda_graph_impl="local", cuda_graph_scope="mlp", ep=4, dp=4),
     "mlp cuda graph is only supported for dense layers"),
    ("mixtral-8x7b", dict(cuda_graph_impl="local", cuda_graph_scope="moe_router",
                          moe_capacity_factor=1.0, ep=4, dp=4),
     "not supported when there are DtoH copies and synchronizations"),
    # simrun's own: the dispatcher's host sync, inference, no Mamba layers
    ("mixtral-8x7b", dict(cuda_graph_impl="local", ep=4, dp=4), "not modelled for MoE models"),
    ("mixtral-8x7b", dict(cuda_graph_impl="local", cuda_graph_scope="full_iteration", ep=4,
                          dp=4), "host sync of the routing counts cannot be inside a graph"),
    ("llama3-8b", dict(cuda_graph_impl="local", cuda_graph_scope="full_iteration_inference"),
     "simrun simulates training"),
    ("llama3-8b", dict(cuda_graph_impl="transformer_engine", cuda_graph_scope="mamba"),
     "no Mamba layers"),
])
def test_refusals(model, kw, message):
    with pytest.raises(UsageError, match=message) as e:
        _check(model, **kw)
    assert e.value.field in ("cuda_graph_scope", "cuda_graph_impl")


def test_accepted_scopes():
    _check("llama3-8b", cuda_graph_impl="local", cuda_graph_scope="full_iteration",
           recompute="full")
    _check("llama3-8b", cuda_graph_impl="transformer_engine", cuda_graph_scope="attn,mlp")
    _check("mixtral-8x7b", cuda_graph_impl="transformer_engine", cuda_graph_scope="attn",
           ep=4, dp=4)
    assert cuda_graphs.capture(make_par(cuda_graph_impl="local", cuda_graph_scope="full")) == \
        LAYER
    assert cuda_graphs.capture(make_par()) is None


def test_cli_refusal_is_one_line_exit_2(capsys):
    args = ["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "2", "--global-batch", "8",
            "--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "full_iteration"]
    assert main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simrun: error: --cuda-graph-scope: To use full")


def test_report_line_says_it_changes_nothing_with_host_dispatch_off():
    par = make_par(cuda_graph_impl="local", cuda_graph_scope="full_iteration")
    off, on = cuda_graphs.describe(par, 0), cuda_graphs.describe(par, 21500)
    assert "host launch costs are off (--host-dispatch-us 0), so this changes nothing" in off
    assert "21.5 µs per graph launch" in on and "one launch per iteration" in on
    assert "static buffers and memory pool are not modelled" in off
    assert cuda_graphs.describe(make_par(), 0) is None


def test_megatron_lm_arguments_join_the_scopes(tmp_path):
    # Megatron-LM's --cuda-graph-scope takes its scopes space-separated (nargs='+'); the
    # reader hands them on comma-separated, simrun's form
    from conftest import ROOT, run_json  # noqa: PLC0415

    args = tmp_path / "a.args"
    args.write_text((ROOT / "tests/data/megatron/gpt2-medium-tp2.args").read_text()
                    + "\n--cuda-graph-impl transformer_engine --cuda-graph-scope attn mlp\n")
    rep = run_json(["--megatron-args", str(args), "--topo", "tiny-2x2"], tmp_path, "args")
    line = next(a for a in rep["assumptions"] if a.startswith("CUDA graphs"))
    assert "--cuda-graph-impl transformer_engine, --cuda-graph-scope attn,mlp" in line

"""simrun --job-config with a Megatron-Bridge ConfigContainer dump (Megatron-Bridge a9497c6b,
its Llama 3 8B SFT recipe for GB200, fixture in tests/data/bridge with NOTICE): the real file
runs and equals the --model flags it stands for, to the ns, as do variants of it; a key simrun
does not model is refused naming file, line and key."""

from pathlib import Path

import pytest
from conftest import ROOT
from conftest import run_json as _run

from sim.cli import main

DATA = Path(__file__).parent / "data" / "bridge"
L8 = DATA / "llama3_8b_sft_gb200_fp8_mx_v1.yaml"
TOPO = ["--topo", "gb200-nvl72", "--gpus", "8"]  # the dump names no GPU count


def _variant(tmp_path, *changes):
    text = L8.read_text()
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "variant.yaml"
    path.write_text(text)
    return path


def _error(argv, capsys):
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


def test_the_real_dump_runs_and_equals_the_model_flags_to_the_ns(tmp_path):
    """The dump as published: MXFP8 and Megatron-Core's fused cross entropy (native)."""
    dump = _run(["--job-config", str(L8), *TOPO], tmp_path, "real")
    flags = _by_hand(tmp_path, "mxfp8", "--cross-entropy-loss-fusion",
                     "--cross-entropy-fusion-impl", "native")
    assert dump["iteration_time_s"] == flags["iteration_time_s"]
    applied = next(a for a in dump["assumptions"] if a.startswith("job config"))
    assert "model.cross_entropy_loss_fusion" in applied
    assert any("fused vocab-parallel cross entropy" in a for a in dump["assumptions"])
    # the fused loss moves fewer bytes than the unfused one: the published dump is faster
    unfused = _run(["--job-config", str(_variant(tmp_path, MODELLED[1])), *TOPO], tmp_path,
                   "unfused")
    assert dump["iteration_time_s"] < unfused["iteration_time_s"]


def test_the_dump_in_mxfp8_equals_the_model_flags_to_the_ns(tmp_path):
    """The fused cross entropy turned off: the dump's own MXFP8 recipe runs, as
    ``--fp8-recipe mxfp8`` with the same flags as the delayed-scaling test below."""
    dump = _run(["--job-config", str(_variant(tmp_path, MODELLED[1])), *TOPO], tmp_path, "mx")
    assert dump["iteration_time_s"] == _by_hand(tmp_path, "mxfp8")["iteration_time_s"]


def _by_hand(tmp_path, recipe: str, *more: str) -> dict:
    """The dump by hand: Llama 3 8B's sizes (32 layers, hidden 4096, ffn 14336, 32 heads, 8
    query groups, RMSNorm, rope, SwiGLU, no biases, untied, vocab 128256, dropout 0), the data
    set's 4096-token samples, TP 1 PP 1, MBS 1, GBS 8, bf16 with FP8 (e4m3, ``recipe``) and
    FP8 parameters, distributed optimizer, no overlaps; ``more``: further flags."""
    spec = tmp_path / "llama3-8b-4k.yaml"
    spec.write_text((ROOT / "workloads" / "models" / "llama3-8b.yaml").read_text()
                    .replace("seq_len: 8192", "seq_len: 4096"))
    return _run(["--model", str(spec), *TOPO, "--micro-batch", "1", "--global-batch", "8",
                 "--dtype", "fp8", "--fp8-recipe", recipe, "--fp8-param-gather",
                 "--distributed-optimizer", *more], tmp_path, f"flags-{recipe}")


# the dump's FP8 recipe set to delayed scaling, and its fused cross entropy turned off
MODELLED = (("  fp8_recipe: mxfp8", "  fp8_recipe: delayed"),
            ("  cross_entropy_loss_fusion: true", "  cross_entropy_loss_fusion: false"))


def test_the_dump_with_delayed_scaling_equals_the_model_flags_to_the_ns(tmp_path):
    dump = _run(["--job-config", str(_variant(tmp_path, *MODELLED)), *TOPO], tmp_path, "dump")
    assert dump["iteration_time_s"] == _by_hand(tmp_path, "delayed")["iteration_time_s"]
    applied, irrelevant, stated = [a for a in dump["assumptions"] if a.startswith("job config")]
    for key in ("model.num_layers", "model.activation_func", "dataset.seq_length",
                "mixed_precision.fp8_recipe", "train.global_batch_size"):
        assert key in applied
    for key in ("checkpoint.save_interval", "scheduler.lr_warmup_iters", "optimizer.lr",
                "model.moe_router_topk", "ddp.overlap_grad_reduce"):
        assert key in irrelevant
    assert "model.attention_softmax_in_fp32" in stated


@pytest.mark.parametrize(("change", "where"), [
    (("  num_layers: 32", "  num_layers: thirty"), ":439: model.num_layers: expected a "
                                                     "positive integer"),
    (("  qk_l2_norm: false", "  qk_l2_norm: true"), ":467: model.qk_l2_norm: not modelled: "
                                                    "True is not Megatron's default"),
    (("  optimizer: adam", "  optimizer: muon"), ":586: optimizer.optimizer: not modelled"),
])
def test_bad_keys_exit_2_naming_file_line_and_key(tmp_path, capsys, change, where):
    path = _variant(tmp_path, *MODELLED, change)
    assert f"{path}{where}" in _error(["--job-config", str(path), *TOPO], capsys)


def test_cuda_graphs_map_to_megatron_cores_flags(tmp_path, capsys):
    """model.cuda_graph_impl / model.cuda_graph_scope (the dump's scope is [mlp], unused while
    the impl is none) → --cuda-graph-impl local --cuda-graph-scope mlp: the same iteration as
    those flags, and as the eager dump (no host launch cost: --host-dispatch-us 0)."""
    graphs = ("  cuda_graph_impl: none", "  cuda_graph_impl: local")
    dump = _run(["--job-config", str(_variant(tmp_path, *MODELLED, graphs)), *TOPO], tmp_path,
                "graphs")
    eager = _run(["--job-config", str(_variant(tmp_path, *MODELLED)), *TOPO], tmp_path, "eager")
    flags = _by_hand(tmp_path, "delayed", "--cuda-graph-impl", "local", "--cuda-graph-scope",
                     "mlp")
    assert dump["iteration_time_s"] == flags["iteration_time_s"] == eager["iteration_time_s"]
    line = next(a for a in dump["assumptions"] if a.startswith("CUDA graphs"))
    assert "--cuda-graph-scope mlp" in line and "changes nothing here" in line
    # a scope Megatron-Core refuses for a dense model
    path = _variant(tmp_path, *MODELLED, graphs, ("  - mlp\n", "  - moe\n"))
    assert _error(["--job-config", str(path), *TOPO], capsys) == (
        "simrun: error: --cuda-graph-scope: moe cuda graph is only supported for MoE. "
        "(Megatron-Core)")


# Megatron-Bridge's bf16_with_nvfp4_mixed (mixed_precision.py at 067f987df0): fp8 None, fp4
# "e2m1", fp4_recipe "nvfp4", fp8 parameters off, fp4 parameters gathered in FP4
NVFP4 = (("  fp4: null\n  fp4_recipe: nvfp4\n  fp8: e4m3", "  fp4: e2m1\n  fp4_recipe: nvfp4\n"
          "  fp8: null"), ("  fp8_param: true\n  fp8_param_gather: true",
                           "  fp8_param: false\n  fp8_param_gather: false\n"
                           "  fp4_param_gather: true"),
         ("  fp4: null\n  fp4_param: false", "  fp4: e2m1\n  fp4_param: true"))


def test_the_dump_in_nvfp4_equals_the_model_flags_to_the_ns(tmp_path):
    dump = _run(["--job-config", str(_variant(tmp_path, *NVFP4)), *TOPO], tmp_path, "nvfp4")
    spec = tmp_path / "llama3-8b-4k.yaml"
    spec.write_text((ROOT / "workloads" / "models" / "llama3-8b.yaml").read_text()
                    .replace("seq_len: 8192", "seq_len: 4096"))
    flags = _run(["--model", str(spec), *TOPO, "--micro-batch", "1", "--global-batch", "8",
                  "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4", "--fp4-param-gather",
                  "--distributed-optimizer", "--cross-entropy-loss-fusion",
                  "--cross-entropy-fusion-impl", "native"], tmp_path, "flags-nvfp4")
    assert dump["iteration_time_s"] == flags["iteration_time_s"]
    assert any(a.startswith("--fp4-format e2m1 --fp4-recipe nvfp4") for a in dump["assumptions"])


@pytest.mark.parametrize(("change", "where"), [
    # a format Megatron-Core does not have, at the mixed-precision key (line 217)
    ((NVFP4[0][0], NVFP4[0][1].replace("e2m1", "e3m0")),
     ":217: mixed_precision.fp4: not modelled: 'e3m0' (e2m1"),
    # the custom recipe (a user quantizer factory), line 218
    ((NVFP4[0][0], NVFP4[0][1].replace("recipe: nvfp4", "recipe: custom")),
     ":218: mixed_precision.fp4_recipe: not modelled: 'custom' (nvfp4"),
])
def test_nvfp4_refusals_name_file_line_and_key(tmp_path, capsys, change, where):
    path = _variant(tmp_path, change, *NVFP4[1:])
    assert f"{path}{where}" in _error(["--job-config", str(path), *TOPO], capsys)


def test_nvfp4_with_fp8_is_refused(tmp_path, capsys):
    """Megatron-LM: --fp4-format and --fp8-format are mutually exclusive."""
    path = _variant(tmp_path, (NVFP4[0][0], NVFP4[0][1].replace("fp8: null", "fp8: e4m3")),
                    *NVFP4[1:])
    err = _error(["--job-config", str(path), *TOPO], capsys)
    assert "--fp4-format" in err and "mutually exclusive" in err



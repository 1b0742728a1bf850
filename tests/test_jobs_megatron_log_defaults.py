"""A training log's ``arguments`` block prints every argument (~600 in a real run): those the
Megatron reader does not declare are accepted when printed at Megatron-LM's default
(sim/data/megatron_defaults.json, extracted from NVIDIA/Megatron-LM d98e8a64dd) or when they
are values Megatron-LM computes (world size, ranks, counters); any other is refused, naming it
and its line. The log is made here with Megatron-LM's own ``_print_args`` format (public logs
pasted in issues carry no licence to ship them)."""

from pathlib import Path

import pytest
from conftest import run_json as _run

from sim.cli import main
from sim.jobs.defaults import BOOKKEEPING, megatron_defaults

ARGS_FILE = Path(__file__).parent / "data" / "megatron" / "gpt2-medium-tp2.args"
TOPO = ["--topo", "tiny-2x2"]
#: the arguments of gpt2-medium-tp2.args, as argparse dests with their printed values
GPT2 = {"num_layers": "24", "hidden_size": "1024", "num_attention_heads": "16",
        "seq_length": "1024", "max_position_embeddings": "1024",
        "tensor_model_parallel_size": "2", "global_batch_size": "8",
        "data_path": "['/data/my-gpt2_text_document']", "save": "/ckpt"}
#: printed at their defaults in d98e8a64dd's arguments.py (bias_gelu_fusion etc.: the fused
#: kernels Megatron-LM turns on by default; dino_*: a vision model's options)
AT_DEFAULT = {"bias_gelu_fusion": "True", "bias_dropout_fusion": "True",
              "add_position_embedding": "True", "dino_head_hidden_size": "2048",
              "adlr_autoresume_interval": "1000", "classes_fraction": "1.0",
              "cuda_graph_modules": "[]", "load": "None", "fp8": "None"}
COMPUTED = {"world_size": "4", "rank": "0", "data_parallel_size": "2",
            "params_dtype": "torch.float32", "consumed_train_samples": "0"}


def _print_args(args: dict) -> str:
    # megatron/training/arguments.py _print_args's format, sorted case-insensitively
    lines = sorted((f"  {a} {'.' * (48 - len(a))} {v}" for a, v in args.items()),
                   key=str.lower)
    return "\n".join(["------------------------ arguments ------------------------", *lines,
                      "-------------------- end of arguments ---------------------", ""])


def test_the_printed_values_are_the_defaults_extracted():
    d = megatron_defaults()["arguments"]
    for name, text in AT_DEFAULT.items():
        if text != "None":
            assert str(d[name]) == text, name
    assert set(BOOKKEEPING) <= set(megatron_defaults()["derived"])


def test_a_log_at_defaults_equals_the_argument_file(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("0: building GPT model ...\n" + _print_args({**GPT2, **AT_DEFAULT,
                                                                 **COMPUTED}))
    from_log = _run(["--megatron-args", str(log), *TOPO], tmp_path, "log")
    from_args = _run(["--megatron-args", str(ARGS_FILE), *TOPO], tmp_path, "args")
    assert from_log["iteration_time_s"] == from_args["iteration_time_s"]
    irrelevant = next(a for a in from_log["assumptions"] if "irrelevant" in a)
    assert "bias_gelu_fusion(default)" in irrelevant and "world_size(default)" in irrelevant


@pytest.mark.parametrize(("extra", "name"), [
    ({"bias_gelu_fusion": "False"}, "--bias-gelu-fusion"),
    ({"dino_head_hidden_size": "4096"}, "--dino-head-hidden-size"),
    ({"frobnicate": "3"}, "--frobnicate"),
])
def test_a_value_off_its_default_is_refused_naming_it(tmp_path, capsys, extra, name):
    args = {**GPT2, **AT_DEFAULT, **COMPUTED, **extra}
    log = tmp_path / "train.log"
    log.write_text(_print_args(args))
    line = 2 + sorted(args, key=str.lower).index(next(iter(extra)))
    assert main(["--megatron-args", str(log), *TOPO, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"train.log:{line}: {name}: not modelled" in err and "\n" not in err

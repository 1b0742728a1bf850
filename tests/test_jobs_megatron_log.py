"""The Megatron-LM log reader: lines built with Megatron-LM's own format strings
(megatron/training/arguments.py ``_print_args`` and megatron/training/training.py
``training_log`` at NVIDIA/Megatron-LM d98e8a64dd) read back field by field."""

import pytest

from sim.errors import InputError
from sim.jobs.megatron_log import parse_megatron_log, read_megatron_log


def _print_args(args: dict) -> list[str]:
    # megatron/training/arguments.py _print_args, verbatim apart from print → list
    out = ["------------------------ arguments ------------------------"]
    str_list = []
    for arg, value in args.items():
        dots = "." * (48 - len(arg))
        str_list.append(f"  {arg} {dots} {value}")
    out += sorted(str_list, key=lambda x: x.lower())
    out.append("-------------------- end of arguments ---------------------")
    return out


def _training_log(iteration, train_iters, elapsed_ms, tflops=None) -> str:
    # megatron/training/training.py training_log's format strings
    s = " [2025-01-01 00:00:00.000000]"
    s += f" iteration {iteration:8d}/{train_iters:8d} |"
    s += f" consumed samples: {iteration * 1536:12d} |"
    s += f" elapsed time per iteration (ms): {elapsed_ms:.1f} |"
    if tflops is not None:
        s += f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
    s += f" learning rate: {6e-5:.6E} |"
    s += f" global batch size: {1536:5d} |"
    s += f" lm loss: {2.5:.6E} |"
    s += f" loss scale: {1.0:.1f} |"
    s += f" number of skipped iterations: {0:3d} |"
    return s


ARGS = {"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 16,
        "num_layers": 96, "adam_beta1": 0.9, "load": None, "fp16": True,
        "data_path": ["/data/a_text_document"]}


def test_arguments_and_iterations_read_as_printed(tmp_path):
    lines = ["using world size: 1024", *_print_args(ARGS), "building GPT model ...",
             _training_log(100, 500000, 28234.5, 141.25),
             _training_log(200, 500000, 28190.0)]
    f = tmp_path / "train.log"
    f.write_text("\n".join(lines) + "\n")
    log = read_megatron_log(f)
    assert log.arguments == {k: str(v) for k, v in ARGS.items()}
    # sorted case-insensitively after the marker on line 2: adam_beta1 first
    assert log.line_of("adam_beta1") == 3
    assert log.line_of("tensor_model_parallel_size") == 3 + len(ARGS) - 1
    assert [(i.iteration, i.elapsed_ms, i.tflops_per_gpu, i.line) for i in log.iterations] == [
        (100, 28234.5, 141.2, len(lines) - 1), (200, 28190.0, None, len(lines))]


def test_launcher_prefix_and_old_format_without_timestamp():
    old = (" iteration      100/  500000 | consumed samples:        51200 | elapsed time per "
           "iteration (ms): 1234.5 | learning rate: 1.000E-04 |")
    text = "\n".join(["0: " + x for x in _print_args({"seq_length": 2048})] + ["7: " + old])
    log = parse_megatron_log(text, "x.log")
    assert log.arguments == {"seq_length": "2048"}
    assert [(i.iteration, i.elapsed_ms, i.tflops_per_gpu) for i in log.iterations] == [
        (100, 1234.5, None)]


@pytest.mark.parametrize("text, where", [
    ("\n".join(_print_args(ARGS)[:-1]), "x.log:1: arguments:"),
    ("\n".join(_print_args({"a": 1}) + [_training_log(1, 2, 3.0).replace("3.0", "fast")]),
     "x.log:4: elapsed time per iteration (ms):"),
    ("\n".join(_print_args({"a": 1})).replace(" .", " :"), "x.log:2: arguments:"),
    ("hello\n", "x.log: arguments: no Megatron-LM"),
])
def test_bad_logs_one_line_naming_file_line_and_field(text, where):
    with pytest.raises(InputError) as e:
        parse_megatron_log(text, "x.log")
    assert str(e.value).startswith(where)
    assert "\n" not in str(e.value)

"""simrun --megatron-args / simrun megatron: Megatron-LM's own example scripts (fixtures in
tests/data/megatron, NOTICE there) run as the equivalent --model runs, to the nanosecond; every
argument applied, irrelevant or refused by name; shell the reader cannot evaluate refused with
file, line and construct."""

import json
from pathlib import Path

import pytest
from conftest import run_json as _run

from sim.cli import main
from sim.errors import InputError
from sim.jobs.megatron_args import GPT2_VOCAB, translate
from sim.jobs.script import launch_arguments
from sim.jobs.shell import Word

DATA = Path(__file__).parent / "data" / "megatron"
GPT3 = DATA / "train_gpt3_175b_distributed.sh"
LLAMA = DATA / "train_llama3_8b_h100_fp8.sh"


def test_gpt3_175b_script_equals_the_model_flags_to_the_ns(tmp_path):
    topo = ["--topo", "dgx-a100-1024", "--nodes", "16"]
    script = _run(["--megatron-args", str(GPT3), *topo], tmp_path, "script")
    # the script's settings written as simrun flags by hand: 96 layers x 12288, 96 heads,
    # seq 2048 (gpt3-175b), TP 8, PP 16, micro batch 1, global batch 1536, fp16
    flags = _run(["--model", "gpt3-175b", *topo, "--tp", "8", "--pp", "16", "--micro-batch",
                  "1", "--global-batch", "1536", "--dtype", "fp16"], tmp_path, "flags")
    assert script["iteration_time_s"] == flags["iteration_time_s"]
    lines = [a for a in script["assumptions"] if a.startswith("Megatron-LM arguments")]
    applied, irrelevant = lines
    for flag in ("--num-layers", "--fp16", "--tensor-model-parallel-size",
                 "--global-batch-size"):
        assert flag in applied
    for flag in ("--save", "--data-path", "--lr", "--step-batch-size-schedule", "--eval-iters"):
        assert flag in irrelevant


def test_megatron_subcommand_equals_the_script(tmp_path):
    # the script's training arguments typed after `simrun megatron ... --`, without the
    # path arguments that take the script's unset $1..$5
    paths = {"--data-path", "--vocab-file", "--merge-file", "--save", "--load",
             "--tensorboard-dir"}
    words = [w.text for w in launch_arguments(GPT3.read_text(), str(GPT3))]
    args = [w for k, w in enumerate(words) if w not in paths and words[k - 1] not in paths]
    topo = ["--topo", "dgx-a100-1024", "--nodes", "16"]
    script = _run(["--megatron-args", str(GPT3), *topo], tmp_path, "script")
    out = tmp_path / "typed.json"
    assert main(["megatron", *topo, "--quiet", "--json", str(out), "--", *args]) == 0
    assert json.loads(out.read_text())["iteration_time_s"] == script["iteration_time_s"]


def test_llama_script_reads_every_argument_and_applies_the_fused_loss(tmp_path):
    words = launch_arguments(LLAMA.read_text(), str(LLAMA))
    texts = [w.text for w in words]
    # the fp8 branch of `if [[ "$DTYPE" == "fp8" ]]` and the MOCK data branch were taken
    assert texts[texts.index("--fp8-format") + 1] == "hybrid"
    assert "--mock-data" in texts and "--tokenizer-model" not in texts
    assert texts[texts.index("--num-layers") + 1] == "32"
    job = translate(words, "l.sh", "llama")
    assert "--cross-entropy-loss-fusion" in job.argv
    without = translate([w for w in words if w.text != "--cross-entropy-loss-fusion"], "l.sh",
                        "llama")
    assert [a for a in job.argv if a != "--cross-entropy-loss-fusion"] == without.argv


def test_llama_arguments_without_the_fused_loss_translate_to_llama3_8b():
    words = [w for w in launch_arguments(LLAMA.read_text(), str(LLAMA))
             if w.text != "--cross-entropy-loss-fusion"]
    job = translate(words, "l.sh", "llama")
    assert job.model == {"name": "llama", "layers": 32, "hidden": 4096, "heads": 32,
                         "seq_len": 8192, "ffn_hidden": 14336, "kv_channels": 128,
                         "gated_mlp": True, "kv_heads": 8, "norm": "rmsnorm",
                         "position_embedding": "rope", "tied_embeddings": False,
                         "bias": False, "vocab": 128256, "hidden_dropout": 0.0,
                         "attention_dropout": 0.0}
    # TP 1: Megatron-LM turns --sequence-parallel off, so it is stated, not applied
    assert "--sequence-parallel" in job.irrelevant
    assert job.argv[job.argv.index("--dtype") + 1] == "fp8"
    for flag in ("--use-distributed-optimizer", "--overlap-grad-reduce",
                 "--overlap-param-gather", "--fp8-param-gather", "--grad-reduce-in-bf16"):
        assert flag in job.argv and flag in job.applied


def _words(*texts):
    return [Word(t, k) for k, t in enumerate(texts, 1)]


def test_defaults_megatron_derives():
    base = ("--num-layers", "2", "--hidden-size", "1000", "--num-attention-heads", "8",
            "--seq-length", "64")
    job = translate(_words(*base, "--swiglu"), "f", "m")
    # arguments.py: int((4 * hidden * 2 / 3) / 64) * 64 = int(2666.67 / 64) * 64 = 41 * 64
    assert job.model["ffn_hidden"] == 2624
    assert job.model["vocab"] == GPT2_VOCAB
    job = translate(_words(*base, "--pipeline-model-parallel-size", "2",
                           "--num-layers-per-virtual-pipeline-stage", "1"), "f", "m")
    assert job.argv[-2:] == ["--vpp", "1"]


@pytest.mark.parametrize("args, where", [
    (("--num-layers", "2", "--frobnicate"), "f:3: --frobnicate: not modelled"),
    (("--num-layers", "2", "--recompute-granularity", "full", "--recompute-method", "block"),
     "f:5: --recompute-method: not modelled"),
    (("--num-layers", "2", "--clip-grad", "0"), "f:3: --clip-grad: not modelled with the value"),
    (("--num-layers",), "f:1: --num-layers: expects a value"),
])
def test_bad_arguments_name_file_line_and_flag(args, where):
    with pytest.raises(InputError) as e:
        translate(_words(*args), "f", "m")
    assert str(e.value).startswith(where)


SCRIPT = """#!/bin/bash
N=$(nproc)
LAYERS=$((4 * $N))
ARGS=(--num-layers $LAYERS --hidden-size 1024 --num-attention-heads 16 --seq-length 1024)
torchrun --nproc_per_node $N pretrain_gpt.py ${ARGS[@]} --save $1
"""


def test_unevaluable_shell_exits_2_naming_file_line_and_construct(tmp_path, capsys):
    f = tmp_path / "run.sh"
    f.write_text(SCRIPT)
    assert main(["--megatron-args", str(f), "--topo", "tiny-2x2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    # the arithmetic reads $N, unknown: the value names the construct that made it so
    assert f"{f}:4: --num-layers: the value cannot be evaluated: command substitution $(...) " \
           "at line 2" in err
    # $(nproc) feeds only torchrun's own flag, $1 only --save (irrelevant): both tolerated
    f.write_text(SCRIPT.replace("$((4 * $N))", "$((4 * 6))"))
    assert main(["--megatron-args", str(f), "--topo", "tiny-2x2", "--global-batch", "4",
                 "--quiet"]) == 0
    f.write_text(SCRIPT.replace("--num-layers $LAYERS", "$(echo --num-layers) 24"))
    assert main(["--megatron-args", str(f), "--topo", "tiny-2x2"]) == 2
    assert "command substitution $(...) at line 4" in capsys.readouterr().err


def test_shell_subset_expansions():
    text = """
A=one
B="${A} two"   # comment
C=${UNSET:-dflt}
ARR=(--x "$B" 'lit $A')
ARR+=("--y 1")
if [[ "$A" == "one" ]] && [ -n "$A" ]; then
  ARR+=(--taken)
elif [[ "$A" == "two" ]]; then
  ARR+=(--not-taken)
else
  ARR+=(--else)
fi
python pretrain_gpt.py ${ARR[@]} "${ARR[@]}" $C \\
   --z
"""
    got = [w.text for w in launch_arguments(text, "t")]
    assert got == ["--x", "one", "two", "lit", "$A", "--y", "1", "--taken",
                   "--x", "one two", "lit $A", "--y 1", "--taken", "dflt", "--z"]


def test_argument_file_equals_the_shipped_spec(tmp_path):
    # gpt2-medium.yaml: 24 layers, hidden 1024, 16 heads, seq 1024, vocab 50257 (GPT-2's BPE,
    # the vocabulary the file's default tokenizer gives)
    a = _run(["--megatron-args", str(DATA / "gpt2-medium-tp2.args"), "--topo", "tiny-2x2"],
             tmp_path, "file")
    b = _run(["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "2", "--global-batch",
              "8"], tmp_path, "spec")
    assert a["iteration_time_s"] == b["iteration_time_s"]
    assert a["memory"] == b["memory"]


def test_a_logs_arguments_block_runs_like_the_arguments(tmp_path):
    # a training log as Megatron-LM prints it (_print_args: '  name ..... value', sorted), with
    # unset (None) and off (False) arguments, then an iteration line
    printed = {"num_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
               "seq_length": 1024, "max_position_embeddings": 1024,
               "tensor_model_parallel_size": 2, "global_batch_size": 8, "micro_batch_size": 1,
               "save": None, "sequence_parallel": False, "lr": 0.00015}
    lines = ["------------------------ arguments ------------------------"]
    lines += sorted((f"  {k} {'.' * (48 - len(k))} {v}" for k, v in printed.items()),
                    key=str.lower)
    lines += ["-------------------- end of arguments ---------------------",
              " iteration       10/     100 | elapsed time per iteration (ms): 180.0 |"]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    a = _run(["--megatron-args", str(log), "--topo", "tiny-2x2"], tmp_path, "log")
    b = _run(["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "2", "--global-batch",
              "8"], tmp_path, "spec")
    assert a["iteration_time_s"] == b["iteration_time_s"]
    irrelevant = [x for x in a["assumptions"] if "irrelevant" in x][0]
    assert "--lr" in irrelevant and "--save" not in irrelevant  # None: not set


def test_a_value_simrun_refuses_names_its_source(capsys):
    base = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "64"]
    assert main(["megatron", "--topo", "tiny-2x2", "--", *base, "--attention-backend",
                 "local"]) == 2
    err = capsys.readouterr().err
    assert "--attention-backend: invalid choice: 'local'" in err
    assert err.rstrip().endswith("(from megatron-arguments)")
    # a simrun flag given twice, on the command line and by the job, is refused
    assert main(["megatron", "--topo", "tiny-2x2", "--tp", "2", "--", *base,
                 "--tensor-model-parallel-size", "2"]) == 2
    assert "--tensor-model-parallel-size: given both here and by megatron-arguments" in \
        capsys.readouterr().err


def test_nvfp4_arguments_are_applied():
    """Megatron-Core's NVFP4 fields (--fp4-format e2m1 --fp4-recipe nvfp4 --fp4-param-gather,
    as Megatron-Bridge's bf16_with_nvfp4_mixed sets them) are simrun's options of those
    names."""
    job = translate(_words("--num-layers", "2", "--hidden-size", "64", "--num-attention-heads",
                           "4", "--seq-length", "64", "--bf16", "--fp4-format", "e2m1",
                           "--fp4-recipe", "nvfp4", "--fp4-param-gather"), "job.sh", "m")
    for flag in ("--fp4-format", "--fp4-recipe", "--fp4-param-gather"):
        assert flag in job.applied


@pytest.mark.parametrize(("extra", "says"), [
    (("--fp4-format", "e2m1", "--fp4-recipe", "custom"), "--fp4-recipe: custom (a user-"),
    (("--fp4-format", "e3m0"), "--fp4-format: expected e2m1"),
    (("--fp4-format", "e2m1", "--fp8-format", "hybrid"), "mutually exclusive"),
    (("--fp4-format", "e2m1"), "GPU test-gpu"),  # not a Blackwell GPU: named
])
def test_nvfp4_refusals_are_one_line(capsys, extra, says):
    base = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "64", "--global-batch-size", "4"]
    assert main(["megatron", "--topo", "tiny-2x2", "--", *base, *extra]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1

"""simrun --job-config with a NeMo 1 launcher training config (NVIDIA/NeMo-Framework-Launcher
24.07, gpt3/175b.yaml, fixture in tests/data/nemo with NOTICE): it equals the --model flags it
stands for, to the ns; bad keys and values exit 2 naming file, line and key."""

import json
from pathlib import Path

import pytest
from conftest import ROOT
from conftest import run_json as _run

from sim.cli import main

DATA = Path(__file__).parent / "data" / "nemo"
G175 = DATA / "gpt3_175b.yaml"


def test_gpt3_175b_launcher_config_equals_the_model_flags_to_the_ns(tmp_path):
    yaml = _run(["--job-config", str(G175), "--topo", "dgx-h100-1024"], tmp_path, "yaml")
    # the config by hand: trainer.num_nodes 128 × devices 8 (the topology's 1024 GPUs), TP 4,
    # PP 8, VP 12, MBS 1, GBS 2048, sequence parallel, bf16, fp8 off, no recompute,
    # distributed_fused_adam with overlap_grad_sync / overlap_param_sync, Transformer Engine
    # (its linears overlap the backward TP collectives: async allreduce); GPT-3 175B's sizes
    # (Brown et al.'s sizes, the shipped gpt3-175b.yaml) with the config's tokenizer,
    # GPT2BPETokenizer: GPT-2's 50257 tokens instead of the shipped spec's 51200
    spec = tmp_path / "gpt3-175b-gpt2bpe.yaml"
    spec.write_text((ROOT / "workloads" / "models" / "gpt3-175b.yaml").read_text()
                    .replace("vocab: 51200", "vocab: 50257"))
    flags = _run(["--model", str(spec), "--topo", "dgx-h100-1024", "--gpus", "1024",
                  "--tp", "4", "--pp", "8", "--vpp", "12", "--micro-batch", "1",
                  "--global-batch", "2048", "--sequence-parallel", "--dtype", "bf16",
                  "--distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
                  "--async-tensor-model-parallel-allreduce"], tmp_path, "flags")
    assert yaml["iteration_time_s"] == flags["iteration_time_s"]
    applied, irrelevant, stated = [a for a in yaml["assumptions"]
                                   if a.startswith("job config")]
    assert "model.virtual_pipeline_model_parallel_size" in applied
    assert "trainer.num_nodes" in applied and "model.ffn_hidden_size" in applied
    assert "model.optim.lr" in irrelevant and "exp_manager.name" in irrelevant
    assert "model.optim.bucket_cap_mb" in stated


def _bad(tmp_path, capsys, old, new):
    text = G175.read_text()
    assert old in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new, 1))
    assert main(["--job-config", str(bad), "--topo", "dgx-h100-1024", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


@pytest.mark.parametrize(("old", "new", "where"), [
    ("  fsdp: False", "  fsdp: True",
     "bad.yaml:93: model.fsdp: not modelled with the value True"),
    ("  mcore_gpt: True", "  mcore_gpt: True\n  frobnicate: 3",
     "bad.yaml:136: model.frobnicate: not modelled"),
    ("  precision: bf16", "  precision: 32", "bad.yaml:19: trainer.precision: not modelled"),
    ("  num_layers: 96", "  num_layers: ${oops}", "bad.yaml:69: model.num_layers: the "
     "interpolation ${oops} cannot be evaluated"),
    ("  activations_checkpoint_granularity: null # 'selective' or 'full'\n"
     "  activations_checkpoint_method: null",
     "  activations_checkpoint_granularity: full\n  activations_checkpoint_method: block",
     "bad.yaml:100: model.activations_checkpoint_method: not modelled"),
    ("  name: distributed_fused_adam", "  name: sgd",
     "bad.yaml:171: model.optim.name: not modelled: 'sgd'"),
    ("    type: 'GPT2BPETokenizer'", "    type: 'SentencePieceTokenizer'",
     "bad.yaml:114: model.tokenizer.type"),
])
def test_bad_keys_exit_2_naming_file_line_and_key(tmp_path, capsys, old, new, where):
    assert where in _bad(tmp_path, capsys, old, new)


def test_the_gpu_count_is_the_files_unless_the_command_line_gives_one():
    from sim.cli import build_parser
    from sim.cli.jobs import expand

    parser = build_parser()
    argv, job, _ = expand(["--job-config", str(G175), "--topo", "dgx-h100-1024"], parser)
    assert argv[-2:] == ["--gpus", "1024"]  # trainer.num_nodes 128 × trainer.devices 8
    assert "trainer.num_nodes" in job.applied and not job.stated[1:]
    argv, job, _ = expand(["--job-config", str(G175), "--topo", "dgx-h100-1024",
                           "--nodes=16"], parser)
    assert "--gpus" not in argv and "trainer.num_nodes" not in job.applied
    assert any(s.startswith("trainer.num_nodes(") for s in job.stated)


def test_gpt3_5b_config_with_fp8_equals_the_validation_case_it_backs(tmp_path):
    # workloads/validation/nemo-24.07-h100-fp8.yaml, "H100 GPT3-5B 64 GPU", takes its options
    # from this config at the launcher's tag 24.07 (TP 1, PP 1, MBS 4, GBS 2048, distributed
    # fused Adam with overlapped grad and param sync, fp8_hybrid with delayed scaling); the
    # table's row ran in FP8, which the config leaves off (fp8: False): turned on here
    config = tmp_path / "gpt3_5b_fp8.yaml"
    text = (DATA / "gpt3_5b.yaml").read_text()
    assert text.count("  fp8: False") == 1
    config.write_text(text.replace("  fp8: False", "  fp8: True"))
    run = _run(["--job-config", str(config), "--topo", "dgx-h100-1024", "--nodes", "8"],
               tmp_path, "yaml")  # the case's 64 GPUs
    out = tmp_path / "validate.json"
    assert main(["validate", "--only", "H100 GPT3-5B 64 GPU", "--workers", "1", "--json",
                 str(out)]) == 0
    case, = [c for c in json.loads(out.read_text())["cases"]
             if c["name"] == "H100 GPT3-5B 64 GPU"]
    assert run["iteration_time_s"] == case["predicted_s"]

"""simrun --job-config with torchtitan's own job TOML (fixtures in tests/data/torchtitan, NOTICE
there): the Llama 3 70B preset for 64 A100s equals the --model flags it stands for, to the ns;
its selective-checkpointing 8B preset and bad files exit 2 naming file and key."""

from pathlib import Path

import pytest
from conftest import run_json as _run

from sim.cli import main

DATA = Path(__file__).parent / "data" / "torchtitan"
L70 = DATA / "llama3_70b.toml"
TOPO = ["--topo", "dgx-a100-1024", "--nodes", "8"]  # the preset's 64 A100 GPUs


def test_llama3_70b_preset_equals_the_model_flags_to_the_ns(tmp_path):
    toml = _run(["--job-config", str(L70), *TOPO], tmp_path, "toml")
    # the preset by hand: flavor 70B, seq_len 8192, local_batch_size 8 (one step, no
    # accumulation), TP 8 (torchtitan's plan shards the norms: sequence parallel), FSDP2 over
    # the rest, full activation checkpointing, compile off, bf16
    flags = _run(["--model", "llama3-70b", *TOPO, "--tp", "8", "--fsdp", "--use-torch-fsdp2",
                  "--sequence-parallel", "--micro-batch", "8", "--microbatches", "1",
                  "--no-compile", "--recompute", "full", "--dtype", "bf16"], tmp_path, "flags")
    assert toml["iteration_time_s"] == flags["iteration_time_s"]
    applied, irrelevant = [a for a in toml["assumptions"] if a.startswith("torchtitan")]
    assert "parallelism.tensor_parallel_degree" in applied
    assert "activation_checkpoint.mode" in applied
    assert "optimizer.lr" in irrelevant and "checkpoint.interval" in irrelevant


def test_the_2024_preset_with_its_key_names_runs_the_same(tmp_path):
    # April 2024: [training] batch_size / data_parallel_degree / tensor_parallel_degree,
    # compile = false, model.norm_type = "rmsnorm" (torchtitan's eager RMSNorm)
    old = _run(["--job-config", str(DATA / "llama3_70b-2024.toml"), *TOPO], tmp_path, "old")
    flags = _run(["--model", "llama3-70b", *TOPO, "--tp", "8", "--fsdp", "--use-torch-fsdp2",
                  "--sequence-parallel", "--micro-batch", "8", "--microbatches", "1",
                  "--no-compile", "--norm-type", "rmsnorm", "--recompute", "full", "--dtype",
                  "bf16"], tmp_path, "flags")
    assert old["iteration_time_s"] == flags["iteration_time_s"]


@pytest.mark.parametrize("text, where", [
    ("[training]\ntensor_parallel_degree = 2\n[parallelism]\ntensor_parallel_degree = 2\n",
     "bad.toml: parallelism.tensor_parallel_degree: given twice (also as "
     "training.tensor_parallel_degree)"),
    (None, "llama3_8b.toml: activation_checkpoint.mode: not modelled: 'selective'"),
    ("[parallelism]\ntensor_parallel_degree = \"8\"\n",
     "bad.toml: parallelism.tensor_parallel_degree: expected int, got str"),
    ("[training]\ncompile = 1\n", "bad.toml: training.compile: expected bool, got int"),
    ("[model]\nname = \"llama3\"\nflavor = \"8B\"\nfrobnicate = 2\n",
     "bad.toml: model.frobnicate: not modelled"),
    ("[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n[activation_checkpoint]\n"
     "mode = \"none\"\n", "bad.toml: model.flavor: not modelled: llama3 debugmodel"),
    ("[model]\nname = \"llama3\"\nflavor = \"8B", "bad.toml: --job-config: not a torchtitan"),
])
def test_bad_configs_exit_2_naming_file_and_key(text, where, tmp_path, capsys):
    f = DATA / "llama3_8b.toml"
    if text is not None:
        f = tmp_path / "bad.toml"
        f.write_text(text)
    assert main(["--job-config", str(f), *TOPO]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and where in err, err


def test_pipeline_keys_become_simrun_flags():
    from sim.jobs.torchtitan import read_torchtitan

    text = ("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 8\n"
            "seq_len = 4096\n[parallelism]\npipeline_parallel_degree = 4\n"
            "pipeline_parallel_schedule = \"GPipe\"\npipeline_parallel_microbatch_size = 2\n"
            "[activation_checkpoint]\nmode = \"none\"\n")
    job, spec = read_torchtitan(text, "pp.toml")
    assert spec.name == "llama3-8b" and spec.seq_len == 4096
    argv = job.argv
    assert argv[argv.index("--pp") + 1] == "4"
    assert argv[argv.index("--schedule") + 1] == "gpipe"
    # 8 sequences per DP rank in microbatches of 2: 4 microbatches
    assert argv[argv.index("--micro-batch") + 1] == "2"
    assert argv[argv.index("--microbatches") + 1] == "4"

"""Megatron-LM's SC'21 scripts (examples/sc21 at de7dc40f88, fixtures in
tests/data/megatron/sc21 with NOTICE): run_figure_16.sh sources CONFIG.sh and SBATCH.sh beside
it (``. `pwd`/CONFIG.sh``), SBATCH.sh submits SRUN.sh (``sbatch ... SRUN.sh``), which runs
``srun ... sh -c "python -u .../pretrain_gpt.py ${MEGATRON_PARAMS}"``: simrun follows the chain
to the training command and equals the --model flags it stands for, to the ns."""

import shutil
from pathlib import Path

from conftest import run_json as _run

from sim.cli import main

SC21 = Path(__file__).parent / "data" / "megatron" / "sc21"
TOPO = ["--topo", "dgx-a100-1024", "--nodes", "8"]  # NNODES=8 of the script: 64 GPUs


def test_figure_16_script_equals_the_model_flags_to_the_ns(tmp_path):
    script = _run(["--megatron-args", str(SC21 / "run_figure_16.sh"), *TOPO], tmp_path, "sh")
    # the script by hand: 32 layers, hidden 15360, 128 heads, seq 2048 (CONFIG.sh), GPT-2's
    # 50257-token vocabulary (pretrain_gpt.py's default tokenizer), TP 8, PP 8, MBS 1, GBS
    # 128, fp16, --checkpoint-activations (every layer's input checkpointed: full recompute)
    spec = tmp_path / "sc21-fig16.yaml"
    spec.write_text("name: sc21-fig16\nlayers: 32\nhidden: 15360\nheads: 128\nvocab: 50257\n"
                    "seq_len: 2048\n")
    flags = _run(["--model", str(spec), *TOPO, "--tp", "8", "--pp", "8", "--micro-batch", "1",
                  "--global-batch", "128", "--dtype", "fp16", "--recompute", "full"],
                 tmp_path, "flags")
    assert script["iteration_time_s"] == flags["iteration_time_s"]
    applied, irrelevant = [a for a in script["assumptions"]
                           if a.startswith("Megatron-LM arguments")]
    assert "--checkpoint-activations" in applied and "--DDP-impl" in irrelevant


def _copy(tmp_path, old, new):
    for f in ("CONFIG.sh", "SBATCH.sh", "SRUN.sh", "run_figure_16.sh"):
        shutil.copy(SC21 / f, tmp_path / f)
    path = tmp_path / "run_figure_16.sh"
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    return path


def test_torch_ddp_is_refused_naming_the_command_that_runs_it(tmp_path, capsys):
    path = _copy(tmp_path, "DDP=local", "DDP=torch")
    assert main(["--megatron-args", str(path), *TOPO, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{tmp_path / 'SRUN.sh'}:17: --DDP-impl: not modelled with the value 'torch'" in err


def test_a_sourced_file_must_lie_beside_the_script(tmp_path, capsys):
    path = _copy(tmp_path, ". `pwd`/CONFIG.sh", ". /etc/passwd")
    assert main(["--megatron-args", str(path), *TOPO, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "run_figure_16.sh:" in err and "'/etc/passwd' is not a file beside the script" in err


def test_figure_11_arithmetic_gives_the_layer_count(tmp_path):
    # run_figure_11.sh sets PP=1 and NLS=$((3*PP)): 3 layers; hidden 20480, 128 heads, TP 8,
    # MBS 1, GBS 8, NNODES=${PP} (one node), fp16, --checkpoint-activations
    script = _run(["--megatron-args", str(SC21 / "run_figure_11.sh"), "--topo",
                   "dgx-a100-1024", "--nodes", "1"], tmp_path, "sh")
    spec = tmp_path / "sc21-fig11.yaml"
    spec.write_text("name: sc21-fig11\nlayers: 3\nhidden: 20480\nheads: 128\nvocab: 50257\n"
                    "seq_len: 2048\n")
    flags = _run(["--model", str(spec), "--topo", "dgx-a100-1024", "--nodes", "1", "--tp", "8",
                  "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--dtype", "fp16",
                  "--recompute", "full"], tmp_path, "flags")
    assert script["iteration_time_s"] == flags["iteration_time_s"]
    # with PP=2 the arithmetic gives NLS=6 and NNODES=${PP} two nodes
    for f in ("CONFIG.sh", "SBATCH.sh", "SRUN.sh"):
        shutil.copy(SC21 / f, tmp_path / f)
    pp2 = tmp_path / "run_figure_11.sh"
    text = (SC21 / "run_figure_11.sh").read_text()
    assert text.count("PP=1\n") == 1
    pp2.write_text(text.replace("PP=1\n", "PP=2\n"))
    top2 = ["--topo", "dgx-a100-1024", "--nodes", "2"]
    script2 = _run(["--megatron-args", str(pp2), *top2], tmp_path, "sh2")
    spec.write_text(spec.read_text().replace("layers: 3", "layers: 6"))
    flags2 = _run(["--model", str(spec), *top2, "--tp", "8", "--pp", "2", "--micro-batch", "1",
                   "--global-batch", "8", "--dtype", "fp16", "--recompute", "full"],
                  tmp_path, "flags2")
    assert script2["iteration_time_s"] == flags2["iteration_time_s"]
    assert script2["iteration_time_s"] != script["iteration_time_s"]

"""Command line of the compute model: simrun profile without PyTorch, a profile-written table
read back with --kernel-table, the A100 AICB example on an H100 topology (scaled by the stated
rule, or used as they are with a warning), --compute-efficiency for an unknown GPU,
--attention-backend."""

import json

import pytest
from conftest import TOPOLOGIES, WORKLOADS
from par_support import make_par

from sim.cli import main
from sim.kernels.table import write_table
from sim.models import load_model
from sim.profiling.profile import kernels_for, table_from_times

H100_TOPO = str(TOPOLOGIES / "dgx-h100-1024.yaml")
AICB_512 = str(WORKLOADS / "aicb-gpt13b-tp8-pp8-512gpu.txt")
LLAMA = str(WORKLOADS / "models" / "llama3-8b.yaml")


def _report(tmp_path, capsys, *args):
    out = tmp_path / "r.json"
    rc = main([*args, "--json", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0, err
    return json.loads(out.read_text())


def test_profile_without_pytorch_exits_2_with_one_line(tmp_path, capsys):
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("PyTorch is installed here")
    rc = main(["profile", "--standard", "--out", str(tmp_path / "t.csv")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == ("simrun profile: error: simrun profile needs PyTorch with CUDA: PyTorch is "
                   "not installed (pip install 'simrun[profile]')\n")
    assert not (tmp_path / "t.csv").exists()


def test_profile_lists_the_kernels_without_a_gpu(capsys):
    assert main(["profile", "--model", LLAMA, "--attention-backend", "flash", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "attn_flash_fwd b=1 s=8192 hq=32 hkv=8 d=128 causal=1" in lines
    assert "gemm_bf16 m=8192 k=4096 n=6144" in lines  # Llama 3 8B's QKV (4096 + 2·1024)


def test_profile_table_round_trips_through_kernel_table(tmp_path, capsys):
    """A table written by the profile writer (times: 10 ms per kernel, below every GEMM's
    peak-rate time) read back by a run: the report names it and times the layer kernels from
    it."""
    model = load_model(LLAMA)
    specs = kernels_for(model, make_par(tp=8, attention_backend="flash"))
    table = table_from_times("H100-SXM5-80GB", specs, [10.0] * len(specs), {"source": "test"})
    path = tmp_path / "mine.csv"
    write_table(table, path)
    args = ["--model", LLAMA, "--topo", H100_TOPO, "--nodes", "1", "--tp", "8",
            "--global-batch", "1", "--attention-backend", "flash"]
    rep = _report(tmp_path, capsys, *args, "--kernel-table", str(path))
    text = "\n".join(rep["assumptions"])
    assert f"kernel table {path}: {len(specs)} kernels measured on H100-SXM5-80GB" in text
    assert "measured shape" in text and "from the kernel table" in text
    shipped = _report(tmp_path, capsys, *args)
    assert shipped["iteration_time_s"] != rep["iteration_time_s"]


def test_a100_aicb_example_on_h100_is_scaled_by_the_stated_rule(tmp_path, capsys):
    base = ["--workload", AICB_512, "--topo", H100_TOPO, "--nodes", "64"]
    scaled = _report(tmp_path, capsys, *base)
    note = [a for a in scaled["assumptions"] if a.startswith("compute times measured on")]
    assert note == [note[0]] and "A100-SXM4-80GB" in note[0] and "scaled by 0.3099" in note[0]
    as_is = _report(tmp_path, capsys, *base, "--compute-scale", "1")
    assert "compute times of the workload file multiplied by 1 (--compute-scale)" in (
        as_is["assumptions"])
    assert scaled["iteration_time_s"] < as_is["iteration_time_s"]


def test_other_gpu_on_an_unknown_topology_gpu_warns(tmp_path, capsys):
    wl = tmp_path / "one.txt"
    wl.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 pp: 1 ga: 1 "
                  "all_gpus: 1 gpu: A100-SXM4-80GB\n1\n"
                  "layer -1 1000 NONE 0 2000 NONE 0 1000 NONE 0 100\n")
    rep = _report(tmp_path, capsys, "--workload", str(wl), "--topo",
                  str(TOPOLOGIES / "tiny-2x2.yaml"))
    assert rep["iteration_time_s"] == pytest.approx(4000e-9)
    assert any(a.startswith("WARNING: compute times measured on A100-SXM4-80GB used as they "
                            "are") and "--compute-scale" in a for a in rep["assumptions"])


def test_compute_efficiency_for_an_unknown_gpu(tmp_path, capsys):
    args = ["--model", str(WORKLOADS / "models" / "gpt2-medium.yaml"), "--topo",
            str(TOPOLOGIES / "tiny-2x2.yaml"), "--tp", "2", "--global-batch", "2"]
    default = _report(tmp_path, capsys, *args)  # tiny-2x2 declares compute_efficiency 0.75
    assert any(a.startswith("GPU test-gpu is not in the GPU catalogue: declared in the topology")
               and "compute_efficiency 0.75" in a for a in default["assumptions"])
    slower = _report(tmp_path, capsys, *args, "--compute-efficiency", "0.3")
    assert any(a.startswith("WARNING: GPU test-gpu is not in the GPU catalogue")
               and "--compute-efficiency 0.3" in a for a in slower["assumptions"])
    assert slower["iteration_time_s"] > default["iteration_time_s"]
    assert main([*args, "--compute-efficiency", "1.5"]) == 2
    assert main([*args, "--attention-backend", "cudnn"]) == 2


def test_an_undeclared_unknown_gpu_is_refused_naming_the_known_ones(tmp_path, capsys):
    text = (TOPOLOGIES / "tiny-2x2.yaml").read_text()
    topo = tmp_path / "undeclared.yaml"
    topo.write_text(text.replace(", compute_efficiency: 0.75}", "}"))
    assert "compute_efficiency: 0.75" not in topo.read_text()
    args = ["--model", str(WORKLOADS / "models" / "gpt2-medium.yaml"), "--topo", str(topo),
            "--tp", "2", "--global-batch", "2", "--json", str(tmp_path / "r.json")]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'test-gpu'" in err and "H100-SXM5-80GB" in err
    assert "--compute-efficiency" in err and "node.gpu.compute_efficiency" in err
    assert not (tmp_path / "r.json").exists()
    assert main([*args, "--compute-efficiency", "0.75"]) == 0

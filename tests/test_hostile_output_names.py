"""Outputs never replace inputs, and output names work up to the file system's limits (issue
31): every file read, directly or named inside another file, is an input; a name of up to 255
bytes is written (its temp file's name stays within NAME_MAX), a longer one or a symbolic link
that loops is refused in one line, exit 2."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from hostile_support import ROOT

from sim.errors import InputError
from sim.files.inputs import read_bytes, track_inputs
from sim.files.outputs import NAME_MAX, atomic_write

AICB = [str(ROOT / "workloads" / "aicb-gpt13b-tp8-pp8-512gpu.txt"), "--topo", "dgx-a100-512"]


def _simrun(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _one_line_exit_2(p: subprocess.CompletedProcess, *words: str) -> None:
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simrun: error: "), p.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_a_file_read_by_the_command_is_never_replaced(tmp_path):
    f = tmp_path / "model.yaml"
    f.write_text("layers: 2\n")
    track_inputs(True)  # as sim.cli.main does for one command
    try:
        read_bytes(f)
        with pytest.raises(InputError, match="is an input of this run"):
            atomic_write(f, lambda out: out.write("replaced"), flag="--json")
    finally:
        track_inputs(False)
    assert f.read_text() == "layers: 2\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["model.yaml"]
    read_bytes(f)  # outside a command (the Python API): a caller may write back what it read
    atomic_write(f, lambda out: out.write("layers: 3\n"), flag="--json")
    assert f.read_text() == "layers: 3\n"


def test_json_onto_the_kernel_table_is_refused(tmp_path):
    table = tmp_path / "k.csv"
    shutil.copy(ROOT / "sim" / "data" / "kernels" / "h100-sxm.csv", table)
    before = table.read_bytes()
    p = _simrun("--model", "llama3-8b", "--topo", "dgx-h100-scalable", "--nodes", "1", "--tp",
                "8", "--global-batch", "8", "--kernel-table", str(table), "--json", str(table))
    _one_line_exit_2(p, "--json", "--kernel-table")
    assert table.read_bytes() == before


def test_validate_json_onto_a_model_its_file_names_is_refused(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "validation").mkdir()
    src = (ROOT / "workloads" / "validation" / "torchtitan-a100-fsdp.yaml").read_text()
    src = src.replace("../../topologies/dgx-a100-1024.yaml",
                      str(ROOT / "topologies" / "dgx-a100-1024.yaml"))
    (tmp_path / "validation" / "t.yaml").write_text(src)
    for name in ("llama2-13b", "llama2-70b", "llama3-70b", "llama3-8b"):
        if (ROOT / "workloads" / "models" / f"{name}.yaml").exists():
            shutil.copy(ROOT / "workloads" / "models" / f"{name}.yaml", tmp_path / "models")
    model = tmp_path / "models" / "llama2-70b.yaml"
    before = model.read_bytes()
    p = _simrun("validate", str(tmp_path / "validation" / "t.yaml"), "--json", str(model))
    _one_line_exit_2(p, "--json", "input of model")
    assert model.read_bytes() == before


@pytest.mark.parametrize("length", [230, 250, NAME_MAX])
def test_output_names_up_to_255_bytes_are_written(length, tmp_path):
    name = "r" * (length - 5) + ".json"
    p = _simrun("--workload", *AICB, "--json", str(tmp_path / name))
    assert p.returncode == 0, p.stderr
    assert [x.name for x in tmp_path.iterdir()] == [name]


def test_a_name_over_255_bytes_and_a_path_over_4095_get_one_line(tmp_path):
    _one_line_exit_2(_simrun("--workload", *AICB, "--json", str(tmp_path / ("r" * 256))),
                     "--json", "256 bytes")
    deep = "/".join(["d" * 200] * 21)
    _one_line_exit_2(_simrun("--workload", *AICB, "--json", str(tmp_path / deep / "r.json")),
                     "--json", "bytes long")
    assert list(tmp_path.iterdir()) == []


def test_a_symlink_loop_as_output_is_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    _one_line_exit_2(_simrun("--workload", *AICB, "--json", str(tmp_path / "a")),
                     "--json", "loops")

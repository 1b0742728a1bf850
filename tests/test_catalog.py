"""Shipped inputs by name (sim/files/catalog.py): --topo/--model/--workload NAME from any directory,
`simrun list`, and the wheel's package data (setup.py's build step)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT, SEED_512, TOPOLOGIES, WORKLOADS

from sim.cli import main
from sim.errors import InputError
from sim.files import catalog
from sim.kernels.table import read_table, shipped_table
from sim.models.vocab.spec import load_model
from sim.topology import load_topology
from sim.validation.cases import default_files
from sim.workload.registry import read_workload


def test_shipped_names_are_the_repository_files():
    assert set(catalog.shipped("topologies")) == {p.stem for p in TOPOLOGIES.glob("*.yaml")}
    assert set(catalog.shipped("models")) == {p.stem for p in
                                               (WORKLOADS / "models").glob("*.yaml")}
    assert set(catalog.shipped("workloads")) == {
        p.stem for p in WORKLOADS.iterdir() if p.suffix in (".txt", ".tsv", ".csv")}
    assert set(catalog.shipped("validation")) == {
        p.stem for p in (WORKLOADS / "validation").glob("*.yaml")}


def test_a_name_loads_the_same_as_the_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing here: names must not depend on the directory
    by_path = load_topology(str(TOPOLOGIES / "dgx-h100-1024.yaml"))
    for name in ("dgx-h100-1024", "dgx-h100-1024.yaml"):
        t = load_topology(name)
        assert (t.node, t.fabric, t.num_nodes) == (by_path.node, by_path.fabric,
                                                   by_path.num_nodes)
    assert load_model("gpt3-175b") == load_model(WORKLOADS / "models" / "gpt3-175b.yaml")
    a = read_workload("aicb-gpt13b-tp8-pp8-512gpu")
    b = read_workload(SEED_512)
    assert (a.header, len(a.layers)) == (b.header, len(b.layers))


def test_an_existing_path_wins_over_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-2x2").write_text((TOPOLOGIES / "tiny-fattree-8.yaml").read_text())
    assert load_topology("tiny-2x2").num_gpus == 8  # the local file, not the shipped 2x2 (4)
    assert load_topology("tiny-2x2.yaml").num_gpus == 4  # no such local file: the shipped one


def test_a_kernel_table_by_name_is_the_shipped_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    by_name = read_table("h100-sxm")
    assert by_name.rows == shipped_table("h100-sxm.csv").rows and len(by_name.rows) > 10


def test_unknown_name_is_one_line_naming_the_flag_and_the_shipped_names(capsys):
    with pytest.raises(InputError) as e:
        catalog.resolve("models", "llama9-1t", "--model")
    assert e.value.file == "llama9-1t" and "--model" in e.value.message
    assert "gpt3-175b" in e.value.message
    assert main(["--model", "llama9-1t", "--topo", "tiny-2x2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "simrun list models" in err
    # a path-like value is left to the reader: "no such file" with the path
    assert main(["--workload", "x/none.txt", "--topo", "tiny-2x2"]) == 2
    assert "x/none.txt" in capsys.readouterr().err


def test_run_by_names_from_another_directory_matches_the_run_by_paths(tmp_path, monkeypatch):
    by_path = tmp_path / "p.json"
    assert main(["--workload", str(SEED_512), "--topo", str(TOPOLOGIES / "dgx-a100-512.yaml"),
                 "--json", str(by_path), "--quiet"]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["--workload", "aicb-gpt13b-tp8-pp8-512gpu", "--topo", "dgx-a100-512",
                 "--json", "n.json", "--quiet"]) == 0
    a, b = json.loads(by_path.read_text()), json.loads((tmp_path / "n.json").read_text())
    assert a.pop("workload") != b.pop("workload") and a.pop("topology") != b.pop("topology")
    assert a == b


def test_validate_finds_the_shipped_files_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_files() == sorted((WORKLOADS / "validation").glob("*.yaml"))


def test_list_describes_every_shipped_file(capsys):
    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(catalog.shipped("models"))
    gpt3 = next(line for line in out if line.split()[0] == "gpt3-175b")
    assert "96 layers" in gpt3 and "hidden 12288" in gpt3
    assert main(["list", "topologies"]) == 0
    topo = capsys.readouterr().out
    assert "128 x DGX A100 80GB" in topo  # the file's description key
    assert main(["list", "workloads"]) == 0
    assert "TP 8, PP 16, ga 16, GPUs 1024" in capsys.readouterr().out
    assert main(["list", "kernels"]) == 0
    assert "h100-sxm  measured kernel times of H100-SXM5-80GB" in capsys.readouterr().out
    assert main(["list", "nonsense"]) == 2


@pytest.mark.slow
def test_the_wheel_carries_the_shipped_inputs_as_package_data(tmp_path):
    """What `pip install .` installs: setup.py copies topologies/ and workloads/ to sim/data/."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("simrun-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"sim/data/topologies/{p.name}" for p in TOPOLOGIES.glob("*.yaml")}
    expected |= {f"sim/data/workloads/{p.relative_to(WORKLOADS)}" for p in
                 WORKLOADS.rglob("*") if p.is_file()}
    data = ROOT / "sim" / "data"  # package data that lives in the package (kernel tables, …)
    expected |= {f"sim/data/{p.relative_to(data)}" for p in data.rglob("*") if p.is_file()}
    assert any(n.startswith("sim/data/kernels/") for n in expected)
    assert expected <= names

"""`--set KEY=VALUE` what-ifs on topology fields (sim/topology/overrides.py) and the physical
consistency warnings (sim/topology/consistency.py), from --set and from files alike."""

from __future__ import annotations

import json

import pytest
from conftest import TOPOLOGIES

from sim.cli import main
from sim.errors import InputError, UsageError
from sim.topology import load_topology, parse_topology
from sim.topology.overrides import parse_override

A100 = TOPOLOGIES / "dgx-a100-1024.yaml"
TINY = TOPOLOGIES / "tiny-fattree-8.yaml"


def edited(path, old: str, new: str) -> str:
    """The file's text with one line's value changed (the independent route to the same
    what-if)."""
    text = path.read_text()
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.mark.parametrize("key,path", [
    ("fabric.link_bandwidth_gbps", ("fabric", "link_bandwidth_gbps")),
    ("fabric.levels[0].radix", ("fabric", "levels", 0, "radix")),
    ("fabric.levels.0.radix", ("fabric", "levels", 0, "radix")),
    ("node.gpu.peak_tflops.bf16", ("node", "gpu", "peak_tflops", "bf16")),
])
def test_keys_are_dotted_paths_with_list_indices(key, path):
    ov = parse_override(f"{key}=12")
    assert ov.path == path and ov.value == 12


@pytest.mark.parametrize("text", ["fabric", "=3", "a..b=1", "levels[x]=1", "[0].a=1", "a[0=1"])
def test_malformed_overrides_are_usage_errors(text):
    with pytest.raises(UsageError) as e:
        parse_override(text)
    assert e.value.field == "set"


@pytest.mark.parametrize("setting,old,new", [
    ("fabric.link_bandwidth_gbps=800", "  link_bandwidth_gbps: 200", "  link_bandwidth_gbps: 800"),
    ("node.gpu.hbm_GBps=4800", "    hbm_GBps: 2039", "    hbm_GBps: 4800"),
    ("node.nics.bandwidth_gbps=100", "    bandwidth_gbps: 200", "    bandwidth_gbps: 100"),
    ("node.gpu.peak_tflops={bf16: 989}",
     "    peak_tflops: {bf16: 312, fp16: 312, tf32: 156, fp32: 19.5, fp64: 19.5}",
     "    peak_tflops: {bf16: 989}"),
])
def test_an_override_reads_as_the_edited_file(setting, old, new):
    by_set = load_topology(str(A100), overrides=[setting])
    by_file = parse_topology(edited(A100, old, new), str(A100))
    assert (by_set.node, by_set.fabric, by_set.num_nodes) == (
        by_file.node, by_file.fabric, by_file.num_nodes)
    base = load_topology(str(A100))
    assert (base.node, base.fabric) != (by_set.node, by_set.fabric)
    key = setting.split("=")[0]
    assert any(o.startswith(f"{key} = ") and "(file: " in o for o in by_set.overrides)


@pytest.mark.parametrize("setting,old,new", [
    ("fabric.link_bandwidth_gbps=0", "  link_bandwidth_gbps: 200", "  link_bandwidth_gbps: 0"),
    ("node.gpu.hbm_GBps=fast", "    hbm_GBps: 2039", "    hbm_GBps: fast"),
    ("node.nics.efficiency=1.5", "    efficiency: 0.96", "    efficiency: 1.5"),
])
def test_a_bad_override_gets_the_files_message_naming_set(setting, old, new):
    with pytest.raises(InputError) as from_file:
        parse_topology(edited(A100, old, new), str(A100))
    with pytest.raises(InputError) as from_set:
        load_topology(str(A100), overrides=[setting])
    assert from_set.value.message == from_file.value.message
    assert from_set.value.file is None
    assert from_set.value.field == f"--set {setting.split('=')[0]}"


def test_an_oversubscription_the_radix_cannot_give_is_an_error():
    # radix 40 at 2:1 would need 26.67 down-ports: the reader's own check, for --set and file
    with pytest.raises(InputError) as e:
        load_topology(str(A100), overrides=["fabric.levels[0].oversubscription=2"])
    assert "radix 40 cannot be split 2:1" in e.value.message
    assert e.value.field == "--set fabric.levels[0].oversubscription"
    ok = load_topology(str(A100), overrides=["fabric.levels[0].oversubscription=3"])
    assert (ok.fabric.levels[0].down, ok.fabric.levels[0].up) == (30, 10)


def test_unknown_keys_and_missing_items_are_errors():
    with pytest.raises(InputError, match="unknown key"):
        load_topology(str(A100), overrides=["node.gpu.hmb_GBps=3"])
    with pytest.raises(UsageError, match="list of 3; index 5"):
        load_topology(str(A100), overrides=["fabric.levels[5].radix=3"])
    with pytest.raises(UsageError, match="node.gpus is a value"):
        load_topology(str(A100), overrides=["node.gpus.x=3"])


def test_a_nic_faster_than_its_fabric_port_is_stated_from_set_or_file(tmp_path):
    by_set = load_topology(str(TINY), overrides=["node.nics.bandwidth_gbps=160"])
    f = tmp_path / "fast-nic.yaml"
    f.write_text(edited(TINY, "bandwidth_gbps: 80}", "bandwidth_gbps: 160}"))
    by_file = load_topology(str(f))
    for t in (by_set, by_file):
        assert len(t.warnings) == 1 and "faster than the fabric's ports" in t.warnings[0]
    assert load_topology(str(TINY)).warnings == ()
    both = load_topology(str(TINY), overrides=["node.nics.bandwidth_gbps=160",
                                               "fabric.link_bandwidth_gbps=160"])
    assert both.warnings == ()
    pcie = load_topology(str(TINY), overrides=["node.nics.bandwidth_gbps=400",
                                               "fabric.link_bandwidth_gbps=400"])
    assert len(pcie.warnings) == 1 and "PCIe" in pcie.warnings[0]


def test_shipped_topologies_are_consistent():
    for p in sorted(TOPOLOGIES.glob("*.yaml")):
        assert load_topology(str(p)).warnings == (), p.name


def _run(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    assert main(["--model", "gpt2-medium", "--topo", str(TINY), "--pp", "2", "--global-batch",
                 "16", "--json", str(out), "--quiet", *extra]) == 0
    return json.loads(out.read_text())


def test_the_run_reports_overrides_and_warnings_and_simulates_them(tmp_path, capsys):
    base = _run(tmp_path, "base")
    nic_only = _run(tmp_path, "nic", "--set", "node.nics.bandwidth_gbps=160")
    # the NIC alone cannot go faster than its 80 Gb/s port: the same iteration, and it says so
    assert nic_only["iteration_time_s"] == base["iteration_time_s"]
    assert "faster than the fabric's ports" in capsys.readouterr().err
    text = " ".join(nic_only["assumptions"])
    assert "topology override (--set): node.nics.bandwidth_gbps = 160 (file: 80)" in text
    assert "WARNING: node.nics.bandwidth_gbps 160 Gb/s is faster" in text
    both = _run(tmp_path, "both", "--set", "node.nics.bandwidth_gbps=160", "--set",
                "fabric.link_bandwidth_gbps=160")
    assert both["iteration_time_s"] < base["iteration_time_s"]  # DP/PP traffic crosses NICs
    assert main(["--model", "gpt2-medium", "--topo", str(TINY), "--set",
                 "fabric.link_bandwidth_gbps=-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["simrun: error: --set fabric.link_bandwidth_gbps: must be > 0, got -1"]

"""Topology files: the shipped ones load with the hardware facts of docs/hardware.md; bad files are
rejected with one-line errors naming file, line and key."""

from __future__ import annotations

import pytest
from conftest import TOPOLOGIES

from sim.errors import InputError
from sim.topology import load_topology, parse_topology

TINY = (TOPOLOGIES / "tiny-2x2.yaml").read_text()


def _err(text: str, nodes: int | None = None) -> InputError:
    with pytest.raises(InputError) as ei:
        parse_topology(text, "bad.yaml", nodes)
    return ei.value


@pytest.mark.parametrize("name", sorted(p.name for p in TOPOLOGIES.glob("*.yaml")))
def test_every_shipped_topology_loads(name):
    t = load_topology(str(TOPOLOGIES / name))
    assert t.num_gpus == t.num_nodes * t.gpus_per_node > 0
    assert t.path.endswith(name)
    assert t.describe()[0].startswith(f"topology: {t.name}")


def test_dgx_a100_1024_facts():
    t = load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml"))
    assert (t.num_nodes, t.gpus_per_node, t.num_gpus) == (128, 8, 1024)
    assert t.gpu.tflops("bf16") == 312 and t.gpu.hbm_GB == 80 and t.gpu.hbm_GBps == 2039
    nv = t.node.nvlink
    assert nv is not None and nv.gpu_bandwidth_GBps == pytest.approx(240.0)  # 12 × 20 (NCCL)
    assert t.node.nics.count == 8 and t.node.nics.bandwidth_GBps == pytest.approx(24.0)
    assert t.node.nics.gpus == tuple((i,) for i in range(8))
    f = t.fabric
    assert f is not None and f.rail_optimized
    assert [(lv.down, lv.up) for lv in f.levels] == [(20, 20), (20, 20), (40, 0)]


def test_variants_differ_only_where_named():
    base = load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml"))
    over = load_topology(str(TOPOLOGIES / "dgx-a100-1024-oversub4.yaml"))
    half = load_topology(str(TOPOLOGIES / "dgx-a100-512.yaml"))
    assert over.node == base.node and half.node == base.node
    leaf = over.fabric.levels[0]
    assert (leaf.down, leaf.up, leaf.oversubscription) == (32, 8, 4.0)
    assert half.num_gpus == 512
    h100 = load_topology(str(TOPOLOGIES / "dgx-h100-1024.yaml"))
    assert h100.node.nvlink.gpu_bandwidth_GBps == pytest.approx(370.8)  # 18 × 20.6
    assert h100.node.nics.bandwidth_GBps == pytest.approx(48.0)
    pcie = load_topology(str(TOPOLOGIES / "pcie-a100-8gpu-16.yaml"))
    assert pcie.node.nvlink is None and pcie.node.intra_kind == "pcie"
    assert pcie.node.pcie.sockets == 2 and pcie.node.nics.gpus[1] == (2, 3)


def test_nodes_override():
    t = parse_topology(TINY, "tiny.yaml", nodes=1)
    assert (t.num_nodes, t.num_gpus) == (1, 2)
    assert parse_topology(TINY, "tiny.yaml", nodes=4).num_gpus == 8  # one 4-port leaf per rail
    # 5 nodes do not fit, and the message says where the count came from
    with pytest.raises(InputError, match=r"fabric.levels: .*5 nodes.*from --nodes"):
        parse_topology(TINY, "tiny.yaml", nodes=5)


@pytest.mark.parametrize("edit, where, what", [
    (("nodes: 2", "nodes: 2\nbogus: 1"), "bad.yaml:7: bogus", "unknown key"),
    (("nodes: 2\n", ""), "bad.yaml", "nodes: missing required key"),
    (("bandwidth_gbps: 80}", "bandwidth_gbps: 0}"), "bad.yaml:12: node.nics.bandwidth_gbps",
     "must be > 0, got 0"),
    (("link_bandwidth_GBps: 25", "link_bandwidth_GBps: -3"),
     "bad.yaml:10: node.nvlink.link_bandwidth_GBps", "must be > 0"),
    (("radix: 4}", "radix: 4, colour: red}"), "bad.yaml:17: fabric.levels[0].colour",
     "unknown key"),
    (("nodes: 2", "nodes: 9"), "bad.yaml:16: fabric.levels", "leaf switches"),
    (("- {name: leaf, radix: 4}", "- {name: leaf, radix: 4, oversubscription: 2}\n"
                                  "    - {name: spine, radix: 4}"),
     "bad.yaml:17: fabric.levels[0].oversubscription", "cannot be split 2:1"),
    (("- {name: leaf, radix: 4}", "- {name: leaf, radix: 4, oversubscription: 1}"),
     "fabric.levels[0].oversubscription", "top level has no up-links"),
    (("bandwidth_gbps: 80}", "bandwidth_gbps: 80, gpus: [[0], [0]]}"),
     "node.nics.gpus", "exactly one NIC"),
    (("nics: {count: 2", "nics: {count: 3"), "node.nics.count", "more NICs"),
    (("hbm_GB: 16, ", ""), "node.gpu.hbm_GB", "missing required key"),
    (("collectives: {launch_overhead_ns: 0}", "collectives: {algorithm: magic}"),
     "collectives.algorithm", "unknown algorithm 'magic'"),
])
def test_bad_files_name_file_line_and_key(edit, where, what):
    old, new = edit
    assert old in TINY
    msg = str(_err(TINY.replace(old, new, 1)))
    assert where in msg and what in msg
    assert "\n" not in msg


def test_efficiency_above_one_is_rejected():
    text = TINY.replace("link_bandwidth_gbps: 80", "link_bandwidth_gbps: 80\n  efficiency: 1.2")
    assert "fabric.efficiency: must be ≤ 1" in str(_err(text))


def test_more_than_one_node_needs_a_fabric_and_nics():
    no_fabric = TINY[: TINY.index("fabric:")] + "collectives: {launch_overhead_ns: 0}\n"
    assert "fabric: missing required key (2 nodes need a fabric)" in str(_err(no_fabric))
    no_nics = TINY.replace("nics: {count: 2, bandwidth_gbps: 80}", "nics: {count: 0}")
    assert "node.nics.count: 2 nodes need at least one NIC each" in str(_err(no_nics))


def test_non_rail_leaf_must_hold_whole_nodes():
    text = TINY.replace("rail_optimized: true", "rail_optimized: false").replace(
        "radix: 4}", "radix: 3}")
    assert "fabric.levels[0].radix" in str(_err(text))


def test_not_yaml_and_missing_file(tmp_path):
    assert "bad.yaml:2: not valid YAML" in str(_err("nodes: [1,\n"))
    assert "expected a mapping" in str(_err("- 1\n- 2\n"))
    with pytest.raises(InputError, match="cannot read topology file"):
        load_topology(str(tmp_path / "nope.yaml"))


def test_fabric_capacity_check_counts_rails():
    t = load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml"), nodes=2000)
    assert t.num_gpus == 16000  # 100 leaves per rail × 8 rails fit under 20 × 40 leaves
    with pytest.raises(InputError, match="fabric.levels"):
        load_topology(str(TOPOLOGIES / "dgx-a100-512.yaml"), nodes=101)  # 2 levels: 40 leaves

"""A node's GPU count against its NICs and PCIe switches: without ``node.nics.gpus`` (or
``node.pcie.gpu_switch``) each NIC (switch) serves the same number of consecutive GPUs, so its
count must divide the GPU count; an uneven split is refused naming file, line and key, unless
the file lists which GPUs share one (as the shipped PCIe servers do: 4 NICs for 8 GPUs).

Hand-derived: gb200-nvl72.yaml with ``gpus: 73`` would put GPUs 0 and 1 on NIC 0 (GPU i on NIC
i·72 // 73) and every other GPU on a NIC of its own: silently one shared NIC.
"""

from __future__ import annotations

import pytest
from conftest import TOPOLOGIES

from sim.cli import main
from sim.errors import InputError
from sim.topology import load_topology, parse_topology

NVL72 = (TOPOLOGIES / "gb200-nvl72.yaml").read_text()


def _line(text: str, start: str) -> int:
    """1-based number of the first line of ``text`` that starts (after spaces) with ``start``."""
    return next(i for i, line in enumerate(text.splitlines(), 1)
                if line.lstrip().startswith(start))


def _edit(*pairs: tuple[str, str]) -> str:
    text = NVL72
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new, 1)
    return text


GPUS_73 = ("  gpus: 72\n", "  gpus: 73\n")
SWITCHES_73 = ("    switches: 72", "    switches: 73")


def test_73_gpus_on_72_pcie_switches_is_refused():
    text = _edit(GPUS_73)
    with pytest.raises(InputError) as ei:
        parse_topology(text, "x.yaml")
    msg = str(ei.value)
    assert msg.startswith(f"x.yaml:{_line(text, 'switches:')}: node.pcie.switches: 72 PCIe "
                          "switches for 73 GPUs")
    assert "node.pcie.gpu_switch" in msg and "\n" not in msg


def test_73_gpus_on_72_nics_is_refused():
    text = _edit(GPUS_73, SWITCHES_73)
    with pytest.raises(InputError) as ei:
        parse_topology(text, "x.yaml")
    msg = str(ei.value)
    assert msg.startswith(f"x.yaml:{_line(text, 'count: 72')}: node.nics.count: 72 NICs for 73 "
                          "GPUs (node.gpus)")
    assert "list which GPUs share one in node.nics.gpus" in msg


def test_sharing_declared_in_the_file_is_accepted():
    shared = [[i] for i in range(71)] + [[71, 72]]
    text = _edit(GPUS_73, SWITCHES_73, ("    latency_ns: 600",
                                        f"    latency_ns: 600\n    gpus: {shared}"))
    t = parse_topology(text, "x.yaml")
    assert (t.gpus_per_node, t.node.nics.count) == (73, 72)
    assert t.node.nics.nic_of_gpu(72) == t.node.nics.nic_of_gpu(71) == 71
    assert t.node.nics.nic_of_gpu(1) == 1


def test_equal_blocks_are_the_documented_default():
    # 36 NICs for 72 GPUs: GPUs 2k and 2k+1 on NIC k (docs/topology.md: contiguous blocks)
    t = parse_topology(_edit(("    count: 72", "    count: 36")), "x.yaml")
    assert t.node.nics.gpus[:2] == ((0, 1), (2, 3)) and len(t.node.nics.gpus) == 36
    # the shipped PCIe servers list their shared NICs: 4 NICs for 8 GPUs
    for name in ("pcie-a100-8gpu-16", "jean-zay-a100"):
        t = load_topology(str(TOPOLOGIES / f"{name}.yaml"))
        assert t.node.nics.gpus == ((0, 1), (2, 3), (4, 5), (6, 7))


def test_cli_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "gb200-73.yaml"
    path.write_text(_edit(GPUS_73, SWITCHES_73))
    code = main(["--model", "gpt2-medium", "--topo", str(path), "--tp", "8", "--global-batch",
                 "64"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"gb200-73.yaml:{_line(path.read_text(), 'count: 72')}: node.nics.count" in err[0]

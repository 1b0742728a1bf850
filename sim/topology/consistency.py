"""Physically doubtful combinations in a topology (from its file or from ``--set``).

A value that is valid on its own can still contradict another: a NIC faster than the switch
port it plugs into, or faster than the PCIe link that feeds it. The network model already takes
the slower end of every link (sim/topology/cluster.py: NIC ↔ leaf at the lower of the two line
rates; GPU ↔ NIC through the node's PCIe links), so such a topology simulates what the hardware
would do, but a what-if that raised only one side would silently change nothing. Each case is
therefore stated as a warning (stderr and the report's assumptions). Combinations that cannot be
built at all (an oversubscription the radix cannot split into whole ports, more leaves than the
tree can join) are errors of the reader (sim/topology/load.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: spec imports nothing from here
    from sim.topology.spec import Topology


def physical_warnings(topo: Topology) -> tuple[str, ...]:
    """One sentence per doubtful combination of ``topo`` (empty when consistent)."""
    out = []
    nics, fabric, pcie = topo.node.nics, topo.fabric, topo.node.pcie
    if nics.count and fabric is not None and nics.bandwidth_gbps > fabric.link_bandwidth_gbps:
        out.append(
            f"node.nics.bandwidth_gbps {nics.bandwidth_gbps:g} Gb/s is faster than the fabric's "
            f"ports (fabric.link_bandwidth_gbps {fabric.link_bandwidth_gbps:g} Gb/s): a link "
            "runs at its slower end, so each NIC is simulated at the port's rate; raise "
            "fabric.link_bandwidth_gbps too to model faster NICs")
    if nics.count and nics.bandwidth_gbps / 8.0 > pcie.bandwidth_GBps:
        out.append(
            f"node.nics.bandwidth_gbps {nics.bandwidth_gbps:g} Gb/s "
            f"({nics.bandwidth_gbps / 8.0:g} GB/s) is faster than the PCIe link that feeds each "
            f"NIC (node.pcie.bandwidth_GBps {pcie.bandwidth_GBps:g} GB/s): GPU ↔ NIC traffic is "
            "simulated at the PCIe rate; raise node.pcie.bandwidth_GBps too to model a faster "
            "host interface")
    return tuple(out)

"""Cluster descriptions: topology YAML files, hardware specs, the cluster graph.

- :func:`load_topology` reads and validates a topology file (schema: docs/topology.md).
- :class:`~sim.topology.cluster.Cluster`: links and routes (ECMP / adaptive); the fat-tree
  arithmetic (levels, spans, equal-cost paths) is :class:`~sim.topology.fattree.FatTree`.
- :func:`sim.topology.graph.build_graph`: the same cluster as a networkx graph.
"""

from sim.topology.gpu import GpuSpec
from sim.topology.load import load_topology, parse_topology
from sim.topology.spec import Topology

__all__ = ["GpuSpec", "Topology", "load_topology", "parse_topology"]

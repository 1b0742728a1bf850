"""Fuzzing the topology YAML loader: structured mutations of every shipped topology (values of
the wrong type, negative, zero, huge or non-finite; keys deleted or unknown), text mutations,
wrong encodings and random bytes either load or raise InputError naming the file, the line and
the dotted key — never another exception, never a hang. The small topologies that load are
also turned into a network that times a collective and a send, so a value the loader lets
through cannot crash the network model either."""

from __future__ import annotations

import copy

import simpy
import yaml
from conftest import TOPOLOGIES
from fuzz_support import check_reader, encoded, fuzz_settings, mutated_lines
from hypothesis import given
from hypothesis import strategies as st

from sim.comm import CollKind, GroupKind
from sim.network import build_network
from sim.network.base import CommRequest
from sim.parallel.placement import Placement
from sim.topology.load import load_topology

TOPO_FILES = sorted(TOPOLOGIES.glob("*.yaml"))
TOPO_TEXTS = [p.read_text() for p in TOPO_FILES]
FAULTS = {"slow_gpus": {1: 1.5}, "slow_nodes": {1: 1.2}, "failed_nics": ["0.1"],
          "degraded_links": {"nic:1.0": 0.5, "nvlink:2": 0.25}}  # exercise the faults section
_TINY = yaml.safe_load((TOPOLOGIES / "tiny-2x2.yaml").read_text())
TOPO_TEXTS.append(yaml.safe_dump({**_TINY, "name": "tiny-2x2-faults", "faults": FAULTS},
                                 sort_keys=False))
TOPO_DATA = [yaml.safe_load(t) for t in TOPO_TEXTS]
# Network timing on the small ones (faults sections included).
SMALL = [d for d in TOPO_DATA if d["nodes"] * d["node"]["gpus"] <= 16]

VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 7, 2**31, 2**63, 10**30, 10**400, 0.5, 1e-300, 1e300,
                     float("nan"), float("inf"), -0.0, True, False, None, "", "x", "ring",
                     "auto", "LL", "fat_tree", [], {}, [0, 1], [[0], [1]], {"bf16": 1},
                     {"name": "leaf", "radix": 4}]),
    st.integers(-5, 70), st.floats(allow_nan=True), st.text(max_size=8))
NEW_KEYS = ["nodez", "gpus", "nvlink", "oversubscription", "rail_optimized", "latency_ns",
            "algorithm", "protocol", "fabric", "gpu_switch", "switch", "efficiency", "7"]


def _paths(node, prefix=()):
    """Every (container, key) pair in a parsed YAML tree, in a fixed order."""
    out = []
    if isinstance(node, dict):
        for k in node:
            out.append((prefix, node, k))
            out += _paths(node[k], prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append((prefix, node, i))
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated_topology(draw, seeds, plausible: bool = False) -> str:
    """1–3 mutations of a parsed topology. ``plausible``: mostly rescale numbers (×0.001 …
    ×10^6, keeping integers integral), so many results still load and reach the network."""
    data = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        if not paths:
            break
        ops = ["scale"] * 8 + ["set"] if plausible else ["set", "set", "set", "del", "add"]
        op = draw(st.sampled_from(ops))
        if op == "scale":
            paths = [x for x in paths if isinstance(x[1][x[2]], (int, float))
                     and not isinstance(x[1][x[2]], bool)] or paths
        _, container, key = draw(st.sampled_from(paths))
        old = container[key]
        if op == "scale" and isinstance(old, (int, float)) and not isinstance(old, bool):
            f = draw(st.sampled_from([0.001, 0.5, 2, 3, 1000, 10**6]))
            container[key] = type(old)(old * f) if isinstance(old, float) else max(
                0, int(old * f))
        elif op == "del":
            del container[key]
        elif op == "add" and isinstance(container, dict):
            container[draw(st.sampled_from(NEW_KEYS))] = copy.deepcopy(draw(VALUES))
        else:
            container[key] = copy.deepcopy(draw(VALUES))
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _load(path):
    load_topology(str(path))


def _load_and_time(path):
    """Load, then time collectives over every GPU and a send between the first two, alone and
    at the same time (the contention path)."""
    topo = load_topology(str(path))
    n = topo.num_gpus
    if n > 64 or n < 2:
        return
    net = build_network(topo)
    env = simpy.Environment()
    net.bind(env, Placement(1, n, 1), False)  # every rank simulated
    everyone = tuple(range(n))
    for kind in (CollKind.ALLREDUCE, CollKind.ALLTOALL, CollKind.ALLGATHER):
        for size in (0, 1, 2**33 + 7):
            assert net.isolated(CommRequest(kind, GroupKind.DP, everyone, size)).duration_ns >= 0
    done = [net.start(CommRequest(CollKind.ALLREDUCE, GroupKind.DP, everyone, 2**31 + 1)),
            net.start(CommRequest(CollKind.SENDRECV, GroupKind.PP, (0, n - 1), 2**31 + 1))]
    env.run()
    assert all(ev.processed for ev in done) and env.now >= 0


@fuzz_settings(900)
@given(data=encoded(mutated_topology(TOPO_DATA)))
def test_topology_structured_mutations(tmp_path_factory, data):
    check_reader(_load, tmp_path_factory.mktemp("t") / "topo.yaml", data)


@fuzz_settings(400)
@given(data=mutated_topology(SMALL, plausible=True))
def test_small_topology_mutations_load_and_time(tmp_path_factory, data):
    check_reader(_load_and_time, tmp_path_factory.mktemp("t") / "topo.yaml", data.encode())


@fuzz_settings(700)
@given(data=encoded(mutated_lines(TOPO_TEXTS, None, [
    "&a", "*a", "!!python/object/apply:os.system ['true']", "!!int x", "!!bool x", "2001-13-45",
    "{", "[", "? ", "<<: *a", "---", "nodes: 4", "nodes: 1e400", "gpus: -8", "radix: 0"])))
def test_topology_text_mutations(tmp_path_factory, data):
    check_reader(_load, tmp_path_factory.mktemp("t") / "topo.yaml", data)


@fuzz_settings(200)
@given(data=st.binary(max_size=300))
def test_topology_random_bytes(tmp_path_factory, data):
    check_reader(_load, tmp_path_factory.mktemp("t") / "topo.yaml", data)

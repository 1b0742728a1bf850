"""A real Chakra trace converted from PyTorch (tests/data/chakra-pytorch: Chakra's own feeder
test trace, one rank of a data-parallel ResNet-style step; NOTICE there): every node is
accounted for, the GPU kernels run their durations in launch order and the NCCL collectives run
beside them on the communication stream as a hand-worked timeline says; bad traces of that kind
exit 2 naming file, node and field (sim/workload/chakra_pytorch.py)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("chakra.schema.protobuf.et_def_pb2")

from chakra.schema.protobuf.et_def_pb2 import (  # noqa: E402
    COMM_COLL_NODE,
    COMP_NODE,
    MEM_LOAD_NODE,
    AttributeProto,
    GlobalMetadata,
)
from chakra.schema.protobuf.et_def_pb2 import Node as ChakraNode  # noqa: E402
from chakra.src.third_party.utils.protolib import encodeMessage  # noqa: E402

from sim.cli import main  # noqa: E402
from sim.comm import CollKind, GroupKind  # noqa: E402
from sim.workload.chakra import attrs, read_messages, schema  # noqa: E402
from sim.workload.registry import read_workload  # noqa: E402

DATA = Path(__file__).parent / "data" / "chakra-pytorch"
TOPO = "dgx-a100-1024"
# the trace's 7 NCCL kernels (node id, comm_type, comm_size), read with Chakra's own schema
NCCL = [(435, CollKind.BROADCAST, 212480), (622, CollKind.BROADCAST, 424),
        (3256, CollKind.ALLREDUCE, 8196000), (3512, CollKind.ALLREDUCE, 31502336),
        (3686, CollKind.ALLREDUCE, 26255360), (4486, CollKind.ALLREDUCE, 26550272),
        (5700, CollKind.ALLREDUCE, 9724160)]


@pytest.fixture(scope="module")
def ranks8(tmp_path_factory) -> Path:
    """The shipped trace as 8 ranks of the same data-parallel job (the same bytes each)."""
    out = tmp_path_factory.mktemp("resnet")
    with tarfile.open(DATA / "feeder_tests_trace.tar.gz") as tar:
        member = tar.getmember("tests/data/chakra.0.et")
        src = tar.extractfile(member).read()
    for r in range(8):
        (out / f"chakra.{r}.et").write_bytes(src)
    return out


def _nodes(folder: Path):
    return read_messages((folder / "chakra.0.et").read_bytes(), "f", schema("x"))[1]


def test_every_node_is_accounted_for(ranks8):
    nodes = _nodes(ranks8)
    host = [n for n in nodes if attrs(n)["is_cpu_op"]]
    kernels = sorted((n for n in nodes if not attrs(n)["is_cpu_op"] and n.type == COMP_NODE),
                     key=lambda n: n.id)
    nccl = [n for n in nodes if not attrs(n)["is_cpu_op"] and n.type == COMM_COLL_NODE]
    assert (len(nodes), len(host), len(kernels), len(nccl)) == (3664, 2448, 1209, 7)
    w = read_workload(ranks8)
    assert w.header.all_gpus == 8 and (w.header.tp, w.header.pp) == (1, 1)
    rows = list(reversed(w.layers))  # held as one backward pass: launch order reversed
    assert sum(r.weight_grad.compute_ns for r in rows) == \
        sum(n.duration_micros for n in kernels) * 1000 == 292_828_000
    comms = [r.weight_grad.comm for r in rows if r.weight_grad.comm is not None]
    assert [(c.kind, c.size_bytes) for c in comms] == [(k, s) for _i, k, s in NCCL]
    assert all(c.group is GroupKind.DP and not c.blocking for c in comms)
    assert any("2448 host (is_cpu_op) nodes" in a for a in w.assumptions)


def test_iteration_is_the_hand_worked_timeline(ranks8, tmp_path):
    # NCCL channels 0: a collective beside compute takes no SMs from it. The kernels run back
    # to back (292.828 ms); each collective starts when the kernel launched before it ends (or
    # when the one before it on the stream ends), FIFO, and all end before the last kernel
    rc = main(["--workload", str(ranks8), "--topo", TOPO, "--nodes", "1", "--nccl-channels",
               "0", "--trace", str(tmp_path / "t.json"), "--json", str(tmp_path / "r.json"),
               "--quiet"])
    assert rc == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert round(report["iteration_time_s"] * 1e9) == 292_828_000
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    spans = sorted((e for e in events if e.get("cat") == "comm_async"), key=lambda e: e["ts"])
    kernels = sorted((n for n in _nodes(ranks8)
                      if not attrs(n)["is_cpu_op"] and n.type == COMP_NODE), key=lambda n: n.id)
    end = 0.0
    for (nid, _k, size), span in zip(NCCL, spans, strict=True):
        issue = sum(k.duration_micros for k in kernels if k.id < nid)  # µs
        assert span["ts"] == pytest.approx(max(issue, end), abs=1e-3)
        assert span["args"]["bytes"] == size and span["dur"] > 0
        end = span["ts"] + span["dur"]
    assert end < 292_828


def test_sm_interference_shows_as_exposed_comm(ranks8, tmp_path):
    # the default: each collective's kernel takes SMs from the kernels beside it, so the
    # iteration is the kernels' 292.828 ms plus the data-parallel time that slowed them
    rc = main(["--workload", str(ranks8), "--topo", TOPO, "--nodes", "1", "--json",
               str(tmp_path / "r.json"), "--quiet"])
    assert rc == 0
    report = json.loads((tmp_path / "r.json").read_text())
    exposed = report["stages"][0]["exposed_comm_s"]["DP"]
    assert exposed > 0
    assert report["iteration_time_s"] == pytest.approx(0.292828 + exposed, abs=1e-9)


def _pytorch_trace(folder: Path, nodes: list[ChakraNode]) -> Path:
    folder.mkdir()
    with open(folder / "t.0.et", "wb") as et:
        meta = GlobalMetadata(version="0.0.4")
        meta.attr.append(AttributeProto(name="schema", string_val="1.0.1"))
        meta.attr.append(AttributeProto(name="pid", uint64_val=1))
        encodeMessage(et, meta)
        for n in nodes:
            encodeMessage(et, n)
    return folder


def _node(nid, kind, micros=5, cpu=False, tid=7, deps=(), **extra) -> ChakraNode:
    n = ChakraNode(id=nid, name=f"n{nid}", type=kind, duration_micros=micros)
    n.attr.append(AttributeProto(name="is_cpu_op", bool_val=cpu))
    n.attr.append(AttributeProto(name="tid", int64_val=tid))
    for k, v in extra.items():
        n.attr.append(AttributeProto(name=k, int64_val=v) if isinstance(v, int)
                      else AttributeProto(name=k, string_val=v))
    n.data_deps.extend(deps)
    return n


def test_a_collective_the_next_kernel_waits_for_blocks_it(tmp_path):
    # host op 1 launches kernel 2; NCCL kernel 3 (stream 14); kernel 4 waits for it through
    # host op 5: the all-reduce blocks kernel 4 (ctrl_deps name parents: irrelevant)
    ar = dict(comm_type=0, comm_size=1 << 20)
    folder = _pytorch_trace(tmp_path / "b", [
        _node(1, COMP_NODE, 100, cpu=True), _node(2, COMP_NODE, 5, deps=[1]),
        _node(3, COMM_COLL_NODE, 50, tid=14, deps=[1], **ar),
        _node(5, COMP_NODE, 100, cpu=True, deps=[3]), _node(6, COMP_NODE, 7, deps=[5])])
    rows = list(reversed(read_workload(folder).layers))
    assert [r.weight_grad.compute_ns for r in rows] == [5_000, 7_000]
    assert rows[0].weight_grad.comm.blocking and rows[1].weight_grad.comm is None


@pytest.mark.parametrize("nodes, field, words", [
    ([_node(1, COMP_NODE), _node(2, COMP_NODE, tid=9)], "node 1", "two streams"),
    ([_node(1, COMP_NODE), _node(2, MEM_LOAD_NODE)], "node 1", "MEM_LOAD_NODE"),
    ([_node(1, COMP_NODE, comm_priority=1)], "node 0", "attribute comm_priority"),
    ([_node(1, COMP_NODE, deps=[77])], "node 0", "node id 77"),
    ([_node(1, COMP_NODE, deps=[2]), _node(2, COMP_NODE)], "node 0", "launched after it"),
    ([_node(1, COMM_COLL_NODE, tid=14, comm_type=1, comm_size=8)], "node 0", "REDUCE"),
    ([_node(1, COMM_COLL_NODE, tid=14, comm_type=0, comm_size=8, pg_name="7")], "node 0",
     "pg_name"),
    ([_node(1, COMP_NODE), _node(2, COMM_COLL_NODE, tid=14, comm_type=0, comm_size=8),
      _node(3, COMP_NODE), _node(4, COMP_NODE, deps=[2])], "node 3", "collective node 1"),
])
def test_bad_pytorch_traces_exit_2_naming_node(tmp_path, capsys, nodes, field, words):
    folder = _pytorch_trace(tmp_path / "bad", nodes)
    rc = main(["--workload", str(folder), "--topo", TOPO, "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"t.0.et: {field}: " in err and words in err, err


def test_involved_dim_leaving_a_dimension_out_is_refused(tmp_path, capsys):
    n = _node(1, COMM_COLL_NODE, tid=14, comm_type=0, comm_size=8)
    dims = AttributeProto(name="involved_dim")
    dims.bool_list.values.extend([True, False])
    n.attr.append(dims)
    folder = _pytorch_trace(tmp_path / "dim", [n])
    rc = main(["--workload", str(folder), "--topo", TOPO, "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "t.0.et: node 0: involved_dim" in err, err


def test_dependency_cycles_and_the_link_bound_are_refused(tmp_path, capsys, monkeypatch):
    # host nodes 1 and 2 depend on each other: a cycle, named at the node it closes on
    cyc = _pytorch_trace(tmp_path / "cyc", [
        _node(1, COMP_NODE, cpu=True, deps=[2]), _node(2, COMP_NODE, cpu=True, deps=[1]),
        _node(3, COMP_NODE, deps=[2])])
    assert main(["--workload", str(cyc), "--topo", TOPO, "--nodes", "1", "--quiet"]) == 2
    assert "t.0.et: node " in (err := capsys.readouterr().err) and "cycle" in err, err
    # host node k waits for host node k-1 and kernel k: the links grow as k²/2
    from sim.workload import chakra_pytorch
    monkeypatch.setattr(chakra_pytorch, "MAX_LINKS", 100)
    nodes = []
    for k in range(20):
        nodes.append(_node(100 + k, COMP_NODE, deps=[200 + k - 1] if k else []))
        nodes.append(_node(200 + k, COMP_NODE, cpu=True,
                           deps=[100 + k, *([200 + k - 1] if k else [])]))
    big = _pytorch_trace(tmp_path / "big", nodes)
    assert main(["--workload", str(big), "--topo", TOPO, "--nodes", "1", "--quiet"]) == 2
    assert "over 100 links" in capsys.readouterr().err


def test_host_only_pytorch_trace_converted_by_chakra_is_refused_naming_why(tmp_path, capsys):
    # Chakra's own PyTorch execution-trace JSON (host side only: ten all-gathers of a
    # 2-rank group), converted by Chakra's own converter (`chakra_converter PyTorch`) with no
    # Kineto trace linked: every node is a host node, so there is no GPU work to time
    from chakra.src.converter.pytorch_converter import PyTorchConverter

    with tarfile.open(DATA / "1.0.2-chakra.0.0.4.tgz") as tar:
        (tmp_path / "et.json").write_bytes(
            tar.extractfile("1.0.2-chakra.0.0.4.json").read())
    (tmp_path / "et").mkdir()
    PyTorchConverter().convert(str(tmp_path / "et.json"), str(tmp_path / "et" / "host.0.et"),
                               False)
    nodes = _nodes_of(tmp_path / "et" / "host.0.et")
    assert len(nodes) == 262 and all(attrs(n)["is_cpu_op"] for n in nodes)
    rc = main(["--workload", str(tmp_path / "et"), "--topo", TOPO, "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "host.0.et: nodes: no GPU (is_cpu_op false)" in err and "Kineto" in err, err


def _nodes_of(path: Path):
    return read_messages(path.read_bytes(), str(path), schema("x"))[1]


def _pg_trace(folder: Path, ranks: int, pg: str) -> Path:
    """As the current converter writes one (mlc-chakra 1.0.0): PyTorch's process-group record
    as a metadata node (the JSON list its ``## process_group:init ##`` operator takes), GPU
    nodes with ``stream``, an all-reduce of 1 MiB in process group ``pg``."""
    from chakra.schema.protobuf.et_def_pb2 import METADATA_NODE

    init = _node(1, METADATA_NODE, cpu=True, tid=1)
    init.name = "## process_group:init ##"
    init.inputs.values = str(['[{"pg_name": "0", "backend_id": 1, "backend_config": '
                              '"cuda:nccl", "ranks": [], "group_size": 2, "group_count": 1}]'])
    nodes = [init, _node(2, COMP_NODE, 5, stream=7),
             _node(3, COMM_COLL_NODE, 50, tid=14, stream=14, comm_type=0, comm_size=1 << 20,
                   pg_name=pg),
             _node(4, COMP_NODE, 7, stream=7)]
    _pytorch_trace(folder, nodes)
    for r in range(1, ranks):
        (folder / f"t.{r}.et").write_bytes((folder / "t.0.et").read_bytes())
    return folder


def test_process_group_of_every_rank_is_the_data_parallel_group(tmp_path, capsys):
    rows = list(reversed(read_workload(_pg_trace(tmp_path / "ok", 2, "0")).layers))
    c = rows[0].weight_grad.comm
    assert (c.kind, c.group, c.size_bytes, c.blocking) == \
        (CollKind.ALLREDUCE, GroupKind.DP, 1 << 20, False)
    assert [r.weight_grad.compute_ns for r in rows] == [5_000, 7_000]
    # group "0" has 2 ranks: over a folder of 4 it is part of them; "9" is not declared
    for folder, words in ((_pg_trace(tmp_path / "four", 4, "0"), "a group of 2 ranks"),
                          (_pg_trace(tmp_path / "nine", 2, "9"), "pg_name '9' is not in")):
        rc = main(["--workload", str(folder), "--topo", TOPO, "--nodes", "1", "--quiet"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "t.0.et: node 2: " in err and words in err, err


def test_a_damaged_process_group_record_names_its_node(tmp_path, capsys):
    folder = _pg_trace(tmp_path / "bad", 2, "0")
    data = (folder / "t.0.et").read_bytes().replace(b'"group_size": 2', b'"group_size": 0')
    for r in (0, 1):
        (folder / f"t.{r}.et").write_bytes(data)
    rc = main(["--workload", str(folder), "--topo", TOPO, "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "t.0.et: node 0: ## process_group:init ##" in err, err

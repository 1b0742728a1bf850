"""Fuzzing the reader of Chakra traces converted from PyTorch (sim/workload/chakra_pytorch.py):
random node graphs — host and GPU nodes, compute, collective and other types, dependencies
forward, backward, dangling or cyclic, known and unknown attributes — either read into a
workload whose compute is the GPU kernels' durations, or raise InputError naming the file and
a node; never another exception, never a hang."""

from __future__ import annotations

import pytest
from fuzz_support import alarm, check_error, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("chakra.schema.protobuf.et_def_pb2")

from chakra.schema.protobuf.et_def_pb2 import AttributeProto  # noqa: E402
from chakra.schema.protobuf.et_def_pb2 import Node as ChakraNode  # noqa: E402
from test_chakra_pytorch import _pytorch_trace as pytorch_trace  # noqa: E402

from sim.errors import InputError  # noqa: E402
from sim.workload.chakra import read_chakra  # noqa: E402

NODE = st.fixed_dictionaries({
    "type": st.sampled_from([4, 4, 4, 7, 7, 1, 5, 0]),  # COMP, COLL, METADATA, SEND, INVALID
    "cpu": st.booleans(),
    "micros": st.integers(0, 10**6),
    "tid": st.sampled_from([7, 7, 14, 9]),
    "deps": st.lists(st.integers(-2, 10), max_size=3),  # relative: earlier, later, dangling
    "comm_type": st.sampled_from([0, 0, 1, 2, 5, 6, 7, 99]),
    "comm_size": st.integers(-1, 1 << 30),
    "extra": st.sampled_from([None, None, None, "op_schema", "comm_priority", "pg_name"]),
})


def _write(folder, nodes) -> None:
    chakra = []
    for i, d in enumerate(nodes):
        n = ChakraNode(id=10 + i, name=f"n{i}", type=d["type"], duration_micros=d["micros"])
        n.attr.append(AttributeProto(name="is_cpu_op", bool_val=d["cpu"]))
        n.attr.append(AttributeProto(name="tid", int64_val=d["tid"]))
        if d["type"] == 7:
            n.attr.append(AttributeProto(name="comm_type", int64_val=d["comm_type"]))
            n.attr.append(AttributeProto(name="comm_size", int64_val=d["comm_size"]))
        if d["extra"]:
            n.attr.append(AttributeProto(name=d["extra"], string_val="DP"))
        n.data_deps.extend(10 + i - r for r in d["deps"] if r)
        chakra.append(n)
    pytorch_trace(folder, chakra)


@fuzz_settings(150)
@given(nodes=st.lists(NODE, min_size=1, max_size=12))
def test_random_pytorch_traces_read_or_name_file_and_node(tmp_path_factory, nodes):
    folder = tmp_path_factory.mktemp("fz") / "et"
    _write(folder, nodes)
    file = str(folder / "t.0.et")
    try:
        with alarm(20):
            w = read_chakra(folder)
    except InputError as e:
        check_error(e, file)
        assert e.field.startswith("node ") or e.field == "nodes", str(e)
        return
    gpu = sum(d["micros"] for d in nodes if d["type"] == 4 and not d["cpu"]) * 1000
    assert sum(lay.weight_grad.compute_ns for lay in w.layers) == gpu

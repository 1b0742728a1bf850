"""Chakra execution traces (sim/workload/chakra.py, chakra_write.py; the 'chakra' extra):
a trace simrun writes reads back to the same iteration, to the ns; Chakra's own generator's
traces (compute and collective microbenchmarks) read as what they hold; bad traces exit 2
naming the file and node; without the extra, the flag names it."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import WORKLOADS

pytest.importorskip("chakra.schema.protobuf.et_def_pb2")

from chakra.src.converter.text_converter import TextConverter  # noqa: E402
from chakra.src.generator import generator  # noqa: E402

from sim.api import LayoutRequest, prepare_workload, run  # noqa: E402
from sim.cli import main  # noqa: E402
from sim.comm import CollKind, GroupKind  # noqa: E402
from sim.workload.chakra_write import write_chakra  # noqa: E402
from sim.workload.registry import read_workload  # noqa: E402

SEED = WORKLOADS / "aicb-gpt13b-tp8-pp8-512gpu.txt"
TOPO = "dgx-a100-1024"


@pytest.mark.slow
def test_a_trace_simrun_writes_reads_back_to_the_same_iteration_ns(tmp_path):
    # SimAI/AICB GPT-13B seed (TP 8, PP 8) on 64 GPUs: 64 rank files
    done = run(prepare_workload(str(SEED), TOPO, LayoutRequest(gpus=64), nodes=8))
    paths = write_chakra(tmp_path / "et", done.result.program)
    assert [p.name for p in paths[:2]] == ["simrun.0.et", "simrun.1.et"] and len(paths) == 64
    back = run(prepare_workload(str(tmp_path / "et"), TOPO, LayoutRequest(), nodes=8))
    assert back.iteration_ns == done.iteration_ns
    # the rows as the file has them (only the source line numbers are not carried)
    assert read_workload(tmp_path / "et").layers == \
        [replace(lay, line=0) for lay in read_workload(SEED).layers]


def _generated(tmp_path, monkeypatch, make, *args) -> Path:
    """A folder holding the traces of one of Chakra's generator functions (8 NPUs)."""
    folder = tmp_path / make.__name__
    folder.mkdir()
    monkeypatch.chdir(folder)
    make(8, *args)
    return folder


def test_chakra_generator_compute_traces_run_their_durations(tmp_path, monkeypatch):
    one = _generated(tmp_path, monkeypatch, generator.one_comp_node, 5)
    two = _generated(tmp_path, monkeypatch, generator.two_comp_nodes_dependent, 5)
    for folder, expected_ns in ((one, 5_000), (two, 10_000)):  # duration_micros 5 each
        w = read_workload(folder)
        assert (w.header.tp, w.header.pp, w.header.all_gpus) == (1, 1, 8)
        out = run(prepare_workload(str(folder), TOPO, LayoutRequest(), nodes=1))
        assert out.iteration_ns == expected_ns


@pytest.mark.parametrize("make, kind", [
    (generator.one_comm_coll_node_allreduce, CollKind.ALLREDUCE),
    (generator.one_comm_coll_node_allgather, CollKind.ALLGATHER),
    (generator.one_comm_coll_node_reducescatter, CollKind.REDUCESCATTER),
    (generator.one_comm_coll_node_alltoall, CollKind.ALLTOALL),
])
def test_chakra_generator_collective_is_one_collective_over_every_rank(tmp_path, monkeypatch,
                                                                       make, kind):
    folder = _generated(tmp_path, monkeypatch, make, 65536)
    (row,) = read_workload(folder).layers
    assert row.forward.compute_ns == 0
    c = row.forward.comm
    assert (c.kind, c.group, c.size_bytes, c.blocking) == (kind, GroupKind.DP, 65536, True)
    out = run(prepare_workload(str(folder), TOPO, LayoutRequest(), nodes=1))
    assert out.result.program.dp == 8
    # nothing else runs: the iteration is the collective, all of it exposed
    assert out.report["stages"][0]["exposed_comm_s"]["DP"] * 1e9 == \
        pytest.approx(out.iteration_ns, abs=1)


def test_chakra_text_converter_data_parallel_trace_is_refused_naming_the_node(tmp_path,
                                                                            capsys):
    # Chakra's own converter of ASTRA-sim text workloads: its DATA pass issues each gradient
    # all-reduce alongside the next layer's backward, which simrun does not read
    text = tmp_path / "dp.txt"
    text.write_text("DATA\n2\n"
                    "l0 -1 10 NONE 0 10 NONE 0 10 ALLREDUCE 1024 10\n"
                    "l1 -1 10 NONE 0 10 NONE 0 10 ALLREDUCE 1024 10\n")
    (tmp_path / "et").mkdir()
    TextConverter(str(text), str(tmp_path / "et" / "dp"), 4, 1).convert()
    rc = main(["--workload", str(tmp_path / "et"), "--topo", TOPO, "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "dp.0.et" in err and "node 3" in err and "alongside" in err, err
    # the nodes: l0 fwd, l1 fwd, l1 wg comp, l1 wg comm (node 3), l1 ig comp (no dependency)


def test_truncated_protobuf_exits_2_naming_file_and_node(tmp_path, monkeypatch, capsys):
    folder = _generated(tmp_path, monkeypatch, generator.two_comp_nodes_dependent, 5)
    f = folder / "two_comp_nodes_dependent.3.et"
    f.write_bytes(f.read_bytes()[:-3])
    rc = main(["--workload", str(folder), "--topo", TOPO, "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert f"{f}: node 1: truncated" in err, err


def test_missing_extra_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "chakra.schema.protobuf", None)
    rc = main(["--workload", str(SEED), "--topo", TOPO, "--chakra", str(tmp_path / "et"),
               "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--chakra" in err and "simrun[chakra]" in err, err
    assert not os.path.exists(tmp_path / "et")


def test_chakra_text_converter_model_parallel_trace_runs_its_dag(tmp_path, monkeypatch):
    # Chakra's converter of an ASTRA-sim MODEL-parallel text (2 layers, 10 µs per phase,
    # 1 KiB all-reduces, 4 NPUs): fwd0, AR, fwd1, AR, ig1, then AR(ig1) beside wg1, then ig0,
    # wg0 — the layer-0 input-gradient all-reduce is not written (nothing reads it)
    text = tmp_path / "mp.txt"
    text.write_text("MODEL\n2\n"
                    "l0 -1 10 ALLREDUCE 1024 10 ALLREDUCE 1024 10 ALLREDUCE 1024 10\n"
                    "l1 -1 10 ALLREDUCE 1024 10 ALLREDUCE 1024 10 ALLREDUCE 1024 10\n")
    (tmp_path / "et").mkdir()
    TextConverter(str(text), str(tmp_path / "et" / "mp"), 4, 1).convert()
    ar = _generated(tmp_path, monkeypatch, generator.one_comm_coll_node_allreduce, 1024)
    for f in ar.glob("*.et"):  # the same all-reduce over 4 ranks alone
        if int(f.name.split(".")[1]) >= 4:
            f.unlink()
    t_ar = run(prepare_workload(str(ar), TOPO, LayoutRequest(), nodes=1)).iteration_ns
    rows = read_workload(tmp_path / "et").layers
    assert [r.forward.comm is not None and r.forward.comm.overlap for r in rows] == \
        [False, False, False, True, False, False]
    it = run(prepare_workload(str(tmp_path / "et"), TOPO, LayoutRequest(), nodes=1)).iteration_ns
    # 5 compute phases of 10 µs in sequence, 2 blocking all-reduces, and the one beside wg1,
    # which outlasts the 10 µs weight gradient
    assert t_ar > 10_000
    assert it == 50_000 + 3 * t_ar


def test_a_model_run_is_written_as_simrun_generate_writes_it(tmp_path):
    # --model: the rows are the program's AICB rows; read back, the Chakra folder and the
    # AICB text (simrun generate) give the same iteration
    from sim.api import prepare_model
    from sim.models.aicb_writer import aicb_text
    prog = run(prepare_model("gpt-1.7b", TOPO, LayoutRequest(tp=2, pp=2, microbatches=4),
                             nodes=1)).result.program
    write_chakra(tmp_path / "et", prog)
    (tmp_path / "g.txt").write_text(aicb_text(prog))
    times = [run(prepare_workload(str(p), TOPO, LayoutRequest(), nodes=1)).iteration_ns
             for p in (tmp_path / "et", tmp_path / "g.txt")]
    assert times[0] == times[1] > 0


@pytest.mark.parametrize("cut", [1, 7, 20, 33])
def test_damaged_traces_are_one_line_errors(tmp_path, monkeypatch, capsys, cut):
    folder = _generated(tmp_path, monkeypatch, generator.one_comm_coll_node_allreduce, 4096)
    for f in folder.glob("*.et"):
        data = bytearray(f.read_bytes())
        data[min(cut, len(data) - 1)] ^= 0xFF  # one flipped byte in every rank's file
        f.write_bytes(bytes(data))
    rc = main(["--workload", str(folder), "--topo", TOPO, "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "ALL_REDUCE.0.et: " in err and ("GlobalMetadata: " in err or "node 0: " in err), err


def _trace_with_host_nodes(folder: Path, host: bool) -> None:
    """Two GPU kernels (5 and 7 µs), the second after the first; with ``host``, a CPU-side
    operator (100 µs, ``is_cpu_op``) between them, as a trace converted from PyTorch has:
    the second kernel waits for it, it waits for the first."""
    from chakra.schema.protobuf.et_def_pb2 import COMP_NODE, AttributeProto, GlobalMetadata
    from chakra.schema.protobuf.et_def_pb2 import Node as ChakraNode
    from chakra.src.third_party.utils.protolib import encodeMessage

    folder.mkdir()
    for rank in range(2):
        with open(folder / f"host.{rank}.et", "wb") as et:
            encodeMessage(et, GlobalMetadata(version="0.0.4"))
            nodes = [(0, 5, False, []), (1, 100, True, [0]), (2, 7, False, [1] if host else [0])]
            for nid, micros, cpu, deps in nodes:
                if cpu and not host:
                    continue
                n = ChakraNode(id=nid, name=f"n{nid}", type=COMP_NODE, duration_micros=micros)
                n.attr.append(AttributeProto(name="is_cpu_op", bool_val=cpu))
                n.data_deps.extend(deps)
                encodeMessage(et, n)


def test_host_nodes_are_dependencies_taking_no_gpu_time(tmp_path):
    _trace_with_host_nodes(tmp_path / "with", host=True)
    _trace_with_host_nodes(tmp_path / "without", host=False)
    w = read_workload(tmp_path / "with")
    assert [lay.forward.compute_ns for lay in w.layers] == [5_000, 7_000]
    assert any("1 host (is_cpu_op) compute nodes" in a for a in w.assumptions)
    ns = [run(prepare_workload(str(tmp_path / d), TOPO, LayoutRequest(), nodes=1)).iteration_ns
          for d in ("with", "without")]
    assert ns == [12_000, 12_000]


def test_a_non_blocking_forward_collective_is_refused_naming_the_node(tmp_path, capsys):
    # the engine issues non-blocking collectives in the last backward only: one marked
    # non-blocking in a forward phase would never run, so it is refused, not dropped
    from chakra.schema.protobuf.et_def_pb2 import COMM_COLL_NODE, GlobalMetadata
    from chakra.schema.protobuf.et_def_pb2 import Node as ChakraNode
    from chakra.src.third_party.utils.protolib import decodeMessage, encodeMessage

    from sim.api import prepare_model
    prog = run(prepare_model("gpt-1.7b", TOPO, LayoutRequest(tp=2, pp=1, microbatches=2),
                             nodes=1)).result.program
    folder = tmp_path / "et"
    write_chakra(folder, prog)
    for f in sorted(folder.glob("*.et")):
        with open(f, "rb") as src:
            meta = GlobalMetadata()
            decodeMessage(src, meta)
            nodes = []
            while True:
                n = ChakraNode()
                if not decodeMessage(src, n):
                    break
                nodes.append(n)
        forward = [n for n in nodes if n.type == COMM_COLL_NODE
                   and any(a.name == "simrun_phase" and a.string_val == "forward" for a in n.attr)]
        first = forward[0]
        next(a for a in first.attr if a.name == "simrun_blocking").bool_val = False
        with open(f, "wb") as out:
            encodeMessage(out, meta)
            for n in nodes:
                encodeMessage(out, n)
    rc = main(["--workload", str(folder), "--topo", TOPO, "--nodes", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"node {nodes.index(first)}.simrun_blocking" in err and "forward" in err, err

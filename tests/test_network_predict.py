"""``simrun collective``: the nccl-tests-style predictor (sizes, definitions, JSON, errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, TOPOLOGIES

from sim.cli import main as simrun
from sim.cli.collective import main
from sim.errors import InputError, UsageError
from sim.network.predict import parse_sizes

DGX = str(TOPOLOGIES / "dgx-a100-1024.yaml")
TINY = str(TOPOLOGIES / "tiny-2x2.yaml")


def test_sizes_double_like_nccl_tests():
    assert parse_sizes("8:8G") == [8 << i for i in range(31)]
    assert parse_sizes("1K:4K") == [1024, 2048, 4096]
    assert parse_sizes("16M") == [16 << 20]
    assert parse_sizes("3:20") == [3, 6, 12]
    for bad in ("0:8", "8:4", "x", "8:1T", "-1:8"):
        with pytest.raises(UsageError, match="sizes"):
            parse_sizes(bad)


def test_table_and_json(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert main(["--topo", TINY, "--op", "allreduce", "--gpus", "4", "--sizes", "1M:4M",
                 "--algorithm", "ring", "--protocol", "Simple", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "allreduce over 4 GPUs (2 nodes of 2)" in text
    assert "size_bytes" in text and "time_us" in text and "busbw_GBps" in text
    rows = json.loads(out.read_text())
    assert [list(r) for r in rows] == [["size_bytes", "time_s", "algbw_GBps", "busbw_GBps",
                                        "algorithm"]] * 3
    assert [r["size_bytes"] for r in rows] == [1 << 20, 2 << 20, 4 << 20]
    for r in rows:
        # nccl-tests definitions: algbw = S / t, busbw = algbw · 2(n−1)/n
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 1.5)
        assert r["algorithm"] == "ring/Simple"
    # hand-worked (tiny-2x2, see test_collective_alphabeta): 0.75 S / 10 GB/s + 70 µs + 6 step
    # overheads of 1.04 µs (a ring has no pipeline ramp)
    S = 4 << 20
    assert rows[2]["time_s"] == pytest.approx((0.75 * S / 10 + 70_000 + 6 * 1040) * 1e-9)
    # the table prints the same numbers
    assert f"{rows[2]['time_s'] * 1e6:.2f}" in text
    assert not list(tmp_path.glob(".*tmp"))  # written atomically: no temp file left


def test_gpus_beyond_one_node_span_nodes():
    def row(gpus: int) -> dict:
        from sim.network import build_network
        from sim.network.predict import predict_rows
        from sim.topology import load_topology

        topo = load_topology(DGX)
        return predict_rows("allreduce", gpus, [1 << 30], build_network(topo))[0]

    one, two = row(8), row(16)
    assert one["busbw_GBps"] > 200 > two["busbw_GBps"] > 170  # NVLink vs 8 HDR NICs


@pytest.mark.parametrize("op, factor", [("allgather", 7 / 8), ("reducescatter", 7 / 8),
                                        ("alltoall", 7 / 8), ("broadcast", 1.0),
                                        ("sendrecv", 1.0)])
def test_every_op_and_its_busbw_factor(tmp_path, op, factor):
    out = tmp_path / "r.json"
    assert main(["--topo", DGX, "--op", op, "--gpus", "8", "--sizes", "64M",
                 "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())
    assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * factor)
    assert 0 < r["time_s"] < 0.01


def test_sendrecv_ring_of_pairs_runs_concurrently(tmp_path):
    # nccl-tests sendrecv: every rank sends to the next at once; across 2 DGX nodes each
    # transfer gets a full HDR NIC (own rail), so busbw ≈ 24 GB/s, not 24/16
    out = tmp_path / "r.json"
    main(["--topo", DGX, "--op", "sendrecv", "--gpus", "16", "--sizes", "1G", "--json",
          str(out)])
    (r,) = json.loads(out.read_text())
    assert r["busbw_GBps"] == pytest.approx(24, rel=0.02)


@pytest.mark.parametrize("argv, err, what", [
    (["--topo", DGX, "--gpus", "1"], InputError, "--gpus"),
    (["--topo", DGX, "--gpus", "2000"], InputError, "--gpus"),
    (["--topo", DGX, "--op", "reduce"], UsageError, "invalid choice"),
    (["--topo", DGX, "--algorithm", "magic"], UsageError, "algorithm"),
    (["--topo", DGX, "--algorithm", "allreduce=magic"], UsageError, "algorithm"),
    (["--topo", DGX, "--nodes", "0"], InputError, "--nodes"),
    (["--topo", "nope.yaml"], InputError, "nope.yaml"),
    (["--gpus", "8"], UsageError, "--topo"),
])
def test_bad_input(argv, err, what):
    with pytest.raises(err, match=what):
        main(argv)


def test_through_the_simrun_cli(capsys, tmp_path):
    assert simrun(["collective", "--topo", DGX, "--gpus", "8", "--sizes", "8"]) == 0
    assert "ring/LL" in capsys.readouterr().out
    assert simrun(["collective", "--topo", DGX, "--gpus", "1"]) == 2
    assert "--gpus" in capsys.readouterr().err
    assert simrun(["collective", "--topo", str(tmp_path / "x.yaml")]) == 2


def test_output_is_byte_identical_across_runs_and_hash_seeds(tmp_path):
    outs = []
    for seed in ("1", "999"):
        p = tmp_path / f"{seed}.json"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-m", "sim.cli", "collective", "--topo",
                        str(TOPOLOGIES / "dgx-a100-1024-oversub4.yaml"), "--gpus", "512",
                        "--op", "allgather", "--sizes", "1M:1G", "--json", str(p)],
                       cwd=ROOT, env=env, check=True, capture_output=True)
        outs.append(p.read_bytes())
    assert outs[0] == outs[1]

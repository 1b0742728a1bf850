"""nccl-tests output as a network measurement (sim/calibration/nccl_tests.py): simrun's own
`collective` prediction, slowed by a known bus-bandwidth factor and written in nccl-tests'
table format, gives that factor back; malformed tables are refused with file and line."""

import pytest

from sim.calibration.nccl_tests import fit_network, parse_nccl_tests
from sim.cli import main
from sim.errors import InputError
from sim.network.predict import predict_rows
from sim.scenario import NetworkOptions, network_of
from sim.topology import load_topology

TOPO = "dgx-a100-1024"
HEAD = ("#                                                              out-of-place"
        "                       in-place          \n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       \n")


def nccl_tests_text(rows, factor, ranks=8, gpu="NVIDIA A100-SXM4-80GB", drop_column=None):
    """nccl-tests all_reduce_perf output whose times are simrun's divided by ``factor``
    (the bus bandwidth reached is ``factor`` times the modelled one at large sizes)."""
    out = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5",
           "# Collective test starting: all_reduce_perf", "#", "# Using devices"]
    out += [f"#  Rank {r:2d} Group  0 Pid  1000 on node0 device {r:2d} [0x07] {gpu}"
            for r in range(ranks)]
    text = "\n".join(out) + "\n" + HEAD
    for r in rows:
        t_us = r["time_s"] * 1e6 / factor
        algbw = r["size_bytes"] / (t_us * 1e-6) / 1e9
        busbw = algbw * 2 * (ranks - 1) / ranks
        cells = [f"{r['size_bytes']:12d}", f"{r['size_bytes'] // 4:13d}", "    float", "   sum",
                 "     -1", f"{t_us:8.2f}", f"{algbw:7.2f}", f"{busbw:7.2f}", "     0",
                 f"{t_us:8.2f}", f"{algbw:7.2f}", f"{busbw:7.2f}", "     0"]
        if drop_column is not None:
            del cells[drop_column]
        text += " ".join(cells) + "\n"
    return text + "# Out of bounds values : 0 OK\n"


def _rows(sizes, ranks=8):
    topo = load_topology(TOPO, nodes=max(1, ranks // 8))
    return topo, predict_rows("allreduce", ranks, sizes, network_of(topo, NetworkOptions()))


@pytest.mark.parametrize("factor", [0.8, 0.6])
def test_known_factor_recovered_within_2_percent(factor):
    sizes = [1 << p for p in range(10, 31, 2)]
    topo, rows = _rows(sizes)
    tests = parse_nccl_tests(nccl_tests_text(rows, factor), "allreduce.txt")
    assert tests.op == "allreduce" and tests.ranks == 8 and len(tests.rows) == len(sizes)
    fit, table = fit_network(tests, topo, "allreduce", 8)
    got = fit.knobs.network_busbw_factor
    assert abs(got - factor) / factor < 0.02, got
    # the largest message: measured busbw / modelled busbw is the factor before the fit
    assert table[-1]["efficiency"] == pytest.approx(factor, rel=0.02)
    assert table[-1]["calibrated_efficiency"] == pytest.approx(1.0, rel=0.02)


def test_missing_column_names_file_and_line(tmp_path, capsys):
    _, rows = _rows([1 << 20, 1 << 22])
    f = tmp_path / "bad.txt"
    f.write_text(nccl_tests_text(rows, 0.9, drop_column=6))
    with pytest.raises(InputError) as e:
        parse_nccl_tests(f.read_text(), str(f))
    first_row = 5 + 8 + 3  # 4 preamble lines, 8 rank lines, 3 header lines, then the row
    assert e.value.line == first_row and "missing column" in e.value.message
    code = main(["calibrate", "--nccl-tests", str(f), "--topo", TOPO, "--out",
                 str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"bad.txt:{first_row}:" in err


def test_another_gpu_refused(tmp_path, capsys):
    _, rows = _rows([1 << 20])
    f = tmp_path / "h100.txt"
    f.write_text(nccl_tests_text(rows, 1.0, gpu="NVIDIA H100 80GB HBM3"))
    code = main(["calibrate", "--nccl-tests", str(f), "--topo", TOPO, "--out",
                 str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "h100.txt:5:" in err and "H100" in err and len(err.splitlines()) == 1

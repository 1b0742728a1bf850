"""nccl-tests calibrate collective times by message size (sim/network/curves.py): simrun's own
all-reduce prediction on 8 A100s, with each size's time multiplied by a known factor and
written in nccl-tests' format, is given back per size by ``simrun calibrate`` within 2%; the
simulation under the profile then times each measured size as measured, interpolates in log
size between them, holds the end factors beyond them (saying so), and a started request
alone takes exactly the calibrated isolated time."""

from __future__ import annotations

import math

import pytest
import simpy
from test_calibration_nccl import TOPO, _rows, nccl_tests_text

from sim.calibration.knobs import calibrated_topology
from sim.calibration.profile import apply_to_topology, load_profile
from sim.cli import main
from sim.comm import CollKind, GroupKind
from sim.network.base import CommRequest
from sim.network.curves import TimeCurve
from sim.network.predict import predict_rows
from sim.parallel.placement import Placement
from sim.scenario import NetworkOptions, network_of
from sim.topology import load_topology

SIZES = [1 << p for p in range(10, 31, 2)]  # 1 KiB .. 1 GiB


def _factor(i: int) -> float:
    """A known, size-dependent slowdown: 1.3 at the smallest sizes down to 0.85 at 1 GiB."""
    return 1.3 - 0.45 * i / (len(SIZES) - 1)


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    d = tmp_path_factory.mktemp("curves")
    _, rows = _rows(SIZES)
    slowed = [dict(r, time_s=r["time_s"] * _factor(i)) for i, r in enumerate(rows)]
    f = d / "all_reduce.txt"
    f.write_text(nccl_tests_text(slowed, 1.0))
    out = d / "p.yaml"
    assert main(["calibrate", "--nccl-tests", str(f), "--topo", TOPO, "--out", str(out)]) == 0
    return load_profile(str(out)), rows


def _calibrated_rows(prof, sizes):
    topo = apply_to_topology(load_topology(TOPO, nodes=1), prof)
    return predict_rows("allreduce", 8, sizes, network_of(topo, NetworkOptions()))


def test_each_measured_size_is_timed_as_measured_within_2_percent(profile):
    prof, rows = profile
    (curve,) = prof.curves
    assert (curve.op, curve.ranks, curve.sizes) == ("allreduce", 8, tuple(SIZES))
    got = _calibrated_rows(prof, SIZES)
    for i, (r, g) in enumerate(zip(rows, got, strict=True)):
        want = r["time_s"] * _factor(i)
        assert g["time_s"] == pytest.approx(want, rel=0.02), (r["size_bytes"], g, want)


def test_between_sizes_the_factor_is_interpolated_in_log_size(profile):
    """Half-way in log2 between 1 MiB and 4 MiB (2 MiB): the mean of the two factors on the
    model's time at that size under the profile's bus-bandwidth factor (launch excluded, as
    nccl-tests' times are)."""
    prof, _ = profile
    (curve,) = prof.curves
    i = SIZES.index(1 << 20)
    k = (curve.factors[i] + curve.factors[i + 1]) / 2
    assert curve.factor(1 << 21) == (pytest.approx(k, rel=1e-12), False)
    scalar = calibrated_topology(load_topology(TOPO, nodes=1), prof.knobs.network_busbw_factor)
    (plain,) = predict_rows("allreduce", 8, [1 << 21], network_of(scalar, NetworkOptions()))
    (cal,) = _calibrated_rows(prof, [1 << 21])
    assert cal["time_s"] == pytest.approx(plain["time_s"] * k, rel=1e-6, abs=2e-9)


def test_beyond_the_measured_sizes_the_end_factor_holds_and_is_flagged():
    c = TimeCurve("allreduce", 8, (1024, 4096), (1.2, 0.9), "test")
    assert c.factor(8) == (1.2, True)
    assert c.factor(1 << 30) == (0.9, True)
    assert c.factor(2048) == (pytest.approx(1.05), False)


def test_a_started_request_alone_takes_the_calibrated_isolated_time(profile):
    """Through the flow model (wire bytes, latencies and ramp scaled; launch not): a request
    alone ends at launch + k·(modelled − launch), as ``isolated`` says, within 2 ns of
    rounding; the report's line counts it, and a group of another size is flagged."""
    prof, _ = profile
    topo = apply_to_topology(load_topology(TOPO, nodes=2), prof)
    plain = network_of(calibrated_topology(load_topology(TOPO, nodes=2),
                                           prof.knobs.network_busbw_factor), NetworkOptions())
    net = network_of(topo, NetworkOptions())
    req = CommRequest(CollKind.ALLREDUCE, GroupKind.DP, tuple(range(8)), 3 << 20)
    k, outside = prof.curves[0].factor(3 << 20)
    assert not outside
    t0, t1 = plain.isolated(req).duration_ns, net.isolated(req).duration_ns
    assert t1 == net.launch_ns + round((t0 - net.launch_ns) * k)
    env = simpy.Environment()
    net.bind(env, Placement(8, 2, 1), False)
    got = []

    def go(r, delay=0):
        yield env.timeout(delay)
        res = yield net.start(r)
        got.append((env.now, res.duration_ns))

    env.process(go(req))  # then, once it is done, a 32 GiB one over both nodes
    env.process(go(CommRequest(CollKind.ALLREDUCE, GroupKind.DP, tuple(range(16)), 1 << 35),
                   10_000_000))
    env.run()
    assert abs(got[0][1] - t1) <= 2 and math.isclose(got[0][0], got[0][1])
    (line,) = [a for a in net.describe() if "calibrated by size" in a]
    assert line.startswith("WARNING: ") and "distinct allreduce requests: 2" in line
    assert "1 of them outside the measured sizes" in line and "1 on another rank count" in line


def test_sendrecv_is_not_calibrated_by_size(tmp_path, capsys):
    from sim.calibration.nccl_tests import parse_nccl_tests, time_curve

    _, rows = _rows([1 << 20, 1 << 22])
    text = nccl_tests_text(rows, 1.0).replace("all_reduce_perf", "sendrecv_perf")
    tests = parse_nccl_tests(text, "sr.txt")
    curve, notes = time_curve(tests, load_topology(TOPO, nodes=1), prof_knobs())
    assert curve is None and "not calibrated by size" in notes[0]


def prof_knobs():
    from sim.calibration.knobs import Knobs

    return Knobs()


def test_a_profile_curve_out_of_bounds_names_file_line_and_key(tmp_path, capsys, profile):
    prof, _ = profile
    text = open(prof.path).read()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("factors:\n", "factors:\n  - 9.0\n", 1))
    code = main(["--model", "gpt2-medium", "--topo", TOPO, "--nodes", "1", "--tp", "8",
                 "--global-batch", "8", "--calibration", str(bad)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "bad.yaml:" in err and "network_curves[0].factors" in err

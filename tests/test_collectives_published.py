"""`simrun collective` against published nccl-tests numbers (tests/data/published_collectives.csv,
each row with its source; docs/calibration.md §A3), and against NCCL's own tuning model where no
named measurement exists.

Rows marked ``within10`` must be within ±10 % of the published range. Rows marked ``gap`` are
known differences the docs state and explain; they are listed here only to check that the file
and the docs agree on them (never asserted as passing, so that nothing is tuned to them).
"""

from __future__ import annotations

import csv
import io

import pytest
from conftest import ROOT, TOPOLOGIES

from sim.network import build_network
from sim.network.predict import predict_rows
from sim.topology import load_topology

DATA = ROOT / "tests" / "data" / "published_collectives.csv"


def rows() -> list[dict[str, str]]:
    text = "".join(line for line in DATA.read_text().splitlines(keepends=True)
                   if not line.startswith("#"))
    names = ["name", "topology", "gpus", "op", "size_bytes", "options", "lo", "hi", "check",
             "source"]
    return [dict(zip(names, r, strict=True)) for r in csv.reader(io.StringIO(text))]


def predict(row: dict[str, str]) -> dict:
    topo = load_topology(str(TOPOLOGIES / row["topology"]))
    return predict_rows(row["op"], int(row["gpus"]), [int(row["size_bytes"])],
                        build_network(topo))[0]


WITHIN = [r for r in rows() if r["check"] == "within10"]


def test_every_row_names_its_source():
    for r in rows():
        assert r["check"] in ("within10", "gap"), r
        assert len(r["source"]) > 10 and float(r["lo"]) <= float(r["hi"]), r


@pytest.mark.parametrize("row", WITHIN, ids=[r["name"] for r in WITHIN])
def test_published_point_within_10_percent(row):
    got = predict(row)["busbw_GBps"]
    lo, hi = float(row["lo"]), float(row["hi"])
    assert 0.9 * lo <= got <= 1.1 * hi, (row["name"], got, lo, hi)


def test_64_dgx_a100_at_1_gib_runs_nccls_ring_simple():
    # NCCL's own choice (v2.30.7 src/graph/tuning.cc:286-445, 630-655) on 8 DGX A100 nodes
    # (8 HDR NICs: 8 channels of 24 GB/s, busBw 192), 1 GiB: ring/Simple algbw = 192 · 64/126 =
    # 97.5 GB/s, tree/LL128 = min(192 · 0.92 · 120/128, 8 · 20 perChMaxTreeLL128Bw) · 0.5 =
    # 80 GB/s; ring/Simple's latency (≈ 1.4 · (8.4 + 112 · 3.4 + 14 · 14) µs ≈ 0.8 ms) is far
    # below the 2.2 ms the tree loses on bandwidth: NCCL runs ring/Simple, and so does the model.
    row = next(r for r in WITHIN if r["name"] == "64 DGX A100 all-reduce 1 GiB")
    assert predict(row)["algorithm"] == "ring/Simple"


def nccl_model_busbw_one_dgx_a100(size: int) -> float:
    """NCCL's own predicted bus bandwidth (GB/s) of an all-reduce on one DGX A100 (8 GPUs, 12
    NVLinks × SM80_NVLINK_BW 20 GB/s = busBw 240), v2.30.7 tuning.cc: time = latency +
    nBytes / (1000 · algbw), least over ring/LL128 (busBw · 0.92, latency 14 + 14 · 1.9 µs) and
    ring/Simple (busBw, latency 8.4 + 14 · 3.4 µs); algbw = busBw · n / (2(n − 1))."""
    best = min(lat + size / (1000 * bw * 8 / 14)
               for lat, bw in ((14 + 14 * 1.9, 240 * 0.92), (8.4 + 14 * 3.4, 240.0)))
    return size / (best * 1e-6) / 1e9 * 14 / 8


def test_16_mb_on_one_dgx_a100_against_nccls_own_model():
    # The mid-size point of docs/calibration.md §A ("~45 % of peak at 16 MB", run not named) was
    # met by a ring pipeline ramp that NCCL's ring kernels do not have (every rank sends from the
    # first step: sim/network/nccl.py RING_RAMP_DEPTH); without it the model gives 0.66 of the
    # 232.5 GB/s peak. The independent closed form here is NCCL's own predictor (0.73 of peak);
    # the model must stay within 10 % of it.
    size = 16 << 20
    nccl_own = nccl_model_busbw_one_dgx_a100(size)
    assert nccl_own == pytest.approx(169.2, abs=0.5)
    topo = load_topology(str(TOPOLOGIES / "dgx-a100-1024.yaml"))
    got = predict_rows("allreduce", 8, [size], build_network(topo))[0]["busbw_GBps"]
    assert 0.9 * nccl_own <= got <= 1.1 * nccl_own, (got, nccl_own)


def test_ring_busbw_of_8_h100_rises_to_the_nvlink_plateau_without_a_fill_penalty():
    # all-gather at 128 MiB on one DGX H100 (issue 33: 208 GB/s with the old ramp): the ring's
    # time is NCCL's latency + (n−1)/n · S at 18 NVLinks × 20.6 GB/s, nothing else; at 1 GiB
    # it reaches the 360–370 plateau of nccl-tests#212.
    topo = load_topology(str(TOPOLOGIES / "dgx-h100-1024.yaml"))
    net = build_network(topo)
    r128, r1g = predict_rows("allgather", 8, [128 << 20, 1 << 30], net)
    assert r128["algorithm"] == r1g["algorithm"] == "ring/Simple"
    assert r128["busbw_GBps"] > 0.85 * r1g["busbw_GBps"] and r1g["busbw_GBps"] >= 360

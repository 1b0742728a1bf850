"""Fused attention on Blackwell by the transfer rule, checked against cuDNN's published SDPA
training benchmarks (sim/validation/attention_blackwell.py, scripts/check_attention_blackwell.py,
docs/hardware.md "Checked on Blackwell: fused attention against cuDNN's published benchmarks"):
the errors the check reports, the published rows it reads, a transferred attention time by hand
from its H100 row, and that the check changes nothing of the product."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim.errors import InputError
from sim.kernels.lookup import EXACT, INTERPOLATED
from sim.validation import attention_blackwell as ab

ROOT = Path(__file__).resolve().parents[1]

#: the check's errors (simrun / published − 1, forward, backward) when recorded (python
#: scripts/check_attention_blackwell.py, 2026-11-29, main 032cf34); s 4096 for information
RECORDED = {
    ("B200 cuDNN 9.13", 4096): (-0.186, -0.224),
    ("B200 cuDNN 9.13", 8192): (0.024, -0.068),
    ("B200 cuDNN 9.13", 16384): (0.117, -0.003),
    ("B200 cuDNN 9.13", 32768): (0.165, 0.001),
    ("GB200 cuDNN 9.17", 4096): (0.287, 0.130),
    ("GB200 cuDNN 9.17", 8192): (0.352, 0.159),
    ("GB200 cuDNN 9.17", 16384): (0.366, 0.172),
    ("GB200 cuDNN 9.17", 32768): (0.348, 0.179),
    ("GB300 cuDNN 9.13", 4096): (-0.182, -0.155),
    ("GB300 cuDNN 9.13", 8192): (-0.021, -0.044),
    ("GB300 cuDNN 9.13", 16384): (0.068, 0.005),
    ("GB300 cuDNN 9.13", 32768): (0.103, 0.018),
    ("GB300 cuDNN 9.17", 4096): (0.200, 0.050),
    ("GB300 cuDNN 9.17", 8192): (0.243, 0.092),
    ("GB300 cuDNN 9.17", 16384): (0.240, 0.109),
    ("GB300 cuDNN 9.17", 32768): (0.232, 0.110),
}
#: the band around the recorded errors: 0.5 percentage points (recorded to 0.1 point)
BAND = 0.005
#: share of fused attention in one layer of the Llama 3 8B validation cases when recorded
RECORDED_SHARE = {"B200 LLAMA3-8B 8 GPU": 0.282, "GB200 LLAMA3-8B 8 GPU": 0.284,
                  "GB300 LLAMA3-8B 8 GPU": 0.242}


@pytest.fixture(scope="module")
def rows():
    return {(r.pub.source, r.pub.s): r for r in ab.check()}


@pytest.mark.parametrize("key", list(RECORDED))
def test_errors_against_the_published_times_are_the_recorded_ones(rows, key):
    """A change of the transfer rule, of H100's attention rows or of the tile model that moves
    these errors fails here; the docs' table is then re-run with the script and re-recorded."""
    r = rows[key]
    for d, got, want in zip(("fwd", "bwd"), r.errors, RECORDED[key], strict=True):
        assert got == pytest.approx(want, abs=BAND), f"{key} {d}: {got:+.2%}, recorded {want:+.1%}"
    assert r.how == (INTERPOLATED, INTERPOLATED)
    assert r.compared == (key[1] >= 8192)


def test_the_published_rows_are_the_transcribed_ones():
    """16 rows, four runs × s 4096 .. 32768; spot values of the three files as published
    (cudnn-frontend bb37575d B200 pyt_cudnn s 32768 '24.795,79.338'; d48a60eb GB200 cudnn_fe
    s 8192 '1.389,4.542'; bb37575d GB300 pyt_cudnn s 16384 '5.167,17.345'); the header names
    each commit, the cuDNN versions and the licence (MIT at those commits)."""
    pub = {(p.source, p.s): p for p in ab.published()}
    assert len(pub) == 16 and {p.s for p in pub.values()} == {4096, 8192, 16384, 32768}
    assert (pub["B200 cuDNN 9.13", 32768].forward_ms, pub["B200 cuDNN 9.13", 32768].backward_ms
            ) == (24.795, 79.338)
    assert (pub["GB200 cuDNN 9.17", 8192].forward_ms, pub["GB200 cuDNN 9.17", 8192].backward_ms
            ) == (1.389, 4.542)
    assert pub["GB300 cuDNN 9.13", 16384].backward_ms == 17.345
    assert {(p.gpu, p.cudnn, p.backend, p.timing) for p in pub.values()} == {
        ("B200", "9.13.0", "pyt_cudnn", "events"), ("GB300", "9.13.0", "pyt_cudnn", "events"),
        ("GB200", "9.17.0", "cudnn_fe", "profiler"), ("GB300", "9.17.0", "cudnn_fe", "profiler")}
    head = (ROOT / ab.DATA).read_text().split("\nsource,")[0]
    for text in ("bb37575d103b9974bc619a193dc1a96d835dc117",
                 "d48a60eb146eada7aee2e00b8f8c1d6ddcf96c51",
                 "0b1577c8c83401237d601d0d0db5210506705396",
                 "9793df569ce413f4b1844a9176f7ae24dd981603", "Licence: MIT", "91300", "91700"):
        assert text in head


def test_a_malformed_row_names_file_line_and_field():
    text = (ROOT / ab.DATA).read_text()
    bad = text.replace("bb37575d,8192,1.877,", "bb37575d,8192,x,")
    line = next(i for i, s in enumerate(bad.splitlines(), 1) if ",8192,x," in s)
    with pytest.raises(InputError, match=rf"cudnn-sdpa-blackwell.csv:{line}: forward_ms: not a"):
        ab.parse(bad)
    with pytest.raises(InputError, match=r"source: unknown source 'B300 cuDNN 9.13'"):
        ab.parse(text.replace("\nB200 cuDNN 9.13,", "\nB300 cuDNN 9.13,", 1))


def _h100_row(kind: str, b: int, s: int, hq: int, hkv: int) -> float:
    """The time (ns) of H100's ``kind`` row of sim/data/kernels/h100-sxm.csv at d 128, causal."""
    with open(ROOT / "sim/data/kernels/h100-sxm.csv") as f:
        got = [r for r in csv.reader(x for x in f if not x.startswith("#"))
               if r[0] == kind and r[5:11] == [str(b), str(s), str(hq), str(hkv), "128", "1"]]
    assert len(got) == 1
    return float(got[0][1]) * 1e6


def test_a_transferred_attention_by_hand_from_its_h100_row():
    """The rule on H100's measured rows (same path as the check: catalogue entry, resolve_compute,
    timer_for "fused"), b 1, s 8192, 32 query heads, 8 KV heads, d 128, causal.
    Forward on B200, row attn_cudnn_fwd 0.90394 ms: f = 1 / (1 + 4·128·3.865 / 989.4) =
    0.3333243 (H100's exponential share; gpus.csv exp_tera_per_s H100 3.865, bf16 peak 989.4),
    r = (1 − f)·794.5 / 1745 + f·3.865 / 5 = 0.6666757·0.4553009 + 0.3333243·0.773 = 0.5611977
    (mamf_bf16 H100 794.5, B200 1745; exp B200 5), t = 6000 + (903940 − 6000)·r = 509921.9 ns.
    Backward on GB300, row attn_cudnn_bwd 2.86904 ms: f = 1 / (1 + 10·128·3.865 / 989.4) =
    0.1666611, r = 0.8333389·794.5 / 1769 + 0.1666611·3.865 / 10.7 = 0.4344728 (GB300's
    mamf_bf16 1769 is B300 SXM's; exp 10.7), t = 6000 + 2863040·r = 1249913.1 ns."""
    from sim.models.compute_setup import resolve_compute, timer_for
    from sim.models.vocab.ops import Op, OpKind

    shape = (1, 32, 8, 8192, 128, 1)
    fwd = Op("attn", OpKind.FLASH_FWD, 1, 1, kernel="attn_fwd", shape=shape)
    bwd = Op("attn_grad", OpKind.FLASH_BWD, 1, 1, kernel="attn_bwd", shape=shape)
    assert _h100_row("attn_cudnn_fwd", 1, 8192, 32, 8) == 903940.0
    assert _h100_row("attn_cudnn_bwd", 1, 8192, 32, 8) == 2869040.0
    f = 1 / (1 + 4 * 128 * 3.865 / 989.4)
    r = (1 - f) * 794.5 / 1745 + f * 3.865 / 5
    assert (f, r) == (pytest.approx(0.3333243, abs=1e-7), pytest.approx(0.5611977, abs=1e-7))
    b200 = ab.gpu_spec("B200")
    t, how = timer_for(b200, resolve_compute(b200), "fused").op_ns(fwd, "bf16")
    assert how == EXACT and t == pytest.approx(6000 + (903940 - 6000) * r, rel=1e-9)
    assert t == pytest.approx(509921.9, abs=0.1)
    fb = 1 / (1 + 10 * 128 * 3.865 / 989.4)
    rb = (1 - fb) * 794.5 / 1769 + fb * 3.865 / 10.7
    gb300 = ab.gpu_spec("GB300")
    t, how = timer_for(gb300, resolve_compute(gb300), "fused").op_ns(bwd, "bf16")
    assert how == EXACT and t == pytest.approx(6000 + (2869040 - 6000) * rb, rel=1e-9)
    assert t == pytest.approx(1249913.1, abs=0.1)


def test_the_checks_128_head_times_are_h100s_tile_model_transferred_by_the_same_ratio(rows):
    """H100's table stops at 64 query heads and s 16384 (its attn_cudnn rows), so each checked
    shape is H100's tile-model time (the H100 run's answer) rescaled by the ratio above:
    B200 forward s 32768, t = 6000 + (t_H100 − 6000)·0.5611977."""
    from sim.kernels.table import read_table

    table = read_table(ROOT / "sim/data/kernels/h100-sxm.csv")
    cudnn = [r for k in ("attn_cudnn_fwd", "attn_cudnn_bwd") for r in table.of_kind(k)]
    assert max(r.get("hq") for r in cudnn) == 64 and max(r.get("s") for r in cudnn) == 16384
    (h100, how), _ = ab.simrun_times("H100-SXM5-80GB", 32768)
    assert how == INTERPOLATED
    r = (1 - 0.3333243) * 794.5 / 1745 + 0.3333243 * 3.865 / 5
    got = rows["B200 cuDNN 9.13", 32768].simrun[0]
    assert got == pytest.approx((6000 + (h100 * 1e6 - 6000) * r) / 1e6, rel=1e-6)


@pytest.mark.parametrize(("path", "name"), ab.LLAMA3_8B_CASES)
def test_attention_share_of_the_llama3_8b_validation_layers(path, name):
    attn, total, shape, backend = ab.layer_attention_share(path, name)
    assert shape == (2, 32, 8, 8192, 128, 1) and backend == "fused"
    assert attn / total == pytest.approx(RECORDED_SHARE[name], abs=BAND)


def test_the_check_changes_nothing_of_the_product():
    """The catalogue rows the rule reads and a Blackwell run's attention time are the same
    before and after the check runs (it only reads)."""
    from sim.kernels.gpus import find
    from sim.models.compute_setup import resolve_compute, timer_for

    def state():
        spec = ab.gpu_spec("GB200")
        op = ab.attention_ops(8192)[0]
        t = timer_for(spec, resolve_compute(spec), "fused").op_ns(op, "bf16")
        cat = tuple((g.mamf_tflops, g.exp_tera_per_s, g.peak_tflops["bf16"])
                    for g in map(find, ("H100-SXM5-80GB", "B200", "GB200", "GB300")))
        return t, cat

    before = state()
    ab.check()
    assert state() == before
    assert before[1][2] == ({"bf16": 1822.0, "fp8": 3615.6}, 5.0, 2500.0)

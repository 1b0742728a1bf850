"""Sizes without bounds and lax numbers (issue 13, class 3 and the flags of class 7): one work
budget checked before anything is allocated, int64 bounds on sizes and the watchdog, and
command-line numbers read as strictly as numbers in files. Each case is a real process under an
address-space and CPU limit: exit 2, one line, < 1 GB, < 10 s of CPU."""

from __future__ import annotations

import math

import pytest
from hostile_support import GB, ROOT, run_bounded

from sim.errors import UsageError
from sim.limits import (
    MAX_LAYERS,
    MAX_TRACE_RANKS,
    MAX_WORK,
    TRACE_RANK_UNITS,
    parse_float,
    parse_int,
)
from sim.viz.select import parse_rank_spec

TINY = str(ROOT / "topologies" / "tiny-2x2.yaml")
OPTABLE = str(ROOT / "workloads" / "optable-gpt2-large-block.tsv")
RUN = ["--workload", OPTABLE, "--topo", TINY, "--quiet"]


def _check(o, needle: str, prefix: str = "simrun") -> None:
    assert not o.killed_after_timeout, "did not answer in time"
    assert o.returncode == 2 and o.stdout == "", (o.returncode, o.stderr[-2000:])
    line = o.one_line(prefix)
    assert needle in line, line
    assert o.max_rss_bytes < 1 * GB and o.cpu_s < 10, (o.max_rss_bytes, o.cpu_s)


def _model(tmp_path, layers: str):
    path = tmp_path / "m.yaml"
    path.write_text(f"name: tiny\nlayers: {layers}\nhidden: 64\nheads: 1\nvocab: 128\n"
                    "seq_len: 16\n")
    return path


@pytest.mark.parametrize("layers,shown", [("1000000", "1,000,000"),
                                          ("100000000", "100,000,000"),
                                          ("0x7fffffff", "2,147,483,647")])
def test_model_layers_beyond_the_budget_are_refused_before_generating(layers, shown, tmp_path):
    path = _model(tmp_path, layers)
    needle = (f"{path}:2: layers: {shown} layers exceed simrun's work budget: at most "
              f"{MAX_LAYERS:,} layers per model")
    _check(run_bounded("--model", str(path), "--topo", TINY, "--microbatches", "1"), needle)
    _check(run_bounded("inspect", str(path)), needle, "simrun inspect")


def test_layer_passes_of_a_workload_file_are_counted_before_simulating(tmp_path):
    """A 700 KB AICB file of 10,000 rows with 2,000 microbatches would be 20 M layer passes."""
    rows = "".join(f"layer{i}\t-1\t1000\tALLREDUCE\t1024\t1000\tNONE\t0\t1000\tALLREDUCE\t"
                   "4096\t100\n" for i in range(10_000))
    path = tmp_path / "w.txt"
    path.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 "
                    f"ga: 1 all_gpus: 4 pp_comm: 0\n10000\n{rows}")
    assert path.stat().st_size < 1 << 20
    _check(run_bounded("--workload", str(path), "--topo", TINY, "--microbatches", "2000"),
           "--microbatches: 2,000 microbatches × 10,000 layer rows = 20,000,000 layer passes; "
           f"simrun's work budget is {MAX_WORK:,}")


@pytest.mark.parametrize("args,needle", [
    (["--trace", "/dev/null", "--trace-ranks", "0-999999999"],
     "--trace-ranks: lists 1,000,000,000 ranks or more; at "
     f"most {MAX_TRACE_RANKS:,} (simrun's work budget)"),
    (["--trace", "/dev/null", "--trace-ranks", "0-9999999999999999999999"],
     "--trace-ranks: expected 'stage-reps'"),
    (["--max-sim-time-s", "1e300"], "argument --max-sim-time-s: expected a positive number of "
                                    "seconds ≤ 9.223e+09, got '1e300'"),
    (["--max-sim-time-s", "inf"], "got 'inf'"),
    (["--max-sim-time-s", "nan"], "got 'nan'"),
    (["--tp", "1_6"], "argument --tp: expected a positive integer, got '1_6'"),
    (["--tp", " 8"], "argument --tp: expected a positive integer, got ' 8'"),
    (["--tp", "٣"], "argument --tp: expected a positive integer, got '٣'"),
    (["--microbatches", "99999999999999999999"], "argument --microbatches: expected a positive"),
    (["--microbatches", "8388609"], "forward/backward ops per iteration; simrun simulates at "
                                    "most 16,777,216"),
    (["--microbatches", "400000"], "--microbatches: 400,000 microbatches × 51 layer rows = "
                                   "20,400,000 layer passes; simrun's work budget is 16,777,216"),
    (["--missing-backward-ratio", "1_0"], "argument --missing-backward-ratio: expected a "
                                          "positive number, got '1_0'"),
])
def test_flags_beyond_bounds_or_not_plain_numbers_are_refused(args, needle):
    _check(run_bounded(*RUN, *args), needle)


@pytest.mark.parametrize("sizes,needle", [
    ("1:99999999999999999999G", "--sizes: bad size '99999999999999999999G'"),
    ("1:9999999999G", "--sizes: size '9999999999G' exceeds 2^63−1 bytes"),
    ("٣:8", "--sizes: bad size '٣'"),
])
def test_collective_sizes_are_bounded(sizes, needle):
    _check(run_bounded("collective", "--topo", TINY, "--sizes", sizes), needle)


def test_inspect_flags_are_strict():
    _check(run_bounded("inspect", str(ROOT / "workloads" / "models" / "gpt2-medium.yaml"),
                       "--layers", "2_4"),
           "argument --layers: expected a positive integer, got '2_4'", "simrun inspect: error:")


def test_sweep_lists_are_strict():
    _check(run_bounded("sweep", "--model", str(ROOT / "workloads" / "models" / "gpt2-medium.yaml"),
                       "--topo", TINY, "--tp", "1_6", "--global-batch", "8"),
           "--tp: expected comma-separated positive integers, got '1_6'")


@pytest.mark.parametrize("text,value", [("8", 8), ("+8", 8), ("007", 7), ("0", 0),
                                        (str(2**63 - 1), 2**63 - 1), (str(2**63), None),
                                        ("1_6", None), (" 8", None), ("8 ", None), ("٣", None),
                                        ("²", None), ("-1", None), ("", None), ("1e3", None),
                                        ("9" * 5000, None)])
def test_parse_int_is_ascii_only(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize("text,value", [("1", 1.0), ("1e6", 1e6), (".5", 0.5), ("-2.5", -2.5),
                                        ("1e300", 1e300), ("1e309", None), ("inf", None),
                                        ("nan", None), ("1_0", None), (" 1", None),
                                        ("١", None), ("0x10", None)])
def test_parse_float_is_plain_and_finite(text, value):
    got = parse_float(text)
    assert got == value and (got is None or math.isfinite(got))


def test_rank_ranges_are_counted_before_they_are_built():
    assert parse_rank_spec("0-3, 8 ,6-7") == (0, 1, 2, 3, 8, 6, 7)
    assert MAX_TRACE_RANKS * TRACE_RANK_UNITS == MAX_WORK
    with pytest.raises(UsageError, match="lists 1,048,577 ranks or more"):
        parse_rank_spec(f"0-{MAX_TRACE_RANKS - 2},5-6")

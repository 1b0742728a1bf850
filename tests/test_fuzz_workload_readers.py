"""Fuzzing the workload readers (AICB text, operator table) and the reader registry: random and
mutated inputs, in any encoding, either parse (and build a program) or raise the project's
InputError naming file, line and field — never another exception, never a hang. Small random
AICB workloads also run through the whole CLI: exit 0 with a consistent report, or exit 2 with
one line on stderr — never exit 1 (internal error)."""

from __future__ import annotations

import json

from conftest import SEED_512, SEED_1024, SEED_OPTABLE, TOPOLOGIES
from fuzz_support import alarm, check_error, check_reader, encoded, fuzz_settings, mutated_lines
from hypothesis import given
from hypothesis import strategies as st

from sim.cli import main
from sim.errors import InputError, UsageError
from sim.workload.aicb import read_aicb
from sim.workload.optable import read_optable
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program

AICB_SEEDS = [SEED_1024.read_text(), SEED_512.read_text()]
OPTABLE_SEED = SEED_OPTABLE.read_text()
AICB_TOKENS = ["ALLREDUCE_EP", "ALLGATHER_DP_EP", "REDUCESCATTER_TP", "BROADCAST_PP", "ALLREDUCE_",
               "allreduce", "embedding_layer", "final_column", "optimizer1", "ga: 0",
               "checkpoints: 3 1", "all_gpus: 7", "vpp: 3", "pp_comm 1e3"]


def _check(fn, text: str, file: str = "f.txt") -> None:
    """Parse errors name the file (and line/field); layout errors name the flag."""
    try:
        with alarm(20):
            fn(text)
    except UsageError as e:
        assert e.field and "\n" not in str(e), str(e)
    except InputError as e:
        check_error(e, file)


def _aicb_pipeline(text: str) -> None:
    build_program(read_aicb(text, "f.txt"), LayoutOptions(default_gpus=1 << 20))


def _optable_pipeline(text: str) -> None:
    build_program(read_optable(text, "f.txt"), LayoutOptions(default_gpus=64))


def _file_pipeline(path) -> None:
    try:
        build_program(read_workload(path), LayoutOptions(default_gpus=1 << 20))
    except UsageError as e:  # a layout flag problem, not a file problem
        assert e.field and e.file is None, str(e)


@fuzz_settings(1200)
@given(mutated_lines(AICB_SEEDS, "\t", AICB_TOKENS))
def test_aicb_mutations(text):
    _check(_aicb_pipeline, text)


@fuzz_settings(400)
@given(st.text(max_size=300))
def test_aicb_random_text(text):
    _check(_aicb_pipeline, "HYBRID_TRANSFORMER_FWD_IN_BCKWD " + text)


@fuzz_settings(600)
@given(data=encoded(mutated_lines(AICB_SEEDS, "\t", AICB_TOKENS)))
def test_aicb_files_in_any_encoding(tmp_path_factory, data):
    check_reader(_file_pipeline, tmp_path_factory.mktemp("a") / "w.txt", data)


@fuzz_settings(900)
@given(mutated_lines([OPTABLE_SEED], "\t", ["ALLREDUCE_ASYNC", "ALLTOALL_ASYNC", "4.8e-09",
                                            "process_time", "weight_grad_comm_size"]))
def test_optable_mutations(text):
    _check(_optable_pipeline, text)


@fuzz_settings(300)
@given(st.text(max_size=300))
def test_optable_random_text(text):
    _check(_optable_pipeline, OPTABLE_SEED.splitlines()[0] + "\n" + text)


@fuzz_settings(500)
@given(data=encoded(mutated_lines([OPTABLE_SEED], "\t")))
def test_optable_files_in_any_encoding(tmp_path_factory, data):
    check_reader(_file_pipeline, tmp_path_factory.mktemp("o") / "w.tsv", data)


@fuzz_settings(300)
@given(data=st.binary(max_size=200))
def test_registry_on_random_bytes(tmp_path_factory, data):
    check_reader(_file_pipeline, tmp_path_factory.mktemp("fuzz") / "f.txt", data)


# ---- small random AICB workloads through the whole CLI ----------------------------------------
COMM = ["NONE", "ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL", "BROADCAST",
        "ALLREDUCE_EP", "ALLTOALL_EP", "ALLREDUCE_DP_EP", "ALLGATHER_DP_EP"]
SIZES = [0, 0, 1, 4096, 2**31 + 1, 12_802_064_384]
TIMES = [0, 0, 1, 1000, 123_456, 2**33]


@st.composite
def small_aicb(draw) -> str:
    header = ["HYBRID_TRANSFORMER_FWD_IN_BCKWD"]
    for key, values in (("model_parallel_NPU_group", [1, 2, 4]), ("ep", [1, 2]),
                        ("pp", [1, 2, 3, 4]), ("vpp", [1, 2, 4]), ("ga", [1, 2, 3, 4]),
                        ("all_gpus", [1, 2, 4, 8]), ("pp_comm", [0, 1, 2**33])):
        if draw(st.booleans()):
            header.append(f"{key}: {draw(st.sampled_from(values))}")
    ga = next((int(t.split()[1]) for t in header if t.startswith("ga:")), 1)
    names = draw(st.lists(st.sampled_from(["embedding_layer", "attention", "mlp", "attention",
                                           "mlp", "final_column"]), min_size=1, max_size=5))

    def row(name: str) -> str:
        cols = [name, "-1"]
        for default in ("ALLREDUCE", "ALLREDUCE", "ALLREDUCE"):
            cols += [str(draw(st.sampled_from(TIMES))), draw(st.sampled_from(COMM + [default])),
                     str(draw(st.sampled_from(SIZES)))]
        return "\t".join(cols + ["100"])

    lead = [row(n) for n in draw(st.lists(st.sampled_from(["grad_gather", "grad_param_comm"]),
                                          max_size=2))]
    block = [row(n) for n in names]
    body = lead + block * (ga if draw(st.integers(0, 9)) else ga + 1)
    body += [row(n) for n in draw(st.lists(st.sampled_from(["cross_entropy1", "optimizer1"]),
                                           max_size=2))]
    declared = len(body) + (1 if draw(st.integers(0, 19)) == 0 else 0)
    return " ".join(header) + f"\n{declared}\n" + "\n".join(body) + "\n"


@fuzz_settings(150)
@given(text=small_aicb(), per_rank=st.booleans())
def test_small_random_workloads_run_or_fail_cleanly(tmp_path_factory, capsys, text, per_rank):
    d = tmp_path_factory.mktemp("cli")
    wl, out = d / "w.txt", d / "r.json"
    wl.write_text(text)
    args = ["--workload", str(wl), "--topo", str(TOPOLOGIES / "tiny-2x2.yaml"), "--quiet",
            "--json", str(out)] + (["--per-rank"] if per_rank else [])
    capsys.readouterr()
    with alarm(60):
        rc = main(args)
    err = capsys.readouterr().err
    assert rc in (0, 2), err
    if rc == 2:
        assert err.startswith("simrun: error: ") and err.count("\n") == 1, err
        assert not out.exists()
        return
    assert err == ""
    rep = json.loads(out.read_text())
    it = rep["iteration_time_s"]
    assert it >= 0
    for stage in rep["stages"]:
        total = (stage["compute_s"] + stage["optimizer_s"] + sum(stage["exposed_comm_s"].values())
                 + stage["bubble_s"])
        assert abs(total - it) <= 1e-12 + 1e-9 * it

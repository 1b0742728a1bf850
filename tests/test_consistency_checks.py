"""Consistency checks between the parts of a run: each is an error with a one-line message
naming what to change, or a documented fallback that is printed with the report's assumptions
(docs/errors.md lists them all)."""

from __future__ import annotations

import json

import pytest
from conftest import SEED_512, SEED_1024, SEED_OPTABLE, TOPOLOGIES, WORKLOADS

from sim.cli import main
from sim.errors import InputError, UsageError
from sim.pipeline.schedules import MAX_OPS, schedule_table
from sim.workload.aicb import read_aicb
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program

TINY = str(TOPOLOGIES / "tiny-2x2.yaml")  # 2 nodes × 2 GPUs
TOPO_512 = str(TOPOLOGIES / "dgx-a100-512.yaml")
TOPO_1024 = str(TOPOLOGIES / "dgx-a100-1024.yaml")
GPT3 = str(WORKLOADS / "models" / "gpt3-175b.yaml")


def _row(name: str, fwd_comm: str = "ALLREDUCE", size: int = 1024) -> str:
    return f"{name}\t-1\t100\t{fwd_comm}\t{size}\t50\tNONE\t0\t50\tALLREDUCE\t4096\t100"


def _aicb(header: str, names: list[str], declared: int | None = None) -> str:
    rows = [_row(n) for n in names]
    n = len(rows) if declared is None else declared
    return f"HYBRID_TRANSFORMER_FWD_IN_BCKWD {header}\n{n}\n" + "\n".join(rows) + "\n"


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([*args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simrun: error: "), err
    return lines[0]


# ---- TP·PP·DP versus the GPUs ------------------------------------------------------------------
def test_gpus_not_a_multiple_of_tp_pp_names_where_the_count_came_from():
    with pytest.raises(UsageError) as e:
        build_program(read_workload(SEED_1024), LayoutOptions(all_gpus=1000, default_gpus=1024))
    assert e.value.field == "gpus"
    assert "1000 GPUs (--gpus) is not a multiple of TP·PP = 8·16" in str(e.value)
    text = _aicb("model_parallel_NPU_group: 2 pp: 2 all_gpus: 6", ["a", "b"])
    with pytest.raises(InputError) as e:  # the file's value: file, line and field
        build_program(read_aicb(text, "g.txt"), LayoutOptions(default_gpus=8))
    assert (e.value.file, e.value.line, e.value.field) == ("g.txt", 1, "all_gpus")
    assert e.value.message == "6 GPUs is not a multiple of TP·PP = 2·2 (--gpus overrides)"


def test_layout_needing_more_gpus_than_the_topology(capsys):
    with pytest.raises(UsageError, match="needs 1024 GPUs .header all_gpus. but the topology has "
                                         "512"):
        build_program(read_workload(SEED_1024), LayoutOptions(default_gpus=512))
    rc, out, err = _cli(capsys, "--workload", str(SEED_1024), "--topo", TOPO_512)
    assert rc == 2 and out == "" and "needs 1024 GPUs" in _one_line_error(err)
    # model-driven: DP given explicitly
    rc, out, err = _cli(capsys, "--model", GPT3, "--topo", TOPO_1024, "--tp", "8", "--pp", "8",
                        "--dp", "32", "--global-batch", "64")
    assert rc == 2 and "needs 2048 GPUs (TP 8 x PP 8 x DP 32)" in _one_line_error(err)


def test_a_huge_header_layout_fails_fast_instead_of_building_every_stage():
    """pp = 10^17 stages used to be built one by one before the GPU count was compared."""
    text = _aicb(f"model_parallel_NPU_group: 10 pp: {10**17} all_gpus: {10**18}", ["a", "b"])
    with pytest.raises(UsageError, match=r"needs 1000000000000000000 GPUs"):
        build_program(read_aicb(text, "g.txt"), LayoutOptions(default_gpus=4))


def test_a_group_larger_than_the_cluster(capsys):
    rc, _, err = _cli(capsys, "--workload", str(SEED_OPTABLE), "--topo", TINY, "--tp", "16")
    msg = _one_line_error(err)
    assert rc == 2 and "--gpus: one pipeline replica needs TP·PP = 16·1 = 16 GPUs, more than " \
                       "the 4 GPUs available (the topology)" in msg
    rc, _, err = _cli(capsys, "--workload", str(SEED_OPTABLE), "--topo", TINY, "--ep", "8")
    assert rc == 2 and "--ep: expert-parallel size 8 must divide the data-parallel size DP = 4" \
        in _one_line_error(err)


def test_header_ep_that_does_not_divide_dp_names_the_file():
    text = _aicb("ep: 3 all_gpus: 4", ["a", "b"])
    with pytest.raises(InputError) as e:
        build_program(read_aicb(text, "g.txt"), LayoutOptions())
    assert str(e.value).startswith("g.txt:1: ep: expert-parallel size 3 must divide")


def test_fewer_gpus_than_the_topology_is_a_printed_fallback(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc, _, err = _cli(capsys, "--workload", str(SEED_OPTABLE), "--topo", TINY, "--gpus", "3",
                      "--quiet", "--json", str(out))
    assert rc == 0 and err == ""
    rep = json.loads(out.read_text())
    assert rep["parallelism"]["dp"] == 3
    assert "the layout uses 3 of the topology's 4 GPUs" in rep["assumptions"]
    assert any("not in the file, using 1 (--tp)" in a for a in rep["assumptions"])


# ---- interleaved schedule ----------------------------------------------------------------------
@pytest.mark.parametrize("opts,field,needle", [
    (dict(microbatches=7, vpp=2), "microbatches", "N=8 must lie in [p=8, M=7]"),
    (dict(microbatches=12, vpp=2), "microbatches", "M mod N = 12 mod 8 = 4 must be 0 or ≥ p=8"),
    (dict(microbatches=8, vpp=3), "vpp", "40 layers per stage cannot be split into 3"),
    (dict(microbatches=16, vpp=2, microbatch_group_size=17), "microbatches",
     "N=17 must lie in [p=8, M=16]"),
    (dict(microbatches=8, vpp=2, schedule="gpipe"), "schedule",
     "the gpipe schedule runs one model chunk per stage"),
    (dict(microbatches=8, schedule="1f1b", microbatch_group_size=8), "microbatch_group_size",
     "only the interleaved schedule groups microbatches"),
    (dict(pp=1, all_gpus=8, vpp=2, schedule="interleaved"), "pp",
     "needs ≥ 2 pipeline stages"),
])
def test_interleaved_constraints(opts, field, needle):
    with pytest.raises(UsageError) as e:
        build_program(read_workload(SEED_512), LayoutOptions(**opts))
    assert e.value.field == field and needle in str(e.value), str(e.value)


def test_header_vpp_that_cannot_be_a_virtual_pipeline_size_is_a_printed_fallback(capsys):
    prog = build_program(read_workload(SEED_512), LayoutOptions())
    assert prog.vpp == 1 and prog.schedule == "1f1b"
    assert any("header vpp = 8 cannot be a virtual pipeline size here (interleaved schedule: "
               "microbatch group size N=8 must lie in [p=8, M=1]" in a for a in prog.assumptions)
    rc, out, _ = _cli(capsys, "--workload", str(SEED_512), "--topo", TOPO_512)
    assert rc == 0 and "header vpp = 8 cannot be a virtual pipeline size here" in out


def test_too_many_schedule_ops_are_refused_not_allocated(monkeypatch):
    with pytest.raises(UsageError, match="simrun simulates at most 16,777,216") as e:
        schedule_table("interleaved", 4, MAX_OPS // 16 + 4, 2)
    assert e.value.field == "microbatches"
    monkeypatch.setattr("sim.pipeline.schedules.MAX_OPS", 64)  # the boundary, on a small scale
    assert sum(len(ops) for ops in schedule_table("1f1b", 4, 8)) == 64
    with pytest.raises(UsageError, match="9 microbatches × 4 stages × 1 chunks = 72"):
        schedule_table("1f1b", 4, 9)


def test_huge_microbatch_counts_exit_2_through_both_paths(capsys):
    rc, _, err = _cli(capsys, "--workload", str(SEED_OPTABLE), "--topo", TINY, "--microbatches",
                      str(10**8))
    assert rc == 2 and "200,000,000 forward/backward ops" in _one_line_error(err)
    rc, _, err = _cli(capsys, "--model", str(WORKLOADS / "models" / "gpt2-medium.yaml"),
                      "--topo", TINY, "--global-batch", str(4 * 10**8))
    assert rc == 2 and "simrun simulates at most 16,777,216" in _one_line_error(err)


# ---- header versus rows ------------------------------------------------------------------------
def test_declared_row_count_must_match_the_rows():
    with pytest.raises(InputError) as e:
        read_aicb(_aicb("ga: 1", ["a", "b", "c"], declared=4), "g.txt")
    assert str(e.value) == "g.txt:2: row_count: declares 4 rows but 3 rows follow"


def test_ga_must_divide_the_repeated_region():
    with pytest.raises(InputError) as e:
        build_program(read_aicb(_aicb("ga: 2", ["opt", "a", "b", "a", "b", "a"]), "g.txt"),
                      LayoutOptions())
    assert str(e.value) == ("g.txt:1: ga: ga = 2 does not divide the 3 rows of the repeated "
                            "region (lines 5-7)")  # b, a, b: the names seen a multiple of 2 times
    with pytest.raises(InputError, match="no row name repeats a multiple of 3 times"):
        build_program(read_aicb(_aicb("ga: 3", ["a", "b", "a", "b"]), "g.txt"), LayoutOptions())


def test_unrolled_blocks_that_differ_are_a_printed_fallback():
    rows = [_row("a"), _row("b"), _row("a"), _row("b", size=2048)]  # block 2 differs
    text = "HYBRID_TRANSFORMER_FWD_IN_BCKWD ga: 2\n4\n" + "\n".join(rows) + "\n"
    prog = build_program(read_aicb(text, "g.txt"), LayoutOptions())
    assert prog.microbatches == 2
    assert any("the 2 unrolled blocks are not identical" in a and "lines 6" in a
               for a in prog.assumptions), prog.assumptions


def test_contradicting_duplicate_header_keys():
    with pytest.raises(InputError) as e:
        read_aicb(_aicb("pp: 2 ga: 1 pp: 4", ["a"]), "g.txt")
    assert str(e.value) == "g.txt:1: pp: given twice with different values (2 and 4)"
    with pytest.raises(InputError, match="given twice"):  # tp under both of its names
        read_aicb(_aicb("model_parallel_NPU_group: 8 tp: 4", ["a"]), "g.txt")
    assert read_aicb(_aicb("pp: 2 pp: 2", ["a"]), "g.txt").header.pp == 2  # consistent: fine


def test_overrides_of_the_header_are_printed():
    prog = build_program(read_workload(SEED_512), LayoutOptions(microbatches=8, all_gpus=256,
                                                                 default_gpus=512))
    assert "microbatches per iteration: 8 from --microbatches (file says 1)" in prog.assumptions
    assert "GPUs (all_gpus): 256 from --gpus (file says 512)" in prog.assumptions


def test_pipeline_without_a_message_size_is_an_error():
    text = "\n".join(["HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 2 all_gpus: 2", "1",
                      "a\t-1\t100\tNONE\t0\t50\tNONE\t0\t50\tNONE\t0\t100"]) + "\n"
    with pytest.raises(UsageError, match="no pp_comm and has no TP collective") as e:
        build_program(read_aicb(text, "g.txt"), LayoutOptions())
    assert e.value.field == "pp_comm_bytes"


def test_missing_backward_times_are_a_printed_rule():
    w = read_workload(SEED_OPTABLE)
    assert any("every backward and weight-grad time in the file is 0" in a for a in w.assumptions)
    fwd = sum(lay.forward.compute_ns for lay in w.layers)
    bwd = sum(lay.input_grad.compute_ns + lay.weight_grad.compute_ns for lay in w.layers)
    assert abs(bwd - 2 * fwd) <= len(w.layers)  # backward = 2 × forward, up to 1 ns per row


# ---- model-driven layouts ----------------------------------------------------------------------
@pytest.mark.parametrize("args,needle", [
    (["--tp", "8", "--pp", "8", "--dp", "16", "--global-batch", "7"],
     "--global-batch: global batch 7 is not a multiple of micro_batch·dp = 1·16"),
    (["--tp", "8", "--pp", "8", "--dp", "16", "--global-batch", "256", "--vpp", "5"],
     "--pp: 96 layers cannot be split evenly into pp·vpp = 8·5 model chunks"),
    (["--tp", "8", "--pp", "7", "--global-batch", "8"],
     "--dp: 1024 GPUs are not a multiple of TP·PP = 8·7"),
])
def test_model_layout_checks(capsys, args, needle):
    rc, out, err = _cli(capsys, "--model", GPT3, "--topo", TOPO_1024, *args)
    assert rc == 2 and out == "" and needle in _one_line_error(err)


# ---- topology versus the layout ----------------------------------------------------------------
def test_more_nodes_than_the_fabric_can_join(capsys):
    rc, _, err = _cli(capsys, "--workload", str(SEED_OPTABLE), "--topo", TINY, "--nodes", "9")
    msg = _one_line_error(err)
    assert rc == 2 and f"{TINY}:16: fabric.levels: 9 nodes × 2 NICs need" in msg
    assert "(node count from --nodes)" in msg

"""AICB's physical-format ZeRO-3 log (sim/workload/aicb_csv.py, aicb_zero3.py) with a model
spec: the collectives of a hand-written 2-layer log in a hand-derived timeline, malformed rows
refused with file:line:field, and the shipped Llama-65B log on a 128-GPU A100 cluster."""

import json
import time

import pytest
from conftest import ROOT
from par_support import make_par

from sim.cli import main
from sim.comm import GroupKind
from sim.engine import simulate
from sim.network.simple import AlphaBetaNetwork
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.workload.aicb_csv import read_log
from sim.workload.aicb_zero3 import step_tasks, weave

DATA = ROOT / "tests" / "data"
LOG = DATA / "aicb-zero3-2layer.csv"
MODEL = DATA / "tiny-llama-2layer.yaml"
LOG65 = ROOT / "workloads" / "aicb-llama65b-deepspeed-zero3-physical.csv"


def _chain(start, items):
    """Back-to-back (start, end, label) from (label, duration) pairs."""
    out = []
    for label, dur in items:
        out.append((start, start + dur, label))
        start += dur
    return out


def test_two_layer_log_hand_derived_timeline():
    # The log's tensors (bytes): embedding E 32768, norm n 128, attention a 8192, MLP m 16384.
    # Rows here: embedding (E), layer0 and layer1 (n a a a a n m m m: 41088 parameters each),
    # output (n E); every row 10 µs forward, input grad and weight grad; optimizer 1 µs.
    # α = 0, 0.75 GB/s over DP 4: an all-gather or reduce-scatter of S bytes takes S ns, an
    # all-reduce 2S ns. All-gathers block; reduce-scatters run beside compute.
    log = read_log(LOG.read_text(), str(LOG))
    assert (log.ranks, log.group_size, len(log.rows)) == (4, 4, 52)
    assert log.skipped == {"init._broadcast_model": 1, "init._allgather_params": 1,
                           "init._create_fp16_partitions_with_defragmentation": 1,
                           "epoch_end": 2}
    names, params = ["embedding", "layer0", "layer1", "output"], [16384, 41088, 41088, 16448]
    layers = [Layer(n, Phase(10000), Phase(10000), Phase(10000)) for n in names]
    epilogue = step_tasks(log, (Task("optimizer", TaskKind.OPTIMIZER, compute_ns=1000,
                                     wait_async=True),))
    prog = PipelineProgram(tp=1, pp=1, dp=4, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [tuple(weave(log, layers, params))],
                                                epilogue=epilogue)], schedule="1f1b")
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.DP: 0.75}), record_spans=True)
    got = sorted((s.start_ns, s.end_ns, s.label.removeprefix("aicb_")) for s in res.spans
                 if s.end_ns > s.start_ns)
    layer = [("n", 128), ("a", 8192), ("a", 8192), ("a", 8192), ("a", 8192), ("n", 128),
             ("m", 16384), ("m", 16384), ("m", 16384)]

    def fwd(first, sizes):
        return [(f"line{first + i}_forward.allgather_fn.forward", d)
                for i, (_, d) in enumerate(sizes)]

    def bwd(lines, sizes):
        return [(f"line{ln}_backward.allgather_fn.input_grad", d)
                for ln, (_, d) in zip(lines, sizes, strict=True)]

    # forward: gather E, embedding; layer0's nine gathers (lines 8-16), layer0; layer1's
    # (17-25); n and E of the output (26, 27), output: 270016 ns.
    # backward (file order): E, n of the output (28, 29) before its backward; layer1's nine
    # gathers (30-34, 36-39) before its backward; the bucket reduce-scatter of line 35
    # (output + layer1's MLP half: 41088 gradients) once layer1's weight grad has run, at
    # 425088, beside layer0's gathers (40-44, 46-49); line 45's bucket after layer0, beside
    # the embedding's gather (50) and backward. The step: its reduce-scatter waits for line 45
    # (609440), then 65664 + 2 + 16 ns, optimizer 1000, five 128-byte all-gathers.
    expect = _chain(0, [("line7_forward.allgather_fn.forward", 32768),
                        ("embedding", 10000), *fwd(8, layer), ("layer0", 10000),
                        *fwd(17, layer), ("layer1", 10000), *fwd(26, [("n", 128), ("E", 32768)]),
                        ("output", 10000),
                        *bwd([28, 29], [("E", 32768), ("n", 128)]),
                        ("output", 10000), ("output", 10000),
                        *bwd([30, 31, 32, 33, 34, 36, 37, 38, 39], layer[::-1]),
                        ("layer1", 10000), ("layer1", 10000),
                        *bwd([40, 41, 42, 43, 44, 46, 47, 48, 49], layer[::-1]),
                        ("layer0", 10000), ("layer0", 10000),
                        ("line50_backward.allgather_fn.input_grad", 32768),
                        ("embedding", 10000), ("embedding", 10000), ("wait DP", 29408),
                        ("line51_step.reduce_scatter_fn", 65664),
                        ("line52_step.has_overflow", 2),
                        ("line53_step.get_grad_norm_direct", 16), ("optimizer", 1000),
                        *[(f"line{ln}_step.allgather_fn", 128) for ln in range(54, 59)]])
    expect += [(425088, 507264, "line35_backward.reduce_scatter_fn.weight_grad"),
               (527264, 609440, "line45_backward.reduce_scatter_fn.weight_grad")]
    assert got == sorted(expect)
    assert res.iteration_ns == 676762


def _run(tmp_path, capsys, *extra, log=LOG, model=MODEL):
    out = tmp_path / "r.json"
    rc = main(["--workload", str(log), "--model", str(model), "--topo", "tiny-2x2",
               "--json", str(out), "--quiet", *extra])
    return rc, capsys.readouterr().err, out


def test_two_layer_log_with_the_model_spec(tmp_path, capsys):
    rc, err, out = _run(tmp_path, capsys)
    assert rc == 0, err
    rep = json.loads(out.read_text())
    said = " ".join(rep["assumptions"])
    assert "21 forward and 21 backward parameter all-gathers, 2 gradient-bucket" in said
    assert "epoch_end (2)" in said and "init._allgather_params (1)" in said
    assert rep["parallelism"]["dp"] == 4 and rep["microbatches"] == 1


@pytest.mark.parametrize("line,old,new,field", [
    (1, "[rank0 ~ rank3]", "ranks 0-3", "ranks"),
    (2, "busbw,count", "busbw,count,extra", "header"),
    (8, "forward.allgather_fn", "forward.allgather", "stage"),
    (8, "CommType.all_gather", "CommType.reduce_scatter", "comm_type"),
    (8, "CommType.all_gather", "all_gather", "comm_type"),
    (8, ",128,forward", ",12x,forward", "msg_size"),
    (8, ",128,forward", ",127,forward", "msg_size"),  # not whole 16-bit parameters
    (8, ",128,forward", ",256,forward", "msg_size"),  # larger than the model's attn_norm
    (8, "CommGroup.dp_group,4", "CommGroup.dp_group,2", "comm_group_size"),
    (8, "CommGroup.dp_group,4", "CommGroup.dp_group,8", "comm_group_size"),
    (8, "CommGroup.dp_group", "CommGroup.tp_group", "comm_group"),
    (8, "None,None,1", "None,None,2", "count"),
    (8, ",None,None,,None", ",None,None,,fast", "_elapsed_time"),
    (8, ",None,None,,None,None,None,1", ",None,None,1", "columns"),
    (29, "backward.allgather_fn", "forward.allgather_fn", "stage"),
    (35, ",82176,", ",82177,", "msg_size"),
    (51, ",65664,", ",65600,", "msg_size"),  # the reduce-scatters miss 32 gradients
])
def test_malformed_rows_exit_2_naming_file_line_field(tmp_path, capsys, line, old, new, field):
    lines = LOG.read_text().splitlines()
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    rc, err, out = _run(tmp_path, capsys, log=bad)
    assert rc == 2 and not out.exists()
    msg = err.strip().splitlines()
    assert len(msg) == 1 and f"{bad}:{line}: {field}:" in msg[0], msg


def test_log_alone_and_other_files_with_a_model_refused(tmp_path, capsys):
    assert main(["--workload", str(LOG), "--topo", "tiny-2x2", "--quiet"]) == 2
    assert "--model: " in capsys.readouterr().err
    assert main(["--workload", str(ROOT / "workloads/aicb-llama7b-deepspeed-zero3-a100.txt"),
                 "--model", str(MODEL), "--topo", "tiny-2x2", "--quiet"]) == 2
    assert "--workload: give --workload PATH or --model PATH" in capsys.readouterr().err
    rc, err, _ = _run(tmp_path, capsys, "--tp", "2")
    assert rc == 2 and "--tp: the log fixes it" in err


def test_recompute_full_gathers_each_layer_before_its_rerun(tmp_path, capsys):
    from sim.models.generator import generate
    from sim.models.vocab.spec import load_model
    from sim.scenario.collective_log import load_log, units_of
    from sim.topology.gpu import GpuSpec

    model = load_model(MODEL)
    par = make_par(dp=4, global_batch=4, zero=3, recompute="full")
    prog = generate(model, par, GpuSpec("G", {"bf16": 100.0}, 16, 1000,
                                        compute_efficiency=0.5),
                    zero3=units_of(load_log(str(LOG)), model))
    walk = [lay.name for lay in reversed(prog.stages[0].chunks[0])]  # the backward order
    rerun = walk.index("layer1_recompute_attn_norm")  # the layer's first backward step
    gathers = [i for i, n in enumerate(walk) if "backward.allgather_fn" in n]
    # layer 1's nine gathers (lines 30-34, 36-39) all come before its re-run forward
    layer1 = [walk.index(f"aicb_line{ln}_backward.allgather_fn") for ln in
              (30, 31, 32, 33, 34, 36, 37, 38, 39)]
    assert max(layer1) < rerun and layer1 == sorted(layer1)
    assert gathers == sorted(gathers)  # file order kept
    # line 35's bucket (the output rows and layer 1's MLP) after layer 1's mlp_norm backward
    assert walk.index("aicb_line35_backward.reduce_scatter_fn") > walk.index(
        "layer1_mlp_norm")


def test_shipped_llama65b_log_on_128_a100(tmp_path, capsys):
    t0 = time.perf_counter()
    out = tmp_path / "r.json"
    rc = main(["--workload", str(LOG65), "--model", "aicb-llama65b", "--topo", "dgx-a100-1024",
               "--nodes", "16", "--recompute", "full", "--json", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert time.perf_counter() - t0 < 60  # a few seconds alone on the 2-core reference
    rep = json.loads(out.read_text())
    said = " ".join(rep["assumptions"])
    assert "723 forward and 723 backward parameter all-gathers, 80 gradient-bucket" in said
    assert "161 all-gathers after it" in said
    assert rep["parallelism"]["dp"] == 128 and rep["microbatches"] == 1
    # the spec's 78.4 B parameters are the file's (every tensor matched, all reduced)
    assert "init._broadcast_model (723)" in said


def test_spec_that_does_not_match_the_65b_log_is_refused(capsys):
    # Llama 2 70B: grouped-query attention (k, v of 8192 x 1024): the file's second
    # attention tensor (line 1456, k: 8192 x 8192) does not fit its QKV row
    assert main(["--workload", str(LOG65), "--model", "llama2-70b", "--topo", "dgx-a100-1024",
                 "--nodes", "16", "--recompute", "full", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{LOG65}:1456: msg_size:" in err and "layer0_attn_qkv" in err

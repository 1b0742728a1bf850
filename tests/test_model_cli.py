"""``simrun --model`` (model-driven runs), ``simrun generate`` (AICB round trip) and
``simrun inspect`` from the main CLI."""

from __future__ import annotations

import json

import pytest
from conftest import TOPOLOGIES, WORKLOADS

from sim.cli import main

TOPO = str(TOPOLOGIES / "dgx-a100-1024.yaml")
GPT22 = str(WORKLOADS / "models" / "gpt-22b.yaml")
GPT175 = str(WORKLOADS / "models" / "gpt3-175b.yaml")
# gpt-22b: 48 layers, hidden 6144, 64 heads, vocab 51200, sequence 2048
# (docs/calibration.md section B)
L, H, S, V = 48, 6144, 2048, 51200


def run_json(tmp_path, *args, name="r.json"):
    out = tmp_path / name
    rc = main([*map(str, args), "--json", str(out), "--quiet"])
    assert rc == 0
    return json.loads(out.read_text())


def test_model_run_reports_consistent_throughput_mfu_and_memory(tmp_path):
    # 2 nodes, TP 8 x PP 2 → DP defaults to 16 / (8·2) = 1; 8 microbatches of 1
    rep = run_json(tmp_path, "--model", GPT22, "--topo", TOPO, "--nodes", 2, "--tp", 8, "--pp",
                   2, "--global-batch", 8, "--sequence-parallel", "--recompute", "selective",
                   "--attention-backend", "unfused")
    assert rep["parallelism"] == {"tp": 8, "pp": 2, "dp": 1, "ep": 1, "world_size": 16}
    assert rep["microbatches"] == 8
    it = rep["iteration_time_s"]
    B = 8
    # Korthikanti et al.: 72·B·L·s·h²·(1 + s/(6h) + V/(12hL)) = 72BLsh² + 12BLs²h + 6BshV
    flops = 72 * B * L * S * H * H + 12 * B * L * S * S * H + 6 * B * S * H * V
    assert rep["model_flops_per_iteration"] == flops
    assert rep["tflops_per_gpu"] == pytest.approx(flops / it / 16 / 1e12, rel=1e-12)
    assert rep["peak_tflops_per_gpu"] == 312  # A100 bf16 dense, from the topology file
    assert rep["mfu"] == pytest.approx(rep["tflops_per_gpu"] / 312, rel=1e-12)
    assert rep["tokens_per_s"] == pytest.approx(B * S / it, rel=1e-12)
    # hardware FLOPs: selective recompute re-runs the attention core forward, 4·B·L·s²·h
    assert rep["hardware_flops_per_iteration"] == flops + 4 * B * L * S * S * H
    mem = rep["memory"]
    assert mem["capacity_bytes"] == 80 * 10**9 and mem["feasible"] is True
    for st in mem["stages"]:
        parts = [st[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes",
                                 "activations_bytes", "reserved_bytes")]
        assert st["total_bytes"] == sum(parts) and all(p > 0 for p in parts)
    assert mem["peak_bytes"]["total_bytes"] == max(st["total_bytes"] for st in mem["stages"])
    # weights: 2 bytes per parameter of the last stage's TP shard: 24 layers of
    # QKV 3h²/8 + 3h/8, proj h²/8 + h (row-parallel bias replicated), fc1 4h²/8 + 4h/8,
    # fc2 4h²/8 + h, two LayerNorms 4h; the final LayerNorm 2h; the tied output layer's copy of
    # the word embedding V·h/8 (51200 is already a multiple of 128·8)
    per_layer = 12 * H * H // 8 + 7 * H // 8 + 6 * H
    assert mem["stages"][1]["weights_bytes"] == 2 * (24 * per_layer + 2 * H + V * H // 8)
    assert any("memory per GPU: stage" in a for a in rep["assumptions"])


def test_dp_defaults_to_the_gpus_left_and_microbatches_must_agree(tmp_path):
    rep = run_json(tmp_path, "--model", GPT22, "--topo", TOPO, "--nodes", 4, "--tp", 8, "--pp",
                   2, "--global-batch", 16, "--sequence-parallel", "--recompute", "full")
    assert rep["parallelism"]["dp"] == 2 and rep["microbatches"] == 8
    # --microbatches alone gives the global batch: 4 × 1 × DP 2 = 8 sequences
    rep = run_json(tmp_path, "--model", GPT22, "--topo", TOPO, "--nodes", 4, "--tp", 8, "--pp",
                   2, "--microbatches", 4, "--recompute", "full", "--sequence-parallel")
    assert rep["training"]["global_batch"] == 8 and rep["microbatches"] == 4


@pytest.mark.parametrize("args, field, text", [
    (["--microbatches", "5", "--global-batch", "16"], "--microbatches", "but --global-batch is"),
    (["--dp", "3"], "--dp", "TP·PP·DP"),
    ([], "--global-batch", "required"),
    (["--global-batch", "16", "--pp", "2", "--vpp", "5"], "--pp", "48 layers"),
    (["--global-batch", "16", "--pp-comm-bytes", "10"], "--pp-comm-bytes", "workload files"),
])
def test_bad_model_flags_are_one_line_usage_errors(capsys, args, field, text):
    rc = main(["--model", GPT22, "--topo", TOPO, "--nodes", "4", "--gpus", "32", "--tp", "8",
               *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert field in err and text in err


def test_infeasible_memory_is_an_error_with_the_reason(capsys):
    rc = main(["--model", GPT175, "--topo", TOPO, "--tp", "1", "--pp", "1", "--dp", "1",
               "--global-batch", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert "does not fit in GPU memory" in err and "exceeds the 80.0 GB" in err
    assert "weights 349.2" in err  # 174.6e9 parameters × 2 bytes on one GPU


def test_workload_and_model_are_mutually_exclusive(capsys):
    rc = main(["--model", GPT22, "--workload", GPT22, "--topo", TOPO])
    assert rc == 2 and "exactly one" in capsys.readouterr().err
    rc = main(["--topo", TOPO])
    assert rc == 2 and "exactly one" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--attention-backend", "flash"], ["--flash-attention"]])
def test_attention_backend_is_refused_for_workload_files(capsys, flag):
    """An AICB file carries its own measured attention times: the backend flags would change
    nothing, so they are refused (exit 2) rather than ignored."""
    rc = main(["--workload", str(WORKLOADS / "aicb-gpt13b-tp8-pp8-512gpu.txt"), "--topo", TOPO,
               *flag])
    err = capsys.readouterr().err
    assert rc == 2 and f"{flag[0]}: applies to --model runs" in err


LAYOUT_175 = ["--model", GPT175, "--topo", TOPO, "--nodes", "16", "--tp", "8", "--pp", "8",
              "--vpp", "3", "--global-batch", "64", "--sequence-parallel", "--recompute",
              "selective", "--distributed-optimizer"]


def test_generated_aicb_file_reads_back_to_the_same_iteration(tmp_path, capsys):
    """simrun generate writes stage 0 as the representative stage. Read back, every stage runs
    the same compute; the optimizer epilogue and the DP gradient buckets are stage 0's
    everywhere (other stages hold no embedding; Megatron-Core gives their chunks one bucket each,
    the text cannot), so the iteration differs by what those DP collectives do to the timeline
    (0.17% here) and no more than 1%."""
    w = tmp_path / "w.txt"
    # the text's gradient placement: per bucket on every stage (no delayed reduction)
    layout = [*LAYOUT_175, "--no-delay-grad-reduce"]
    assert main(["generate", *layout, "--out", str(w)]) == 0
    assert "wrote" in capsys.readouterr().out
    head = w.read_text().split("\n", 2)
    assert head[0].startswith("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ")
    assert "pp: 8 vpp: 3 ga: 32 all_gpus: 128" in head[0]
    a = run_json(tmp_path, *layout, name="a.json")
    b = run_json(tmp_path, "--workload", w, "--topo", TOPO, "--nodes", 16, name="b.json")
    assert b["parallelism"] == a["parallelism"] and b["microbatches"] == a["microbatches"]
    assert b["iteration_time_s"] == pytest.approx(a["iteration_time_s"], rel=0.01)
    assert b["iteration_time_s"] != a["iteration_time_s"]  # the buckets do differ
    for x, y in zip(a["stages"], b["stages"], strict=True):
        assert x["compute_s"] == pytest.approx(y["compute_s"], abs=1e-9)


def test_generate_without_pipeline_reads_back_exactly(tmp_path):
    w = tmp_path / "w.txt"
    args = ["--model", GPT22, "--topo", TOPO, "--nodes", "2", "--tp", "8", "--global-batch",
            "8", "--micro-batch", "2", "--recompute", "full"]
    assert main(["generate", *args, "--out", str(w)]) == 0
    a = run_json(tmp_path, *args, name="a.json")
    b = run_json(tmp_path, "--workload", w, "--topo", TOPO, "--nodes", 2, name="b.json")
    assert a["stages"] == b["stages"]  # (layer names lose their indices in AICB text)


def test_generate_errors_and_atomic_output(tmp_path, capsys):
    rc = main(["generate", *LAYOUT_175, "--out", str(tmp_path / "missing" / "w.txt")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()
    rc = main(["generate", *LAYOUT_175, "--out", str(tmp_path / "w.txt"), "--stage", "8"])
    assert rc == 2 and "--stage" in capsys.readouterr().err


def test_inspect_runs_from_the_main_cli(capsys):
    rc = main(["inspect", str(WORKLOADS / "models" / "gpt2-pipe-stage-params-tp4.txt")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "tensor parallel: 4" in out and "hidden: 1024" in out
    assert "ffn_hidden: 4096" in out and "sequence length: 1024" in out
    rc = main(["inspect", GPT175])
    out = capsys.readouterr().out
    # exact count: 96 layers × (12h² + 13h) + (V + s)·h + final LayerNorm 2h, h = 12288
    h = 12288
    assert rc == 0 and f"parameters: {96 * (12 * h * h + 13 * h) + (V + S) * h + 2 * h:,}" in out

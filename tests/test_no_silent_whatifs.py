"""No silent what-ifs (sim/options/applicable.py): every flag of the main run × input kind either
changes the simulation, with the report saying how, or exits 2 with a one-line reason naming the
flag.

One test per (flag, input kind) of the table: ``refused`` → exit 2 naming the flag; ``changes``
→ the result and what the report states both differ from the run without the flag; ``states``
(the default given explicitly) → the same result; ``mode`` → the same iteration, stated
differently; ``output`` → exit 0; ``refused-if`` → an example where it is refused and, where one
exists, an example where it changes the run.
"""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, SEED_512, SEED_OPTABLE

from sim.cli import build_parser, main
from sim.options import applicable

INPUTS = {
    "aicb": ["--workload", str(SEED_512), "--topo", "dgx-a100-512"],
    "optable": ["--workload", str(SEED_OPTABLE), "--topo", "tiny-2x2"],
    "model": ["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "2", "--global-batch",
              "8"],
    # AICB's physical-format ZeRO-3 log of DP 4 with the model spec whose tensors it gathers
    "aicb-csv": ["--workload", str(ROOT / "tests/data/aicb-zero3-2layer.csv"), "--model",
                 str(ROOT / "tests/data/tiny-llama-2layer.yaml"), "--topo", "tiny-2x2"],
}
SLOW_GPU = ["--slow-gpu", "1:2"]
PROFILE = ROOT / "tests/data/calibration/a100-example.yaml"  # of another cluster than INPUTS'

# flag -> {kind or "*": example arguments}; "refused-if" flags: {kind: (refused, accepted)}
EXAMPLES: dict[str, dict[str, list[str]]] = {
    "--workload": {"*": [], "model": ["--workload", str(SEED_512)]},
    "--model": {"*": ["--model", "gpt2-medium"], "aicb-csv": []},
    "--megatron-args": {"*": ["--megatron-args", str(ROOT / "tests/data/megatron/"
                                                     "gpt2-medium-tp2.args")]},
    "--job-config": {"*": ["--job-config", str(ROOT / "tests/data/torchtitan/llama3_70b.toml")]},
    "--format": {"aicb": ["--format", "aicb"], "optable": ["--format", "optable"],
                 "model": ["--format", "aicb"], "aicb-csv": ["--format", "aicb"]},
    "--set": {"aicb": (["--set", "node.gpu.hbm_GBps=4800"],
                       ["--set", "fabric.link_bandwidth_gbps=100"]),
              "optable": (["--set", "node.gpu.hbm_GBps=4800"],
                          ["--set", "node.nics.bandwidth_gbps=40"]),
              "model": ["--set", "node.nics.bandwidth_gbps=40"],
              "aicb-csv": ["--set", "node.nics.bandwidth_gbps=40"]},
    "--topo": {"aicb": ["--topo", "dgx-h100-1024"], "*": ["--topo", "tiny-nvlink-4"]},
    "--nodes": {"aicb": ["--nodes", "32", "--gpus", "256"], "*": ["--nodes", "1"],
                "aicb-csv": ["--nodes", "3"]},
    # one process on each node's first GPU: twice the nodes, and groups cross them
    "--nproc-per-node": {"aicb": ["--nproc-per-node", "4"],
                         "*": ["--nproc-per-node", "1", "--nodes", "4"]},
    "--pp": {"*": ["--pp", "2"], "model": ["--pp", "2"]},
    "--vpp": {"*": ["--vpp", "2"]},
    "--microbatches": {"*": ["--microbatches", "2"]},
    "--gpus": {"aicb": ["--gpus", "256"], "*": ["--gpus", "2"]},
    "--schedule": {"*": ["--schedule", "zb-h1"]},
    "--microbatch-group-size": {"*": ["--microbatch-group-size", "4"],
                                "aicb": ["--microbatch-group-size", "16"]},
    "--pp-comm-bytes": {"*": ["--pp-comm-bytes", "104857600"]},
    "--placement": {"*": ["--placement", "dp-tp-pp"], "aicb": ["--placement", "pp-tp-dp"],
                    "model": ["--placement", "pp-tp-dp"]},
    "--per-rank": {"*": ["--per-rank"]}, "--no-fuse": {"*": ["--no-fuse"]},
    "--max-sim-time-s": {"*": ["--max-sim-time-s", "1000"]},
    "--full-simulation": {"*": ["--full-simulation"]},
    "--algorithm": {"*": ["--algorithm", "tree"]}, "--protocol": {"*": ["--protocol", "LL"],
                                                   "aicb-csv": ["--protocol", "Simple"]},
    # the default D-mod-K routes of these runs collide nowhere, like adaptive routing; ECMP's
    # hashing collides on the oversubscribed leaves' up-links
    "--routing": {"*": ["--routing", "ecmp"]},
    "--nccl-algo": {"*": ["--nccl-algo", "allreduce:tree"]},
    "--nccl-proto": {"*": ["--nccl-proto", "LL"], "aicb-csv": ["--nccl-proto", "Simple"]},
    "--nccl-nvls-enable": {"*": ["--nccl-nvls-enable", "0"]},
    "--nccl-collnet-enable": {"*": ["--nccl-collnet-enable", "1"]},
    "--kernel-table": {"aicb": (["--kernel-table", "h100-sxm"], ["--kernel-table", "h100-sxm",
                                                                 "--topo", "dgx-h100-1024"]),
                       "optable": (["--kernel-table", "h100-sxm"], None),
                       "model": ["--kernel-table", "none"],
                       "aicb-csv": ["--kernel-table", "none"]},
    "--compute-efficiency": {"aicb": (["--compute-efficiency", "0.5"],
                                      ["--compute-efficiency", "0.5", "--topo",
                                       "dgx-h100-1024"]),
                             "optable": (["--compute-efficiency", "0.5"], None),
                             "model": ["--compute-efficiency", "0.5"],
                             "aicb-csv": ["--compute-efficiency", "0.5"]},
    "--sustained-slowdown": {"*": ["--sustained-slowdown", "1.2"]},
    "--source-gpu": {"aicb": (["--source-gpu", "A100-SXM4-80GB"],
                              ["--source-gpu", "H100-SXM5-80GB"]),
                     "optable": (["--source-gpu", "A100-SXM4-80GB", "--topo", "dgx-a100-512"],
                                 ["--source-gpu", "H100-SXM5-80GB", "--topo", "dgx-a100-512"]),
                     "model": ["--source-gpu", "A100-SXM4-80GB"],
                     "aicb-csv": ["--source-gpu", "A100-SXM4-80GB"]},
    "--compute-scale": {"*": ["--compute-scale", "1.5"]},
    "--calibration": {"*": ["--calibration", str(PROFILE), "--calibration-any-cluster"]},
    "--calibration-any-cluster": {"*": (["--calibration-any-cluster"],
                                        ["--calibration", str(PROFILE),
                                         "--calibration-any-cluster"])},
    "--slow-gpu": {"*": SLOW_GPU}, "--slow-node": {"*": ["--slow-node", "1:2"]},
    "--degrade-link": {"*": ["--degrade-link", "nic:0.0:0.5"],
                       "aicb": ["--degrade-link", "nic:0.0:0.1"]},
    "--fail-nic": {"*": ["--fail-nic", "0.0"]},
    "--json": {"*": ["--json", "-"]}, "--quiet": {"*": ["--quiet"]},
    "--timing": {"*": ["--timing"]}, "--trace": {"*": ["--trace", "{tmp}/t.json"]},
    # output qualifiers: refused alone (writing with them is tested in test_trace*.py)
    "--trace-ranks": {"*": (["--trace-ranks", "all"], None)},
    "--trace-format": {"*": (["--trace-format", "kineto"], None)},
    "--chakra": {"*": ["--chakra", "{tmp}/et"]},
    "--plot": {"*": ["--plot", "{tmp}/p.svg"]},
    "--plot-window": {"*": (["--plot-window", "0:1"], None)},
    "--plot-microbatches": {"*": (["--plot-microbatches", "1"], None)},
    "--breakdown-plot": {"*": ["--breakdown-plot", "{tmp}/b.svg"]},
    "--help": {"*": ["--help"]}, "--version": {"*": ["--version"]},
    "--verbose": {"*": ["--verbose"]}, "--force": {"*": (["--force"], None)},
    # workload-file flags
    "--tp": {"aicb": (["--tp", "4"], None), "*": ["--tp", "2"], "model": ["--tp", "1"]},
    "--ep": {"aicb": (["--ep", "2"], None), "optable": (["--ep", "2"], None),
             "model": (["--ep", "2"], None), "aicb-csv": ["--ep", "2"]},
    "--row-placement": {"aicb": (["--row-placement", "all", "--workload",
                                  "aicb-micro-all-to-all", "--topo", "tiny-2x2"],
                                 ["--row-placement", "all"]),
                        "optable": (["--row-placement", "all"], None),
                        "model": ["--row-placement", "all"],
                        "aicb-csv": ["--row-placement", "all"]},
    "--bytes-per-element": {"*": ["--bytes-per-element", "2"]},
    "--missing-backward-ratio": {"optable": (["--missing-backward-ratio", "3", "--workload",
                                              "{tmp}/with-backward.tsv"],
                                             ["--missing-backward-ratio", "3"]),
                                 "*": ["--missing-backward-ratio", "3"]},
    # model flags (refused with files)
    "--dp": {"*": ["--dp", "1"]}, "--micro-batch": {"*": ["--micro-batch", "2"]},
    "--global-batch": {"*": ["--global-batch", "16"]},
    "--sequence-parallel": {"model": (["--sequence-parallel", "--tp", "1"],
                                      ["--sequence-parallel"]), "*": ["--sequence-parallel"]},
    "--recompute": {"*": ["--recompute", "full"]}, "--dtype": {"*": ["--dtype", "fp8"]},
    "--distributed-optimizer": {"model": (["--distributed-optimizer", "--dp", "1", "--gpus",
                                           "2"], ["--distributed-optimizer"]),
                                "*": ["--distributed-optimizer"]},
    "--flash-attention": {"*": ["--flash-attention"]},
    "--attention-backend": {"*": ["--attention-backend", "unfused"]},
    "--overlap-grad-reduce": {"model": (["--overlap-grad-reduce", "--dp", "1", "--gpus", "2"],
                                        None), "*": ["--overlap-grad-reduce"]},
    "--no-overlap-grad-reduce": {"model": (["--no-overlap-grad-reduce", "--dp", "1", "--gpus",
                                            "2"], ["--no-overlap-grad-reduce"]),
                                 "*": ["--no-overlap-grad-reduce"]},
    "--no-delay-grad-reduce": {"model": (["--no-delay-grad-reduce"],
                                         ["--no-delay-grad-reduce", "--tp", "1", "--pp", "2",
                                          "--vpp", "2"]),
                               "*": ["--no-delay-grad-reduce"]},
    "--defer-embedding-wgrad-compute": {
        "model": (["--defer-embedding-wgrad-compute"],  # PP 1: Megatron-Core refuses it
                  ["--defer-embedding-wgrad-compute", "--pp", "2"]),
        "*": ["--defer-embedding-wgrad-compute"]},
    "--wgrad-deferral-limit": {
        "model": (["--wgrad-deferral-limit", "2", "--pp", "2"],  # without the option
                  ["--defer-embedding-wgrad-compute", "--wgrad-deferral-limit", "1", "--pp",
                   "2"]),
        "*": ["--wgrad-deferral-limit", "2"]},
    "--grad-reduce-in-bf16": {"model": (["--grad-reduce-in-bf16", "--fsdp"],
                                        ["--grad-reduce-in-bf16"]),
                              "*": ["--grad-reduce-in-bf16"]},
    "--ddp-bucket-size": {"model": (["--ddp-bucket-size", "1000000", "--no-overlap-grad-reduce"],
                                    ["--ddp-bucket-size", "1000000"]),
                          "*": ["--ddp-bucket-size", "1000000"]},
    "--overlap-param-gather": {"model": ["--overlap-param-gather", "--distributed-optimizer"],
                               "*": ["--overlap-param-gather"]},
    "--overlap-param-gather-with-optimizer-step": {
        "*": ["--overlap-param-gather-with-optimizer-step"]},
    "--decoder-first-pipeline-num-layers": {"*": ["--decoder-first-pipeline-num-layers", "8"]},
    "--decoder-last-pipeline-num-layers": {"*": ["--decoder-last-pipeline-num-layers", "8"]},
    "--account-for-embedding-in-pipeline-split": {
        "*": ["--account-for-embedding-in-pipeline-split"]},
    "--account-for-loss-in-pipeline-split": {"*": ["--account-for-loss-in-pipeline-split"]},
    # gpt2-medium's 24 layers on 2 stages as 11 + 13 (the even split is 12 + 12)
    "--pipeline-model-parallel-layout": {"*": ["--pipeline-model-parallel-layout",
                                               "Et*11|t*13L"]},
    "--context-parallel-size": {"*": ["--context-parallel-size", "2", "--flash-attention"]},
    "--zero": {"aicb": ["--zero", "1"], "optable": ["--zero", "1"], "aicb-csv": ["--zero", "3"],
               "model": (["--zero", "1", "--dp", "1", "--gpus", "2"], ["--zero", "1"])},
    "--fsdp": {"aicb": ["--fsdp"], "optable": ["--fsdp"], "aicb-csv": ["--fsdp"],
               "model": (["--fsdp", "--dp", "1", "--gpus", "2"], ["--fsdp"])},
    "--moe-load-imbalance": {"*": ["--moe-load-imbalance", "1.5"]},
    "--moe-expert-capacity-factor": {"*": ["--moe-expert-capacity-factor", "1.0"]},
    # model: on MOE_MODEL (EP 4 over tiny-2x2's two nodes); refused at EP 1
    "--moe-token-dispatcher-type": {
        "model": (["--moe-token-dispatcher-type", "flex", "--ep", "1"],
                  ["--moe-token-dispatcher-type", "flex"]),
        "*": ["--moe-token-dispatcher-type", "flex"]},
    "--moe-shared-expert-intermediate-size": {
        "*": ["--moe-shared-expert-intermediate-size", "512"]},
    # model: on MOE_MODEL (TP 1, EP 4 on 4 GPUs): ETP·EP = 3·4 does not divide the 4 ranks;
    # ETP 2 with EP 2 against EP 2 alone
    "--expert-tensor-parallel-size": {
        "model": (["--expert-tensor-parallel-size", "3"],
                  ["--expert-tensor-parallel-size", "2", "--ep", "2"]),
        "*": ["--expert-tensor-parallel-size", "1"]},
    "--ignore-memory": {"model": (["--ignore-memory"], None), "*": ["--ignore-memory"],
                        "aicb-csv": (["--ignore-memory"], None)},
    # model: on H100_MODEL with --dtype fp8 (CONTEXT); refused in a bf16 run
    "--fp8-recipe": {"model": (["--fp8-recipe", "tensorwise", "--dtype", "bf16"],
                               ["--fp8-recipe", "tensorwise"]),
                     "*": ["--fp8-recipe", "tensorwise"]},
    # model: on H100_MODEL with fp8 and the distributed optimizer (CONTEXT); refused in bf16
    "--fp8-param-gather": {"model": (["--fp8-param-gather", "--dtype", "bf16"],
                                     ["--fp8-param-gather"]),
                           "*": ["--fp8-param-gather"]},
    # model: on B200_MODEL (data-center Blackwell, bf16); refused with --dtype fp8
    "--fp4-format": {"model": (["--fp4-format", "e2m1", "--dtype", "fp8"],
                               ["--fp4-format", "e2m1"]),
                     "*": ["--fp4-format", "e2m1"]},
    # nvfp4 is the only recipe modelled (its default): refused without --fp4-format
    "--fp4-recipe": {"model": (["--fp4-recipe", "nvfp4"], None),
                     "*": ["--fp4-recipe", "nvfp4"]},
    # model: on B200_MODEL with --fp4-format (CONTEXT); refused without the distributed
    # optimizer, compared with it (BEFORE)
    "--fp4-param-gather": {"model": (["--fp4-param-gather"],
                                     ["--fp4-param-gather", "--distributed-optimizer"]),
                           "*": ["--fp4-param-gather"]},
    "--tp-comm-overlap": {"model": (["--tp-comm-overlap"], ["--tp-comm-overlap",
                                                            "--sequence-parallel"]),
                          "*": ["--tp-comm-overlap"]},
    "--async-tensor-model-parallel-allreduce": {
        "model": (["--async-tensor-model-parallel-allreduce", "--tp-comm-overlap",
                   "--sequence-parallel"], ["--async-tensor-model-parallel-allreduce"]),
        "*": ["--async-tensor-model-parallel-allreduce"]},
    "--compile": {"*": ["--compile"]},
    # model: on MOE_MODEL (EP 4, PP 1); refused at EP 1
    "--overlap-moe-expert-parallel-comm": {
        "model": (["--overlap-moe-expert-parallel-comm", "--ep", "1"],
                  ["--overlap-moe-expert-parallel-comm"]),
        "*": ["--overlap-moe-expert-parallel-comm"]},
    "--use-torch-fsdp2": {"model": (["--use-torch-fsdp2"], ["--use-torch-fsdp2", "--fsdp"]),
                          "*": ["--use-torch-fsdp2"]},
    # model: on LLAMA_MODEL (torchtitan's Llama block); unfused attention is refused with it
    "--no-compile": {"model": (["--no-compile", "--attention-backend", "unfused"],
                               ["--no-compile"]), "*": ["--no-compile"]},
    # model: on LLAMA_MODEL (rope positions); refused with --no-compile (torchtitan's own RoPE)
    "--no-rope-fusion": {"model": (["--no-rope-fusion", "--no-compile"], ["--no-rope-fusion"]),
                         "*": ["--no-rope-fusion"]},
    "--cross-entropy-loss-fusion": {"*": ["--cross-entropy-loss-fusion"]},
    # model: refused without the fusion (compared with native with it)
    "--cross-entropy-fusion-impl": {
        "model": (["--cross-entropy-fusion-impl", "te"],
                  ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]),
        "*": ["--cross-entropy-fusion-impl", "te"]},
    "--norm-type": {"model": (["--norm-type", "fused_rmsnorm"],
                              ["--no-compile", "--norm-type", "fused_rmsnorm"]),
                    "*": ["--norm-type", "fused_rmsnorm"]},
    # interference: refused where no asynchronous collective runs beside compute (DP 1); the
    # AICB file's DP collectives run after its compute but for a few µs, hence no example
    "--nccl-channels": {"aicb": (["--nccl-channels", "0", "--gpus", "64"], None),
                        "optable": (["--nccl-channels", "0", "--gpus", "1"],
                                    ["--nccl-channels", "0"]),
                        "model": (["--nccl-channels", "0", "--gpus", "2"],
                                  ["--nccl-channels", "0"]),
                        "aicb-csv": ["--nccl-channels", "0"]},
    "--comm-overlap-slowdown": {"aicb": (["--comm-overlap-slowdown", "4", "--gpus", "64"],
                                         None),
                                "optable": (["--comm-overlap-slowdown", "4", "--gpus", "1"],
                                            ["--comm-overlap-slowdown", "4"]),
                                "model": (["--comm-overlap-slowdown", "4", "--gpus", "2"],
                                          ["--comm-overlap-slowdown", "4"]),
                                "aicb-csv": ["--comm-overlap-slowdown", "4"]},
    # variability: every sample simulates every rank (64 of the AICB file's, at DP 1)
    "--host-dispatch-us": {"*": ["--host-dispatch-us", "200"]},
    # CUDA graphs change host launch costs only: compared with --host-dispatch-us 200 in both
    # runs (CONTEXT; at 0 the report line says it changes nothing)
    "--cuda-graph-impl": {"*": ["--cuda-graph-impl", "transformer_engine"]},
    "--enable-cuda-graph": {"*": ["--enable-cuda-graph"]},
    "--external-cuda-graph": {"*": ["--external-cuda-graph"]},
    "--cuda-graph-scope": {"model": (["--cuda-graph-scope", "attn"],
                                     ["--cuda-graph-impl", "local", "--cuda-graph-scope",
                                      "full_iteration"]),
                           "*": ["--cuda-graph-scope", "attn"]},
    "--jitter": {"aicb": ["--jitter", "0.05", "--gpus", "64"], "*": ["--jitter", "0.05"]},
    "--samples": {"aicb": (["--samples", "2"], None),
                  "*": (["--samples", "2"], ["--jitter", "0.05", "--samples", "2"])},
    "--seed": {"aicb": (["--seed", "3"], None),
               "*": (["--seed", "3"], ["--jitter", "0.05", "--seed", "3"])},
}
H100_MODEL = ["--model", "gpt2-medium", "--topo", "dgx-h100-1024", "--gpus", "8", "--tp", "2",
              "--global-batch", "8"]
# the same on one DGX B200 node (an fp4 peak: NVFP4)
B200_MODEL = ["--model", "gpt2-medium", "--topo", "dgx-b200", "--gpus", "8", "--tp", "2",
              "--global-batch", "8"]
# data parallel over one DGX H100 node: NVLS carries the 8-GPU gradient all-reduces (TP 2's
# 2-GPU and DP 4's 4-GPU all-reduces are as fast on the ring)
H100_DP8 = [*H100_MODEL[:7], "1", *H100_MODEL[8:]]
# the log's 4 ranks in one DGX H100 node (fp8 peak, a measured kernel table, NVLS)
H100_LOG = [*INPUTS["aicb-csv"][:4], "--topo", "dgx-h100-1024", "--nodes", "1"]
MOE_MODEL = ["--model", "moe-gpt-small", "--topo", "tiny-2x2", "--tp", "1", "--ep", "4",
             "--global-batch", "4"]
LLAMA_MODEL = ["--model", "llama3-8b", "--topo", "dgx-a100-1024", "--gpus", "8", "--tp", "1",
               "--global-batch", "8", "--fsdp"]
PP_OPTABLE = ["--pp", "2", "--pp-comm-bytes", "1048576"]
PP_MODEL = ["--pp", "2", "--tp", "1"]
PP5_MODEL = ["--pp", "5", "--tp", "1", "--nodes", "3", "--gpus", "5"]
# arguments given to both runs of a comparison (kind, flag) -> args; "base:" replaces the input
CONTEXT: dict[tuple[str, str], list[str]] = {
    **{("model", f): ["--host-dispatch-us", "200"] for f in (
        "--cuda-graph-impl", "--enable-cuda-graph", "--external-cuda-graph",
        "--cuda-graph-scope")},
    ("aicb", "--vpp"): ["--microbatches", "8"], ("aicb", "--schedule"): ["--microbatches", "8"],
    ("aicb", "--microbatch-group-size"): ["--vpp", "2", "--microbatches", "16"],
    ("optable", "--pp"): ["--pp-comm-bytes", "1048576"],
    ("optable", "--schedule"): [*PP_OPTABLE, "--microbatches", "4"],
    ("optable", "--pp-comm-bytes"): PP_OPTABLE,
    ("optable", "--placement"): ["--tp", "2"], ("model", "--placement"): ["--pp", "2"],
    ("optable", "--routing"): ["--topo", "dgx-a100-1024-oversub4"],
    ("model", "--routing"): ["--topo", "dgx-a100-1024-oversub4", "--global-batch", "512"],
    ("aicb", "--routing"): ["--topo", "dgx-a100-1024-oversub4"],
    # NVLS needs NVSwitches that declare it (the DGX H100 topology does); SHARP a fabric that
    # declares it (set here)
    ("aicb", "--nccl-nvls-enable"): ["--topo", "dgx-h100-1024"],
    ("optable", "--nccl-nvls-enable"): ["--topo", "dgx-h100-1024", "--tp", "4"],
    ("aicb", "--nccl-collnet-enable"): ["--set", "fabric.sharp=true"],
    ("optable", "--nccl-collnet-enable"): ["--set", "fabric.sharp=true"],
    ("model", "--nccl-collnet-enable"): ["--set", "fabric.sharp=true"],
    ("aicb-csv", "--nccl-collnet-enable"): ["--set", "fabric.sharp=true"],
    ("model", "--fp8-recipe"): ["--dtype", "fp8"],
    ("model", "--fp8-param-gather"): ["--dtype", "fp8", "--distributed-optimizer"],
    ("model", "--fp4-param-gather"): ["--fp4-format", "e2m1"],
    ("model", "--overlap-param-gather-with-optimizer-step"): [
        *PP_MODEL, "--vpp", "2", "--distributed-optimizer", "--overlap-param-gather"],
    ("model", "--vpp"): [*PP_MODEL], ("model", "--schedule"): [*PP_MODEL],
    ("model", "--microbatch-group-size"): [*PP_MODEL, "--vpp", "2"],
    ("model", "--decoder-first-pipeline-num-layers"): [*PP_MODEL],
    ("model", "--decoder-last-pipeline-num-layers"): [*PP_MODEL],
    ("model", "--account-for-embedding-in-pipeline-split"): PP5_MODEL,
    ("model", "--account-for-loss-in-pipeline-split"): PP5_MODEL,
    ("model", "--pipeline-model-parallel-layout"): [*PP_MODEL],
}
# the run to compare with, where the run without the flag is not a valid layout: 24 layers
# and one of embedding/loss = 25 split over 5 stages, but 24 layers are not
BEFORE: dict[tuple[str, str], list[str]] = {
    ("model", "--cross-entropy-fusion-impl"): ["--cross-entropy-loss-fusion"],
    ("model", "--account-for-embedding-in-pipeline-split"): [
        "--account-for-loss-in-pipeline-split"],
    ("model", "--account-for-loss-in-pipeline-split"): [
        "--account-for-embedding-in-pipeline-split"],
    ("model", "--expert-tensor-parallel-size"): ["--ep", "2"],
    ("model", "--defer-embedding-wgrad-compute"): ["--pp", "2"],
    ("model", "--fp4-param-gather"): ["--distributed-optimizer"],
    ("model", "--wgrad-deferral-limit"): ["--defer-embedding-wgrad-compute", "--pp", "2"],
    ("model", "--cuda-graph-scope"): ["--cuda-graph-impl", "local"],  # whole layers
}
BASE: dict[tuple[str, str], list[str]] = {  # another input of the same kind
    ("model", "--megatron-args"): ["--topo", "tiny-2x2"],  # the model from the arguments
    # 128 DGX A100 nodes: the 512-GPU job on all of them at 4 processes per node
    ("aicb", "--nproc-per-node"): ["--workload", str(SEED_512), "--topo", "dgx-a100-1024"],
    ("model", "--job-config"): ["--topo", "dgx-a100-1024", "--nodes", "8"],  # 64 GPUs
    ("model", "--microbatches"): ["--model", "gpt2-medium", "--topo", "tiny-2x2", "--tp", "2",
                                  "--microbatches", "4"],
    ("model", "--dtype"): H100_MODEL, ("model", "--kernel-table"): H100_MODEL,
    ("model", "--sustained-slowdown"): H100_MODEL,
    ("model", "--nccl-nvls-enable"): H100_DP8, ("model", "--fp8-recipe"): H100_MODEL,
    ("model", "--fp8-param-gather"): H100_MODEL,
    **{("model", f): B200_MODEL for f in ("--fp4-format", "--fp4-recipe", "--fp4-param-gather")},
    ("model", "--moe-token-dispatcher-type"): MOE_MODEL,
    ("model", "--moe-shared-expert-intermediate-size"): MOE_MODEL,
    ("model", "--no-compile"): LLAMA_MODEL, ("model", "--norm-type"): LLAMA_MODEL,
    ("model", "--no-rope-fusion"): LLAMA_MODEL,
    ("model", "--expert-tensor-parallel-size"): MOE_MODEL,
    ("model", "--overlap-moe-expert-parallel-comm"): MOE_MODEL,
    # the default (auto) runs cuDNN's fused kernel, timed like FlashAttention-2 by the
    # roofline: the H100's measured table tells the two apart
    ("model", "--flash-attention"): H100_MODEL,
    **{("aicb-csv", f): H100_LOG for f in ("--dtype", "--kernel-table", "--flash-attention",
                                          "--nccl-nvls-enable", "--sustained-slowdown")},
}
STATED_ONLY = {  # the report states the change; the result is the same by construction
    ("aicb", "--nodes"),  # the header's all_gpus fixes the job: 256 GPUs on 32 or 64 nodes
    # the same time here: under ECMP no two flows of this run share an up-link of the 4:1
    # oversubscribed leaves (the AICB run shows ECMP's effect)
    ("model", "--routing"),
    # the table's DP-1024 all-reduces are small (tree/LL, 3 of them) and run on NCCL's double
    # binary tree, whose edges join nodes 2^k apart and cross few leaves: the same time under
    # D-mod-K, ECMP and adaptive routing (the AICB run shows ECMP's effect)
    ("optable", "--routing"),
    # the table's only all-reduces are its asynchronous gradient all-reduces, hidden behind
    # the backward pass whether NVLS runs them or not
    ("optable", "--nccl-nvls-enable"),
    # the file's DP collectives are reduce-scatter / all-gather (distributed optimizer): the
    # model's SHARP runs all-reduce only
    ("aicb", "--nccl-collnet-enable"),
    # the breakdown stays the deterministic run's; the samples are in the variability block
    *((k, f) for k in ("aicb", "optable", "model", "aicb-csv")
      for f in ("--jitter", "--samples", "--seed")),
    # the log's nodes are fixed: more nodes leave GPUs unused (stated)
    ("aicb-csv", "--nodes"),
    # the log's DP-4 ring stays inside one leaf of the oversubscribed fat tree (no up-link)
    ("aicb-csv", "--routing"),
    # the tiny log's reduce-scatters run beside blocking all-gathers, not compute (on the
    # shipped Llama-65B log, 4 makes the iteration 14036.6 -> 14381.4 ms)
    ("aicb-csv", "--comm-overlap-slowdown"),
    # the log's only all-reduces are of 1 and 8 bytes, where neither NVLS nor SHARP is chosen
    ("aicb-csv", "--nccl-nvls-enable"), ("aicb-csv", "--nccl-collnet-enable"),
}
# where the verdict "changes" does not hold for this example, and what holds instead
REFUSED_HERE = {  # the example is refused by another check (reason in the comment)
    ("aicb", "--model"): "--workload", ("optable", "--model"): "--workload",
    ("optable", "--vpp"): "--vpp",  # the table is one layer: no chunks to split it into
    ("optable", "--microbatch-group-size"): "--microbatch-group-size",  # needs interleaving
    ("aicb", "--zero"): "--zero",  # a TP-8 Megatron file is not a DeepSpeed file
    ("aicb", "--fsdp"): "--zero",
    ("model", "--moe-load-imbalance"): "--moe-load-imbalance",  # dense model
    ("model", "--moe-expert-capacity-factor"): "--moe-expert-capacity-factor",
}


def with_backward_times(table: str) -> str:
    """The operator table with backward and weight-grad times equal to the forward time."""
    lines = table.splitlines()
    rows = [line.split("\t") for line in lines[1:]]
    for r in rows:
        r[4] = r[7] = r[1]
    return "\n".join([lines[0]] + ["\t".join(r) for r in rows]) + "\n"


def example(flag: str, kind: str):
    ex = EXAMPLES[flag]
    return ex.get(kind, ex.get("*"))


_current: list[tuple[str, str]] = []  # the (kind, flag) under test


def _args(kind: str, extra: list[str], tmp_path) -> list[str]:
    key = (kind, _current[-1][1])
    base = [*BASE.get(key, INPUTS[kind]), *CONTEXT.get(key, [])]
    return [*base, *(a.replace("{tmp}", str(tmp_path)) for a in extra)]


_RUNS: dict[tuple[str, ...], dict] = {}


def run_json(kind: str, extra: list[str], tmp_path, capsys) -> dict:
    args = _args(kind, extra, tmp_path)
    if not extra and tuple(args) in _RUNS:  # the run without the flag, shared between tests
        return _RUNS[tuple(args)]
    out = tmp_path / "r.json"
    rc = main([*args, "--json", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0, (kind, extra, err)
    rep = json.loads(out.read_text())
    if not extra:
        _RUNS[tuple(args)] = rep
    return rep


def assert_refused(kind: str, extra: list[str], flag: str, tmp_path, capsys) -> None:
    assert main([*_args(kind, extra, tmp_path), "--quiet"]) == 2, (kind, extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simrun: error: "), err
    assert f"{flag}:" in err[0] or f"{flag} " in err[0], err  # "--set KEY:" names the key


def _stated(rep: dict) -> tuple:
    return (rep["assumptions"], rep["parallelism"], rep["microbatches"], rep["schedule"],
            rep["topology"], rep["simulation"], rep.get("training"))


def assert_changes(kind: str, extra: list[str], tmp_path, capsys) -> None:
    before = run_json(kind, BEFORE.get((kind, _current[-1][1]), []), tmp_path, capsys)
    after = run_json(kind, extra, tmp_path, capsys)
    assert _stated(after) != _stated(before)  # the report says what is different
    if (kind, _current[-1][1]) in STATED_ONLY:
        return
    result = ("iteration_time_s", "stages", "parallelism", "microbatches", "mfu")
    assert [after.get(k) for k in result] != [before.get(k) for k in result]


CASES = [(flag, kind) for flag in applicable.TABLE for kind in applicable.INPUT_KINDS]


def test_every_flag_of_the_run_is_in_the_table():
    """A flag added to the run parser must be entered in sim/options/applicable.py's TABLE."""
    flags = {next(o for o in a.option_strings if o.startswith("--"))
             for a in build_parser()._actions}
    assert flags == set(applicable.TABLE)
    assert set(EXAMPLES) == set(applicable.TABLE)
    for verdicts in applicable.TABLE.values():
        assert set(verdicts) == set(applicable.INPUT_KINDS)
        assert all(v.verdict in applicable.VERDICTS and v.why for v in verdicts.values())


@pytest.mark.parametrize("flag,kind", CASES, ids=[f"{k}:{f}" for f, k in CASES])
def test_flag_changes_the_run_or_is_refused(flag, kind, tmp_path, capsys):
    verdict = applicable.TABLE[flag][kind].verdict
    _current.append((kind, flag))
    ex = example(flag, kind)
    (tmp_path / "with-backward.tsv").write_text(with_backward_times(SEED_OPTABLE.read_text()))
    if (kind, flag) in REFUSED_HERE:
        assert_refused(kind, ex, REFUSED_HERE[kind, flag], tmp_path, capsys)
    elif verdict == "refused":
        assert_refused(kind, ex, flag, tmp_path, capsys)
    elif verdict == "refused-if":
        assert isinstance(ex, tuple), "a refused-if flag needs (refused, accepted) examples"
        assert_refused(kind, ex[0], flag, tmp_path, capsys)
        if ex[1] is not None:
            assert_changes(kind, ex[1], tmp_path, capsys)
    elif verdict == "changes":
        assert_changes(kind, ex, tmp_path, capsys)
    elif verdict == "states":
        before = run_json(kind, [], tmp_path, capsys)
        after = run_json(kind, ex, tmp_path, capsys)
        assert after == before
    elif verdict == "mode":  # the same iteration (symmetric simulation is exact on uniform
        # fabrics, within 0.1% where one is unevenly filled, which the report says)
        before = run_json(kind, [], tmp_path, capsys)
        after = run_json(kind, ex, tmp_path, capsys)
        assert after["iteration_time_s"] == pytest.approx(before["iteration_time_s"], rel=1e-3)
        assert after["simulation"] != before["simulation"] or flag == "--no-fuse"
    elif verdict == "input":
        assert main([*_args(kind, ex, tmp_path), "--quiet"]) == 0
    else:
        assert verdict == "output"
        with pytest.raises(SystemExit) if flag in ("--help", "--version") else _nothing():
            assert main([*_args(kind, ex, tmp_path)]) == 0


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_generate_refuses_training_options_without_effect(tmp_path, capsys):
    base = ["generate", "--model", "gpt2-medium", "--topo", "tiny-2x2", "--global-batch", "8",
            "--out", str(tmp_path / "w.txt")]
    assert main([*base, "--tp", "1", "--sequence-parallel"]) == 2
    err = capsys.readouterr().err
    assert "--sequence-parallel: needs TP > 1" in err and not (tmp_path / "w.txt").exists()
    assert main([*base, "--tp", "2", "--sequence-parallel"]) == 0

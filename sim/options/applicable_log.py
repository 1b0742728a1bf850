"""The verdicts of every flag of the main run for AICB's physical-format ZeRO-3 log read with
its model spec (``--workload LOG.csv --model SPEC``, :mod:`sim.scenario.collective_log`): the
``aicb-csv`` column of :data:`sim.options.applicable.TABLE` (verdicts as defined there)."""

from __future__ import annotations

# the log fixes the layout and the collectives, the model the compute; this column replaces
# the one applicable._all gives and completes applicable._kinds'
_LOG_FIXES = "the log fixes it (one data-parallel group of its ranks, TP = PP = CP = EP = 1, " \
             "one microbatch, ZeRO stage 3); leave it out"
_NO_PIPELINE = "the log is one DeepSpeed forward and backward (no pipeline stages); leave it out"
_LOG_PLACES = "DeepSpeed's collectives come from the log; leave it out"
LOG_VERDICTS: dict[str, tuple[str, str]] = {
    "--workload": ("input", "the collective log (AICB physical format)"),
    "--format": ("refused", "the physical format is detected; --format forces the reader of a "
                            "workload read alone; leave it out"),
    "--set": ("changes", "a topology field (assumption 'topology override (--set): KEY = VALUE "
                         "(file: OLD)'); node.gpu.* changes the model-timed compute"),
    "--nodes": ("changes", "the cluster's node count (report header; the layout keeps the "
                           "log's GPUs)"),
    **dict.fromkeys(("--tp", "--pp", "--ep", "--vpp", "--microbatches", "--gpus", "--dp",
                     "--zero", "--context-parallel-size"), ("refused", _LOG_FIXES)),
    **dict.fromkeys(("--fsdp", "--use-torch-fsdp2"),
                    ("refused", "the log is DeepSpeed ZeRO-3's; leave it out")),
    **dict.fromkeys(("--schedule", "--microbatch-group-size", "--pp-comm-bytes",
                     "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                     "--account-for-embedding-in-pipeline-split",
                     "--account-for-loss-in-pipeline-split",
                     "--pipeline-model-parallel-layout"), ("refused", _NO_PIPELINE)),
    "--host-dispatch-us": ("refused", "the log's collectives are not kernels the model "
                                      "launches in order; use --model alone; leave it out"),
    "--row-placement": ("refused", "the log's rows are collectives, placed by the model's rows; "
                                   "leave it out"),
    "--placement": ("refused", "one data-parallel group: every order places rank r on GPU r; "
                               "leave it out"),
    "--model": ("input", "the model spec that times the compute (its tensors must match the "
                         "log's)"),
    "--micro-batch": ("changes", "sequences per microbatch: the compute and the global batch "
                                 "(training options)"),
    "--global-batch": ("refused", "the log is one microbatch per rank: the global batch is DP × "
                                  "--micro-batch; leave it out"),
    "--sequence-parallel": ("refused", "needs TP > 1; the log is TP 1; leave it out"),
    "--tp-comm-overlap": ("refused", "needs TP > 1; the log is TP 1; leave it out"),
    "--async-tensor-model-parallel-allreduce": ("refused", "needs TP > 1; the log is TP 1; "
                                                           "leave it out"),
    "--fp8-recipe": ("refused", "the log is DeepSpeed's, without Transformer Engine's FP8 "
                                "recipes; leave it out"),
    "--recompute": ("changes", "activation recomputation (training options, memory; with full "
                               "recomputation the backward gathers precede the re-run forward)"),
    "--dtype": ("changes", "GEMM peak and MFU reference (training options)"),
    "--flash-attention": ("changes", "the attention backend (training options)"),
    "--attention-backend": ("changes", "the attention backend (training options)"),
    **dict.fromkeys(("--distributed-optimizer", "--overlap-grad-reduce",
                     "--no-overlap-grad-reduce", "--overlap-param-gather",
                     "--no-delay-grad-reduce", "--fp8-param-gather",
                     "--grad-reduce-in-bf16", "--ddp-bucket-size"),
                    ("refused", "Megatron's; " + _LOG_PLACES)),
    **dict.fromkeys(("--moe-load-imbalance", "--moe-expert-capacity-factor",
                     "--moe-token-dispatcher-type", "--moe-shared-expert-intermediate-size",
                     "--expert-tensor-parallel-size", "--overlap-moe-expert-parallel-comm"),
                    ("refused", "the log is of a dense model; leave it out")),
    **dict.fromkeys(("--defer-embedding-wgrad-compute", "--wgrad-deferral-limit"),
                    ("refused", "Megatron-Core's pipeline flush; " + _NO_PIPELINE)),
    "--ignore-memory": ("refused-if", "refused when the layout fits in GPU memory"),
    "--no-rope-fusion": ("refused", "the log is DeepSpeed's, without Megatron-Core's RoPE "
                                    "option; the model times its compute with Megatron-Core's "
                                    "fused layer; leave it out"),
    **dict.fromkeys(("--compile", "--no-compile", "--norm-type"),
                    ("refused", "the model times the log's compute with Megatron's fused "
                                "layer; the eager operator list is torchtitan's (--model "
                                "runs); leave it out")),
    "--bytes-per-element": ("refused", "the log's sizes are bytes; leave it out"),
    "--missing-backward-ratio": ("refused", "the model times the backward; leave it out"),
    "--kernel-table": ("changes", "operator times (compute note)"),
    "--compute-efficiency": ("changes", "roofline GEMM efficiency"),
    "--sustained-slowdown": ("changes", "kernel-table times × F ('sustained load' note); "
                                        "refused on a GPU with no kernel table"),
    "--source-gpu": ("refused", "the log has no compute times to scale; leave it out"),
    "--compute-scale": ("refused", "the log has no compute times to scale; leave it out"),
    # the log's reduce-scatters always run beside the backward (DP > 1)
    **dict.fromkeys(("--nccl-channels", "--comm-overlap-slowdown"),
                    ("changes", "SM interference of the log's asynchronous reduce-scatters "
                                "(assumption 'interference: ...')")),
}

"""The verdicts of the model-driven training flags (``simrun --model``) for
:data:`sim.options.applicable.TABLE`: what each changes in a generated workload, or when it is
refused
(``refused-if``: checked by :func:`sim.options.applicable.check_effect` and the option checks). A
workload file fixes compute times and message sizes, so every one of them is refused there."""

from __future__ import annotations

from sim.models.features.defer_wgrad import VERDICTS as DEFER_VERDICTS

MODEL_HOW: dict[str, tuple[str, str]] = {
    **DEFER_VERDICTS,  # sim.models.features.defer_wgrad
    "--dp": ("changes", "the data-parallel size (layout line)"),
    "--micro-batch": ("changes", "sequences per microbatch (training options)"),
    "--global-batch": ("changes", "the number of microbatches (layout line)"),
    "--sequence-parallel": ("refused-if", "refused at TP 1, where Megatron ignores it"),
    "--recompute": ("changes", "activation recomputation (training options, memory)"),
    "--dtype": ("changes", "GEMM peak and MFU reference (training options)"),
    "--distributed-optimizer": ("refused-if", "refused at DP 1 (nothing to shard over)"),
    "--flash-attention": ("changes", "the attention backend (training options)"),
    "--attention-backend": ("changes", "the attention backend (training options)"),
    "--overlap-grad-reduce": ("refused-if", "the default, stated; refused at DP 1 (no DP "
                                            "gradient collective)"),
    "--no-overlap-grad-reduce": ("refused-if", "refused at DP 1 (no DP gradient collective)"),
    "--no-delay-grad-reduce": ("refused-if", "every pipeline stage reduces per bucket during "
                                             "each chunk's last backward (assumption '--no-"
                                             "delay-grad-reduce: ...'); refused without "
                                             "overlapped gradient reduction, at PP 1 or DP 1, "
                                             "with ZeRO / FSDP, and for schedules other than "
                                             "Megatron's interleaved one (in 1F1B a later "
                                             "stage's one bucket launches at the same point)"),
    "--grad-reduce-in-bf16": ("refused-if", "bf16 gradients; refused: fp16, ZeRO / FSDP"),
    "--ddp-bucket-size": ("refused-if", "the DP gradient buckets (assumption '--overlap-grad-"
                                        "reduce: ...'); refused without overlapped gradient "
                                        "reduction, at DP 1, with ZeRO / FSDP"),
    "--overlap-param-gather": ("changes", "parameter all-gathers beside the forward (refused "
                                          "without --distributed-optimizer, with ZeRO-3)"),
    "--decoder-first-pipeline-num-layers": ("changes", "layers per stage (split assumption)"),
    "--decoder-last-pipeline-num-layers": ("changes", "layers per stage (split assumption)"),
    "--account-for-embedding-in-pipeline-split": ("changes", "layers per stage"),
    "--account-for-loss-in-pipeline-split": ("changes", "layers per stage"),
    "--pipeline-model-parallel-layout": ("changes", "layers per (stage, chunk) and the virtual "
                                                    "pipeline size (split assumption)"),
    "--context-parallel-size": ("changes", "CP groups and ring attention (layout line)"),
    "--moe-load-imbalance": ("changes", "the busiest expert GPU's tokens (refused for a "
                                        "dense model)"),
    "--moe-expert-capacity-factor": ("changes", "tokens dropped beyond capacity (refused for "
                                                "a dense model)"),
    "--moe-token-dispatcher-type": ("refused-if", "flex: one token copy per destination node "
                                                  "and the hierarchical all-to-all (MoE "
                                                  "assumption line, 'chosen: EP alltoall'); "
                                                  "alltoall states the default; flex refused "
                                                  "where the EP group lies in one node or EP is "
                                                  "1, and for a dense model"),
    "--moe-shared-expert-intermediate-size": ("changes", "the shared-expert MLP's width (MoE "
                                                         "assumption line; refused for a dense "
                                                         "model)"),
    "--expert-tensor-parallel-size": ("refused-if", "the experts' tensor-parallel size: the "
                                                     "ETP x EP x EDP expert groups, expert GEMM "
                                                     "shapes and gradient reduction (layout "
                                                     "line, MoE assumption line); refused for a "
                                                     "dense model"),
    "--overlap-moe-expert-parallel-comm": ("refused-if", "combined 1F1B: steady-state F&B ops "
                                                         "with the EP all-to-alls beside the "
                                                         "compute (MoE assumption lines); "
                                                         "refused for a dense model, EP 1, "
                                                         "full recompute, PP > 1 without the "
                                                         "interleaved schedule"),
    "--ignore-memory": ("refused-if", "refused when the layout fits in GPU memory"),
    "--fp8-param-gather": ("refused-if", "FP8 weights: 1-byte parameter all-gathers, quantised "
                           "after the optimizer step (assumption '--fp8-param-gather ...'); "
                           "refused without --dtype fp8, the distributed optimizer, or with FSDP"),
    "--fp8-recipe": ("refused-if", "Transformer Engine's FP8 cast kernels and amax "
                                   "reductions of the recipe (assumption '--fp8-recipe ...'); "
                                   "refused without --dtype fp8"),
    "--tp-comm-overlap": ("refused-if", "TP collectives pipelined with their GEMMs "
                                        "(assumption); refused without sequence parallelism at "
                                        "TP > 1"),
    "--async-tensor-model-parallel-allreduce": (
        "refused-if", "the column-parallel linears' backward TP collectives beside their "
                      "GEMMs (assumption 'TP backward ...'); refused at TP 1, with "
                      "--tp-comm-overlap and with --no-compile"),
    "--compile": ("states", "the default: fused element-wise kernels (assumption "
                            "'element-wise kernels fused ...')"),
    "--no-compile": ("refused-if", "PyTorch eager element-wise kernels of torchtitan's Llama "
                                   "block (assumption '--no-compile: ...'); refused for other "
                                   "models (LayerNorm, GeLU, learned positions, MoE), fp8, "
                                   "unfused attention, --tp-comm-overlap"),
    "--norm-type": ("refused-if", "torchtitan's norm_type in eager mode (assumption "
                                  "'--no-compile: ... RMSNorm ...'); refused without "
                                  "--no-compile"),
    "--use-torch-fsdp2": ("refused-if", "PyTorch FSDP2's copies and fp32 reduce-scatter "
                                        "(assumption '--use-torch-fsdp2: ...'); refused "
                                        "without --fsdp"),
    "--no-rope-fusion": ("refused-if", "Megatron-Core's unfused RoPE kernels on q and k "
                                       "(assumption 'RoPE: --no-rope-fusion ...'); refused for "
                                       "models without rope positions and with --no-compile"),
}

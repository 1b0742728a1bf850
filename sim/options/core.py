"""Declarations (:mod:`sim.options.registry`) of the core training options: sequence
parallelism, recomputation, dtype, the distributed optimizer, the attention backend, FSDP and
Megatron-Core's uneven pipeline split."""

from __future__ import annotations

from sim.options.declaration import Flag, Option
from sim.parallel.config import ATTENTION_BACKENDS, DTYPES, RECOMPUTE
from sim.parallel.layer_layout import parse_layout

_LOG_FIXES_SPLIT = ("refused", "the log is one DeepSpeed forward and backward (no pipeline "
                               "stages); leave it out")
_NO_DP = "needs DP > 1 (there is nothing to shard the optimizer state over at DP 1)"
_SPLIT = "sim.parallel.split"
#: a workload file's verdict of the attention flags: its attention times are measured
_FILE_ATTENTION = ("refused", "applies to --model runs (a workload file carries its own "
                              "attention times); leave it out, or use --model")


def _split_flag(name: str, alias: str, target: str, help: str, **kw) -> Flag:
    return Flag(name, help, aliases=(alias,) if alias else (), target=f"split.{target}",
                model=("changes", kw.pop("why", "layers per stage (split assumption)")),
                log=_LOG_FIXES_SPLIT, **kw)


OPTIONS = (
    Option("sequence_parallel", "Megatron-LM --sequence-parallel", "sim.models.layers", (
        Flag("--sequence-parallel",
             "Megatron sequence parallelism (refused at TP 1, where it changes nothing; "
             "default: off)",
             sweep_help="Megatron sequence parallelism in every layout with TP > 1 (default: "
                        "off)",
             model=("refused-if", "refused at TP 1, where Megatron ignores it"),
             log=("refused", "needs TP > 1; the log is TP 1; leave it out"),
             refuse=lambda _m, par: (None if par.layout.tp > 1 else
                                     "needs TP > 1 (Megatron ignores it at TP 1)")),),
        assumption="training-options", recorded_at_default=True),
    Option("recompute", "Megatron-LM --recompute-granularity / --recompute-activations",
           "sim.models.memory", (
               Flag("--recompute", "activation recomputation (default: {default})",
                    kind="choice", choices=RECOMPUTE, aliases=("--recompute-granularity",),
                    model=("changes", "activation recomputation (training options, memory)"),
                    log=("changes", "activation recomputation (training options, memory; with "
                                    "full recomputation the backward gathers precede the "
                                    "re-run forward)")),),
           assumption="training-options", recorded_at_default=True),
    Option("dtype", "Megatron-LM --bf16 / --fp16 / --fp8-format", "sim.models.compute", (
        Flag("--dtype", "training dtype; its dense peak is the MFU reference (default: "
                        "{default})", kind="choice", choices=DTYPES,
             model=("changes", "GEMM peak and MFU reference (training options)"),
             log=("changes", "GEMM peak and MFU reference (training options)")),),
        assumption="dtype", recorded_at_default=True),
    Option("distributed_optimizer", "Megatron-LM --use-distributed-optimizer",
           "sim.models.optimizer", (
               Flag("--distributed-optimizer",
                    "shard the optimizer state over DP (reduce-scatter gradients, all-gather "
                    "parameters)", aliases=("--use-distributed-optimizer",),
                    model=("refused-if", "refused at DP 1 (nothing to shard over)"),
                    log=("refused", "Megatron's; DeepSpeed's collectives come from the log; "
                                    "leave it out"),
                    refuse=lambda _m, par: _NO_DP if par.dp_cp == 1 else None),),
           assumption="optimizer", recorded_at_default=True),
    Option("flash_attention", "Megatron-LM --use-flash-attn", "sim.models.layers", (
        Flag("--flash-attention",
             "the FlashAttention-2 kernel; the same as --attention-backend flash",
             aliases=("--use-flash-attn",),
             model=("changes", "the attention backend (training options)"),
             log=("changes", "the attention backend (training options)"),
             aicb=_FILE_ATTENTION, optable=_FILE_ATTENTION),),
        assumption="training-options", recorded_at_default=True),
    Option("attention_backend", "Megatron-Core --attention-backend", "sim.kernels.attention", (
        Flag("--attention-backend",
             "Megatron-Core's attention backend: flash (FlashAttention-2), fused (cuDNN through "
             "Transformer Engine; on AMD GPUs its CK or AOTriton backend), unfused (batched "
             "matmuls + softmax, as Megatron-LM ran in 2022), auto (Megatron-Core's default: "
             "Transformer Engine picks fused on Hopper and newer, flash before) (default: "
             "{default})",
             default_text="auto, or flash with --flash-attention",
             kind="choice", choices=ATTENTION_BACKENDS,
             model=("changes", "the attention backend (training options)"),
             log=("changes", "the attention backend (training options)"),
             aicb=_FILE_ATTENTION, optable=_FILE_ATTENTION),),
        assumption="training-options"),
    Option("fsdp", "PyTorch FSDP FULL_SHARD (Megatron-LM --use-torch-fsdp2 with "
                   "--data-parallel-sharding-strategy optim_grads_params)",
           "sim.models.features.zero", (
               Flag("--fsdp", "PyTorch FSDP FULL_SHARD (ZeRO stage 3 semantics)",
                    model=("refused-if", "refused at DP 1 (nothing to shard over)"),
                    log=("refused", "the log is DeepSpeed ZeRO-3's; leave it out"),
                    aicb=("changes", "ZeRO-3 semantics for an AICB DeepSpeed file"),
                    optable=("refused", "applies to --model runs and AICB DeepSpeed files"),
                    refuse=lambda _m, par: _NO_DP if par.dp_cp == 1 else None),),
           assumption="zero"),
    Option("split", "Megatron-Core's uneven pipeline split (TransformerConfig."
                    "num_layers_in_first/last_pipeline_stage, account_for_*_in_pipeline_split)",
           _SPLIT, (
               _split_flag("--decoder-first-pipeline-num-layers", "--first-stage-layers",
                           "first_stage_layers",
                           "transformer layers on the first pipeline stage; the others are "
                           "split evenly over the remaining stages (Megatron-Core)",
                           kind="int", metavar="N", dest="first_stage_layers"),
               _split_flag("--decoder-last-pipeline-num-layers", "--last-stage-layers",
                           "last_stage_layers",
                           "transformer layers on the last pipeline stage (Megatron-Core)",
                           kind="int", metavar="N", dest="last_stage_layers"),
               _split_flag("--account-for-embedding-in-pipeline-split", "",
                           "account_for_embedding",
                           "count the embedding as one layer when splitting layers over stages "
                           "(first virtual stage runs one layer fewer; Megatron-Core)",
                           why="layers per stage"),
               _split_flag("--account-for-loss-in-pipeline-split", "", "account_for_loss",
                           "count the output layer and loss as one layer when splitting (last "
                           "virtual stage runs one layer fewer; Megatron-Core)",
                           why="layers per stage"),
               _split_flag("--pipeline-model-parallel-layout", "", "layout",
                           "the layers of every virtual stage (Megatron-Core), e.g. "
                           "'Et*3|(tt|)*29,m|L': E embedding, t transformer layer, L loss, '|' "
                           "between virtual stages (stage i on rank i mod PP), '(...)*N' and "
                           "'x*N' repeat; sets the virtual pipeline size; docs/models.md",
                           kind="parse", parse=parse_layout, metavar="LAYOUT",
                           why="layers per (stage, chunk) and the virtual pipeline size (split "
                               "assumption)")),
           assumption="layout"),
)

"""What simrun does with each Megatron-LM argument it knows: the declaration data of the
Megatron reader (:mod:`sim.jobs.megatron_args`) and of the table in docs/job-formats.md.

Three verdicts: ``applied`` (to a simrun option, named, or to a model-spec field), ``irrelevant``
(to the time of one training iteration, with the reason) and ``refused`` (not modelled; the
reader exits 2 naming it). An argument absent from all three is refused as unknown.

Applied arguments that simrun's run parser takes under the same name (:data:`SAME_NAME`) go to
that option's declaration unchanged: ``sim/options`` (``--sequence-parallel``, ``--overlap-*``,
...) or the Megatron aliases of the layout flags in ``sim/cli/args.py``
(``--tensor-model-parallel-size`` = ``--tp``). Argument names and semantics: Megatron-LM
``megatron/training/arguments.py`` (NVIDIA/Megatron-LM d98e8a64dd).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MegatronArg:
    """One Megatron-LM argument: ``nargs`` (0: a switch, 1: one value, ``+``: values up to
    the next ``--`` word), ``verdict``, ``to`` (the simrun option or ``model.<field>`` it
    sets; empty for irrelevant ones) and ``why`` (what it does in simrun, or why not)."""

    name: str
    nargs: int | str
    verdict: str
    to: str = ""
    why: str = ""


#: Megatron-LM arguments simrun's run takes under the same name (their own declarations say
#: what they do), each with its arity
SAME_NAME: dict[str, int | str] = {
    **dict.fromkeys((
        "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
        "--virtual-pipeline-model-parallel-size", "--context-parallel-size",
        "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--micro-batch-size",
        "--global-batch-size", "--microbatch-group-size-per-virtual-pipeline-stage",
        "--recompute-granularity", "--attention-backend", "--fp8-recipe", "--ddp-bucket-size",
        "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
        "--pipeline-model-parallel-layout", "--wgrad-deferral-limit",
        "--moe-token-dispatcher-type", "--moe-expert-capacity-factor",
        "--moe-shared-expert-intermediate-size", "--cross-entropy-fusion-impl",
        "--fp4-format", "--fp4-recipe"), 1),
    **dict.fromkeys((
        "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
        "--overlap-param-gather-with-optimizer-step", "--tp-comm-overlap",
        "--grad-reduce-in-bf16", "--no-align-grad-reduce", "--no-delay-grad-reduce",
        "--fp8-param-gather", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split", "--defer-embedding-wgrad-compute",
        "--overlap-moe-expert-parallel-comm", "--no-rope-fusion", "--use-flash-attn",
        "--async-tensor-model-parallel-allreduce", "--cross-entropy-loss-fusion",
        "--fp4-param-gather", "--enable-cuda-graph", "--external-cuda-graph"), 0),
    "--cuda-graph-impl": 1,
    # Megatron-LM's nargs='+' scopes: handed on comma-separated, simrun's form of the list
    "--cuda-graph-scope": "+",
}


def _model(name: str, nargs: int, field: str, why: str) -> MegatronArg:
    return MegatronArg(name, nargs, "applied", f"model.{field}", why)


def _irrelevant(names: tuple[str, ...], nargs: int | str, why: str) -> list[MegatronArg]:
    return [MegatronArg(n, nargs, "irrelevant", "", why) for n in names]


MODEL = (
    _model("--num-layers", 1, "layers", "transformer layers"),
    _model("--hidden-size", 1, "hidden", "hidden size"),
    _model("--num-attention-heads", 1, "heads", "attention heads"),
    _model("--ffn-hidden-size", 1, "ffn_hidden", "MLP width (default 4·hidden; with --swiglu "
                                                 "int(4·hidden·2/3 / 64)·64, as Megatron-LM)"),
    _model("--seq-length", 1, "seq_len", "sequence length"),
    _model("--max-position-embeddings", 1, "seq_len", "rows of the learned position table: "
           "must equal --seq-length (the model spec has one length); irrelevant with rope"),
    _model("--group-query-attention", 0, "kv_heads", "use --num-query-groups KV heads"),
    _model("--num-query-groups", 1, "kv_heads", "KV heads (with --group-query-attention; "
                                                "Megatron-LM ignores it without)"),
    _model("--kv-channels", 1, "kv_channels", "per-head width"),
    _model("--swiglu", 0, "gated_mlp", "gated SwiGLU MLP"),
    _model("--normalization", 1, "norm", "LayerNorm or RMSNorm"),
    _model("--position-embedding-type", 1, "position_embedding",
           "learned_absolute → learned, rope → rope; others refused"),
    _model("--use-rotary-position-embeddings", 0, "position_embedding", "rope"),
    _model("--untie-embeddings-and-output-weights", 0, "tied_embeddings", "untied output layer"),
    _model("--disable-bias-linear", 0, "bias", "no linear-layer biases"),
    _model("--add-bias-linear", 0, "bias", "linear-layer biases (Megatron-LM's default)"),
    _model("--hidden-dropout", 1, "hidden_dropout", "dropout after attention and MLP"),
    _model("--attention-dropout", 1, "attention_dropout", "dropout on attention scores"),
    _model("--vocab-size", 1, "vocab", "vocabulary (padded by Megatron's rule)"),
    _model("--tokenizer-type", 1, "vocab", "GPT2BPETokenizer (pretrain_gpt.py's default): "
           "50257 tokens (GPT-2's vocabulary); other tokenizers need --vocab-size"),
    _model("--make-vocab-size-divisible-by", 1, "vocab", "128 (the default) only: simrun pads "
                                                         "to a multiple of 128·TP"),
    _model("--num-experts", 1, "moe.experts", "experts per MoE layer"),
    _model("--moe-router-topk", 1, "moe.top_k", "experts per token"),
    _model("--moe-ffn-hidden-size", 1, "moe.expert_ffn_hidden", "each expert's MLP width"),
    _model("--qk-layernorm", 0, "qk_layernorm", "norm over each head of Q and K"),
)

#: applied through a simrun option under another name or with a translated value
TRANSLATED = (
    MegatronArg("--bf16", 0, "applied", "--dtype", "bf16"),
    MegatronArg("--fp16", 0, "applied", "--dtype", "fp16"),
    MegatronArg("--fp8-format", 1, "applied", "--dtype",
                "fp8 (hybrid and e4m3 both run FP8 GEMMs)"),
    MegatronArg("--recompute-activations", 0, "applied", "--recompute", "selective"),
    MegatronArg("--recompute-method", 1, "applied", "--recompute",
                "uniform with --recompute-num-layers 1 (every layer's input checkpointed) is "
                "simrun's full recomputation; block and other counts refused"),
    MegatronArg("--recompute-num-layers", 1, "applied", "--recompute", "1 only (see "
                                                                       "--recompute-method)"),
    MegatronArg("--num-layers-per-virtual-pipeline-stage", 1, "applied", "--vpp",
                "layers / (PP · N) model chunks per stage"),
    MegatronArg("--checkpoint-activations", 0, "applied", "--recompute",
                "full (Megatron-LM of 2021, e.g. at de7dc40f88: every --checkpoint-num-layers "
                "1 layers' input checkpointed, the forward recomputed: simrun's full "
                "recomputation)"),
    MegatronArg("--use-torch-fsdp2", 0, "applied", "--fsdp --use-torch-fsdp2",
                "PyTorch FSDP2 FULL_SHARD"),
    MegatronArg("--sequence-parallel", 0, "applied", "--sequence-parallel",
                "at TP > 1; at TP 1 Megatron-LM turns it off (arguments.py: 'Disabling "
                "sequence parallelism because tensor model parallelism is disabled')"),
)

IRRELEVANT = (
    *_irrelevant(("--save", "--load", "--save-interval", "--ckpt-format", "--no-load-optim",
                  "--no-load-rng", "--no-save-optim", "--no-save-rng", "--finetune",
                  "--use-checkpoint-args", "--async-save", "--use-dist-ckpt",
                  "--auto-detect-ckpt-format", "--ckpt-fully-parallel-save",
                  "--ckpt-fully-parallel-load", "--pretrained-checkpoint"), 1,
                 "checkpoints: saved or loaded outside the simulated iteration"),
    *_irrelevant(("--data-path", "--split", "--vocab-file", "--merge-file",
                  "--data-cache-path", "--num-workers", "--tokenizer-model",
                  "--tiktoken-pattern", "--train-data-path", "--valid-data-path",
                  "--test-data-path", "--data-args-path"), 1,
                 "data and tokenizer files: the iteration's sizes come from the model and "
                 "batch arguments (the vocabulary from --vocab-size / --tokenizer-type)"),
    *_irrelevant(("--mock-data", "--no-create-attention-mask-in-dataloader",
                  "--no-mmap-bin-files", "--reset-position-ids", "--reset-attention-mask",
                  "--eod-mask-loss"), 0,
                 "data loading: the simulated iteration starts with its batch on the GPU"),
    *_irrelevant(("--log-interval", "--tensorboard-dir", "--wandb-project",
                  "--wandb-exp-name", "--wandb-save-dir", "--timing-log-level",
                  "--tensorboard-log-interval", "--log-throughput-to-tensorboard"), 1,
                 "logging: what is printed, not what runs"),
    *_irrelevant(("--log-throughput", "--log-timers-to-tensorboard",
                  "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard",
                  "--log-world-size-to-tensorboard"), 0,
                 "logging: what is printed, not what runs"),
    *_irrelevant(("--eval-iters", "--eval-interval"), 1,
                 "evaluation runs between training iterations, not in one"),
    *_irrelevant(("--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters",
                  "--lr-decay-samples", "--lr-warmup-fraction", "--lr-warmup-iters",
                  "--lr-warmup-samples", "--lr-warmup-init", "--decoupled-lr",
                  "--decoupled-min-lr", "--weight-decay", "--adam-beta1", "--adam-beta2",
                  "--adam-eps", "--init-method-std", "--seed", "--loss-scale",
                  "--initial-loss-scale", "--min-loss-scale", "--loss-scale-window",
                  "--hysteresis", "--rotary-base", "--start-weight-decay",
                  "--end-weight-decay", "--weight-decay-incr-style"), 1,
                 "a hyperparameter's value: the same kernels run whatever it is"),
    *_irrelevant(("--apply-layernorm-1p",), 0,
                 "a hyperparameter's form (LayerNorm weight stored as γ−1): the same norm "
                 "kernel runs"),
    *_irrelevant(("--train-iters", "--train-samples", "--exit-duration-in-mins",
                  "--exit-interval", "--distributed-timeout-minutes"), 1,
                 "how long the job runs, not how long one iteration takes"),
    *_irrelevant(("--step-batch-size-schedule", "--rampup-batch-size"), "+",
                 "batch-size ramp-up: simrun simulates a steady iteration at "
                 "--global-batch-size"),
    *_irrelevant(("--use-mcore-models",), 0,
                 "Megatron-Core models: what simrun models (and Megatron-LM's default)"),
    *_irrelevant(("--manual-gc",), 0,
                 "Python garbage collection at fixed intervals: simrun models no GC pauses, "
                 "which is what --manual-gc aims for"),
    *_irrelevant(("--empty-unused-memory-level",), 1,
                 "level 1 releases the allocator cache after the iteration (level 2, also "
                 "after each forward, is refused)"),
    *_irrelevant(("--calculate-per-token-loss",), 0,
                 "the loss normalised per token: one scalar more in the loss reduction"),
    *_irrelevant(("--clip-grad",), 1,
                 "the threshold's value (> 0): the gradient norm is computed whatever it is"),
    *_irrelevant(("--profile",), 0, "marks profiler ranges; runs the same kernels"),
    *_irrelevant(("--profile-step-start", "--profile-step-end"), 1,
                 "marks profiler ranges; runs the same kernels"),
    *_irrelevant(("--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-margin",
                  "--fp8-interval"), 1,
                 "delayed scaling's bookkeeping: the amax reduction and casts run whatever "
                 "the history length or algorithm"),
    *_irrelevant(("--rotary-percent",), 1, "1.0 only (a smaller fraction is refused)"),
    *_irrelevant(("--checkpoint-num-layers",), 1, "1 only, Megatron-LM's 2021 default (with "
                                                  "--checkpoint-activations; others refused)"),
    *_irrelevant(("--DDP-impl",), 1,
                 "local only, Megatron-LM's 2021 default: its own DDP, gradients all-reduced "
                 "after the backward pass (megatron/training.py train_step at de7dc40f88), "
                 "which simrun models without --overlap-grad-reduce; torch (PyTorch DDP's "
                 "bucketed overlap) refused"),
)

#: arguments refused whatever their value (none at present; NVFP4's --fp4-format,
#: --fp4-recipe and --fp4-param-gather are simrun options of the same names)
REFUSED: tuple[MegatronArg, ...] = ()

#: every argument the reader knows, by name
ARGS: dict[str, MegatronArg] = {
    **{n: MegatronArg(n, k, "applied", n, "") for n, k in SAME_NAME.items()},
    **{a.name: a for a in (*MODEL, *TRANSLATED, *IRRELEVANT, *REFUSED)},
}

"""What simrun does with each key of a NeMo 1 launcher training config
(NVIDIA/NeMo-Framework-Launcher ``launcher_scripts/conf/training/<model>/<size>.yaml``, the
Hydra config NeMo's ``megatron_gpt_pretraining.py`` reads; key names and meanings: NeMo's
``examples/nlp/language_modeling/conf/megatron_gpt_config.yaml`` and the launcher's configs at
tag 24.07, 8325688d8345a5513660f0f8390f0482a721c009).

Each key is one :class:`NemoKey`: ``megatron`` names the Megatron-LM argument NeMo hands the
value to (NeMo's ``MegatronGPTModel`` builds Megatron-Core's ``TransformerConfig`` from the
same names), so the Megatron reader's declaration (:mod:`sim.jobs.megatron_table`) decides what
simrun does with it; ``how`` converts the YAML value into that argument's words (``None``: not
set). Keys without one carry their own verdict: ``irrelevant`` (with the reason), ``allowed``
(the values simrun models; another value is refused, naming the key), ``stated`` (read, not
modelled, said in the report) or ``refused``. A key absent from the table is refused as unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: a YAML value → the Megatron-LM argument's words after its name (None: the argument is not
#: given; [] a switch)
How = Callable[[Any], list[str] | None]


@dataclass(frozen=True)
class NemoKey:
    """One launcher key (dotted path below the config's root): ``verdict`` (``megatron``,
    ``irrelevant``, ``allowed``, ``stated``, ``refused``), ``megatron`` (the argument, for
    ``megatron``), ``how`` (value → words), ``allowed`` (values modelled) and ``why``."""

    key: str
    verdict: str
    why: str = ""
    megatron: str = ""
    how: How | None = None
    allowed: tuple = ()


def value(v: Any) -> list[str] | None:
    return None if v is None else [str(v)]


def switch(v: Any) -> list[str] | None:
    return [] if v is True else None


def off_switch(v: Any) -> list[str] | None:
    return [] if v is False else None


def arg(key: str, flag: str, how: How = value, why: str = "") -> NemoKey:
    return NemoKey(key, "megatron", why or "the Megatron-LM argument of the same meaning",
                   flag, how)


def irrelevant(keys: tuple[str, ...], why: str) -> list[NemoKey]:
    return [NemoKey(k, "irrelevant", why) for k in keys]


def only(key: str, allowed: tuple, why: str) -> NemoKey:
    return NemoKey(key, "allowed", why, allowed=allowed)


_HYPER = "a hyperparameter's value: the same kernels run whatever it is"
_DEFAULT_FUSION = ("true only: Megatron-LM's default fused kernel (its --no-* flag turns it "
                   "off), what simrun's kernel model times; false refused")

KEYS: tuple[NemoKey, ...] = (
    NemoKey("trainer.num_nodes", "gpus", "nodes × trainer.devices = the GPU count (--gpus), "
            "unless the command line gives --nodes or --gpus (then that, said in the report)"),
    NemoKey("trainer.devices", "gpus", "GPUs per node (see trainer.num_nodes)"),
    NemoKey("trainer.precision", "megatron", "bf16 / bf16-mixed → --bf16; 16 / 16-mixed → "
            "--fp16; 32 refused", "--bf16"),
    only("trainer.accelerator", ("gpu",), "gpu only"),
    only("trainer.accumulate_grad_batches", (1,), "1 only (NeMo's accumulation comes from "
          "global_batch_size)"),
    *irrelevant(("trainer.logger", "trainer.enable_checkpointing", "trainer.log_every_n_steps"),
          "logging and checkpoints between iterations"),
    *irrelevant(("trainer.use_distributed_sampler",), "data loading"),
    *irrelevant(("trainer.max_epochs", "trainer.max_steps", "trainer.max_time"),
          "how long the job runs, not how long one iteration takes"),
    *irrelevant(("trainer.val_check_interval", "trainer.limit_val_batches",
           "trainer.limit_test_batches"), "validation runs between training iterations"),
    arg("trainer.gradient_clip_val", "--clip-grad"),
    arg("model.micro_batch_size", "--micro-batch-size"),
    arg("model.global_batch_size", "--global-batch-size"),
    arg("model.rampup_batch_size", "--rampup-batch-size",
         lambda v: None if v is None else [str(x) for x in v]),
    arg("model.context_parallel_size", "--context-parallel-size"),
    arg("model.tensor_model_parallel_size", "--tensor-model-parallel-size"),
    arg("model.pipeline_model_parallel_size", "--pipeline-model-parallel-size"),
    arg("model.virtual_pipeline_model_parallel_size", "--virtual-pipeline-model-parallel-size"),
    arg("model.encoder_seq_length", "--seq-length"),
    arg("model.max_position_embeddings", "--max-position-embeddings"),
    arg("model.num_layers", "--num-layers"),
    arg("model.hidden_size", "--hidden-size"),
    arg("model.ffn_hidden_size", "--ffn-hidden-size"),
    arg("model.num_attention_heads", "--num-attention-heads"),
    arg("model.init_method_std", "--init-method-std"),
    arg("model.hidden_dropout", "--hidden-dropout"),
    arg("model.attention_dropout", "--attention-dropout"),
    arg("model.kv_channels", "--kv-channels"),
    arg("model.make_vocab_size_divisible_by", "--make-vocab-size-divisible-by"),
    arg("model.num_query_groups", "--num-query-groups"),
    arg("model.sequence_parallel", "--sequence-parallel", switch),
    arg("model.seed", "--seed"),
    arg("model.hysteresis", "--hysteresis"),
    arg("model.activations_checkpoint_granularity", "--recompute-granularity"),
    arg("model.activations_checkpoint_method", "--recompute-method"),
    arg("model.activations_checkpoint_num_layers", "--recompute-num-layers"),
    arg("model.tokenizer.type", "--tokenizer-type"),
    arg("model.use_flash_attention", "--use-flash-attn", switch),
    arg("model.ub_tp_comm_overlap", "--tp-comm-overlap", switch),
    arg("model.share_embeddings_and_output_weights", "--untie-embeddings-and-output-weights",
         off_switch),
    arg("model.bias", "--disable-bias-linear", off_switch),
    arg("model.fp8_margin", "--fp8-margin"),
    arg("model.fp8_interval", "--fp8-interval"),
    arg("model.fp8_amax_history_len", "--fp8-amax-history-len"),
    arg("model.fp8_amax_compute_algo", "--fp8-amax-compute-algo"),
    arg("model.data.reset_position_ids", "--reset-position-ids", switch),
    arg("model.data.reset_attention_mask", "--reset-attention-mask", switch),
    arg("model.data.eod_mask_loss", "--eod-mask-loss", switch),
    arg("model.data.num_workers", "--num-workers"),
    arg("model.optim.overlap_grad_sync", "--overlap-grad-reduce", switch),
    arg("model.optim.overlap_param_sync", "--overlap-param-gather", switch),
    NemoKey("model.fp8", "megatron", "true → FP8 GEMMs: --fp8-format hybrid (fp8_hybrid) or "
            "e4m3 (fp8_e4m3), Transformer Engine's delayed scaling (--fp8-recipe delayed)",
            "--fp8-format"),
    NemoKey("model.fp8_hybrid", "irrelevant", "read with model.fp8 (the FP8 format)"),
    NemoKey("model.fp8_e4m3", "irrelevant", "read with model.fp8 (the FP8 format)"),
    only("model.fp8_wgrad", (True,), "true only (the weight gradients' GEMMs in FP8 too, as "
          "simrun's fp8 runs them); false refused"),
    NemoKey("model.optim.name", "megatron", "distributed_fused_adam → --use-distributed-"
            "optimizer (Apex's DistributedFusedAdam shards the optimizer state over DP, "
            "reduce-scatters gradients and all-gathers parameters: the pattern simrun models "
            "as Megatron-Core's distributed optimizer); fused_adam / adam → Megatron's "
            "replicated Adam; others refused", "--use-distributed-optimizer"),
    NemoKey("model.optim.bucket_cap_mb", "stated",
            "Apex DistributedFusedAdam's bucket size: not modelled; simrun buckets the "
            "gradients as Megatron-Core's distributed optimizer does (--ddp-bucket-size's "
            "default)"),
    *irrelevant(("model.optim.contiguous_grad_buffer", "model.optim.contiguous_param_buffer"),
          "where Apex keeps the buffers in memory: the same collectives move the same bytes"),
    *irrelevant(("model.optim.lr", "model.optim.weight_decay", "model.optim.betas",
           "model.native_amp_init_scale", "model.native_amp_growth_interval",
           "model.apply_query_key_layer_scaling", "model.layernorm_epsilon"), _HYPER),
    NemoKey("model.transformer_engine", "allowed", "true only: Transformer Engine's layers; "
            "their linears overlap the backward TP all-gather and reduce-scatter with the "
            "GEMMs (transformer_engine/pytorch/module/linear.py at v1.8, _Linear.backward): "
            "--async-tensor-model-parallel-allreduce at TP > 1", allowed=(True,)),
    only("model.mcore_gpt", (True,), "true only: Megatron-Core's GPT model (NeMo's legacy "
          "model refused)"),
    only("model.megatron_amp_O2", (True,), "true only: bf16/fp16 weights with fp32 main "
          "parameters in the optimizer, Megatron's mixed precision"),
    only("model.pre_process", (True,), "true only (NeMo sets it per pipeline stage)"),
    only("model.post_process", (True,), "true only (NeMo sets it per pipeline stage)"),
    only("model.fsdp", (False,), "false only (NeMo's PyTorch FSDP path is not modelled)"),
    *irrelevant(("model.fsdp_sharding_strategy", "model.fsdp_grad_reduce_dtype",
           "model.fsdp_sharded_checkpoint"), "read with fsdp: true only, which is refused"),
    only("model.gradient_accumulation_fusion", (True,), _DEFAULT_FUSION),
    only("model.bias_activation_fusion", (True,), _DEFAULT_FUSION),
    only("model.bias_dropout_add_fusion", (True,), _DEFAULT_FUSION),
    only("model.masked_softmax_fusion", (True,), _DEFAULT_FUSION),
    only("model.persist_layer_norm", (True,), _DEFAULT_FUSION),
    only("model.fp32_residual_connection", (False,), "false only (fp32 residuals refused)"),
    only("model.fp16_lm_cross_entropy", (False,), "false only (the fp32 loss simrun times)"),
    only("model.num_micro_batches_with_partial_activation_checkpoints", (None,),
          "null only (partial checkpointing refused)"),
    only("model.activations_checkpoint_layers_per_pipeline", (None,), "null only"),
    only("model.overlap_p2p_comm", (True,), "with an interleaved pipeline, true only: "
         "simrun's engine overlaps pipeline sends with compute (Megatron-LM's default, "
         "--overlap-p2p-communication); at VP 1 not read (the config's own comment: 'valid "
         "only when virtual_pipeline_model_parallel_size is larger than 1')"),
    only("model.batch_p2p_comm", (False,), "with an interleaved pipeline, false only "
         "(separate sends and receives, which simrun's engine overlaps; batched ones "
         "refused); at VP 1 not read (as overlap_p2p_comm)"),
    only("model.ub_tp_comm_overlap_cfg", (None,), "userbuffers' per-GEMM settings: not read "
          "(--tp-comm-overlap models them)"),
    only("model.tp_comm_atomic_ag", (False,), "false only (atomic GEMM overlap refused)"),
    only("model.tp_comm_atomic_rs", (False,), "false only (atomic GEMM overlap refused)"),
    only("model.sharp", (False,), "false only (SHARP in-network reductions refused)"),
    only("model.sync_batch_comm", (False,), "false only"),
    only("model.tokenizer.library", ("megatron",), "megatron only (its GPT2BPETokenizer has "
          "GPT-2's 50257 tokens; a sentencepiece or Hugging Face tokenizer's vocabulary is in "
          "its file, which simrun does not read)"),
    NemoKey("model.data.seq_length", "allowed", "must equal encoder_seq_length"),
    *irrelevant(("model.tokenizer.delimiter", "model.tokenizer.vocab_file",
           "model.tokenizer.merge_file", "model.tokenizer.model", "model.resume_from_checkpoint",
           "model.data.data_impl", "model.data.splits_string", "model.data.skip_warmup",
           "model.data.dataloader_type", "model.data.index_mapping_dir",
           "model.data.data_prefix"), "data and tokenizer files, checkpoints"),
    *irrelevant(("model.gradient_as_bucket_view",), "PyTorch DDP's gradient memory layout (not "
          "used with distributed_fused_adam): the same collectives run"),
    *irrelevant(("model.grad_div_ar_fusion",), "the gradient division folded into the reduction: "
          "the same bytes are reduced"),
    *irrelevant(("model.grad_allreduce_chunk_size_mb",), "the chunking of NeMo's own fp32 gradient "
          "all-reduce, not used with distributed_fused_adam"),
    *irrelevant(("model.use_cpu_initialization", "model.onnx_safe"),
          "initialisation and export, outside the iteration"),
    *irrelevant(("model.apex_transformer_log_level",), "logging"),
    *irrelevant(("model.gc_interval",), "Python garbage collection at fixed intervals: simrun "
          "models no GC pauses, which is what it aims for (Megatron-LM's --manual-gc)"),
)

#: sections every key of which is irrelevant to one iteration's time
SECTIONS = {
    "defaults": "Hydra's list of config files (the userbuffers file is read only with "
                "ub_tp_comm_overlap, see model.ub_tp_comm_overlap_cfg)",
    "hydra": "Hydra's search path", "run": "the job's name, results folder and time limit",
    "exp_manager": "logging, checkpoints and step timing",
    "model.nsys_profile": "the Nsight Systems profiler's range: the same kernels run",
    "model.optim.sched": "the learning-rate schedule",
}

BY_KEY = {k.key: k for k in KEYS}


def verdict_of(key: str) -> NemoKey | None:
    """The declaration of ``key`` (a key of an irrelevant section is irrelevant)."""
    if key in BY_KEY:
        return BY_KEY[key]
    for section, why in SECTIONS.items():
        if key == section or key.startswith(section + "."):
            return NemoKey(key, "irrelevant", why)
    return None

"""What simrun does with each key of a Megatron-Bridge ``ConfigContainer`` dump (NeMo 2's
``run_config.yaml``; NVIDIA-NeMo/Megatron-Bridge ``megatron/bridge/training/config.py``): the
declarations the reader (:mod:`sim.jobs.bridge`) applies, in this order:

1. :data:`KEYS`: keys with their own rule (a Megatron-LM argument under another name or with
   a translated value, a value simrun requires, a statement);
2. a key at Megatron-Core's or Megatron-LM's default (sim/data/megatron_defaults.json: the
   config dataclasses' defaults at NVIDIA/Megatron-LM d98e8a64dd) is accepted as that default,
   what simrun models (a ``null`` for a key absent from those tables leaves a feature unset);
3. a key whose name is a Megatron-LM argument the Megatron reader knows
   (:mod:`sim.jobs.megatron_table`: ``model.num_layers`` is ``--num-layers``) is handed to it:
   ``true`` → the switch, ``false`` / ``null`` → not given, a value → its words;
4. a key of a section irrelevant to one iteration (:data:`SECTIONS`) is irrelevant;
5. anything else is refused, naming the key and its line.

A value ``{_target_: X}`` (a class or function Bridge instantiates) is read as ``X``.
"""

from __future__ import annotations

from sim.jobs.nemo_table import NemoKey, arg, irrelevant, off_switch, only, switch

_DEFAULT_FUSION = ("true only: Megatron-LM's default fused kernel (its --no-* flag turns it "
                   "off; Megatron-Core's dataclass default is false, Megatron-LM sets it), what "
                   "simrun's kernel model times; false refused")
_SAME_AS = "the same setting as the {} key (Bridge copies one into the other)"


def _scopes(v) -> list[str] | None:
    """``model.cuda_graph_scope``: a list (Bridge's dump) or one string of scopes."""
    words = [str(x) for x in v] if isinstance(v, list) else [] if v is None else [str(v)]
    return words or None

KEYS: tuple[NemoKey, ...] = (
    # the model (Megatron-Core TransformerConfig via Bridge's GPTModelProvider)
    NemoKey("model.activation_func", "megatron", "torch.nn.functional.silu with "
            "gated_linear_unit → --swiglu; gelu (the default) → GeLU; others refused",
            "--swiglu"),
    NemoKey("model.gated_linear_unit", "irrelevant", "read with model.activation_func"),
    arg("model.share_embeddings_and_output_weights", "--untie-embeddings-and-output-weights",
        off_switch),
    arg("model.add_bias_linear", "--disable-bias-linear", off_switch),
    arg("model.apply_rope_fusion", "--no-rope-fusion", off_switch),
    arg("model.num_moe_experts", "--num-experts"),
    NemoKey("model.num_query_groups", "megatron", "N → --group-query-attention "
            "--num-query-groups N", "--num-query-groups"),
    NemoKey("model.seq_length", "allowed", "the rotary / position table's length: at least "
            "dataset.seq_length (the samples' length, which the iteration runs)"),
    NemoKey("dataset.seq_length", "megatron", "the samples' length: --seq-length",
            "--seq-length"),
    NemoKey("model.params_dtype", "allowed", "the weights' dtype: torch.bfloat16 with bf16, "
            "torch.float16 with fp16 (the mixed_precision section's)"),
    NemoKey("model.pipeline_dtype", "irrelevant", "the dtype of pipeline sends: the model's "
            "(mixed_precision.pipeline_dtype)"),
    only("model.bias_activation_fusion", (True,), _DEFAULT_FUSION),
    only("model.bias_dropout_fusion", (True,), _DEFAULT_FUSION),
    only("model.masked_softmax_fusion", (True,), _DEFAULT_FUSION),
    only("model.persist_layer_norm", (True,), _DEFAULT_FUSION),
    only("model.gradient_accumulation_fusion", (True,), _DEFAULT_FUSION),
    only("model.deallocate_pipeline_outputs", (True, False), "memory only: the pipeline "
         "output's storage freed once sent; the same kernels and sends run"),
    arg("model.cuda_graph_impl", "--cuda-graph-impl", why="Megatron-Core's CUDA graphs: "
        "--cuda-graph-impl (none, local, transformer_engine; one host launch per graph "
        "replay)"),
    NemoKey("model.cuda_graph_scope", "megatron", "a list or a string of Megatron-Core "
            "scopes → --cuda-graph-scope (full or empty: the whole layer)", "--cuda-graph-scope",
            _scopes),
    *irrelevant(("model.cuda_graph_warmup_steps", "model.cuda_graph_retain_backward_graph",
                 "model.cuda_graph_use_single_mempool"),
                "how CUDA graphs are captured (warm-up steps before the measured ones, the "
                "backward's retain_graph, one memory pool or several): the replayed kernels "
                "are the same; graph memory is not modelled"),
    only("model.should_pad_vocab", (True,), "true only: the vocabulary padded as Megatron-LM "
         "pads it (make_vocab_size_divisible_by · TP)"),
    only("model.mtp_enabled", (False,), "false only (multi-token prediction refused)"),
    only("model.rope_scaling", (False,), "false only"),
    only("model.restore_modelopt_state", (False,), "false only"),
    only("model.use_transformer_engine_full_layer_spec", (False,), "false only"),
    only("model.transformer_layer_spec", ("megatron.bridge.models.gpt_provider."
                                          "default_layer_spec",),
         "Bridge's default GPT layer (Transformer Engine's fused modules) only"),
    NemoKey("model.attention_softmax_in_fp32", "stated", "the softmax's dtype in the "
            "unfused attention: not modelled (simrun's attention kernels are timed as "
            "measured or by their bytes in the model's dtype)"),
    NemoKey("model.disable_parameter_transpose_cache", "stated", "Transformer Engine's cache "
            "of transposed weights: not modelled (simrun's GEMMs take no transpose time)"),
    *irrelevant(("model.hf_model_id", "model.parallel_output", "model.seq_len_interpolation_"
                 "factor", "model.rope_scaling_factor", "model.use_arbitrary_attention_mask",
                 "model.scatter_embedding_sequence_parallel", "model.yarn_mscale",
                 "model.yarn_mscale_all_dim", "model.yarn_rotary_scaling_factor",
                 "model.rotary_scaling_factor", "model.inference_grouped_gemm_backend",
                 "model.min_offloaded_tensor_size", "model.offload_modules",
                 "model.moe_deepep_num_sms", "model.moe_hybridep_num_sms",
                 "model.num_layers_at_start_in_bf16", "model.num_layers_at_end_in_bf16"),
                "read only by a feature this config leaves off (inference, rope scaling, "
                "offloading, DeepEP, first/last layers in bf16) or the source "
                "of the weights; the model's sizes come from the other keys"),
    # mixed precision (Bridge's MixedPrecisionConfig, copied into the model and optimizer)
    arg("mixed_precision.bf16", "--bf16", switch),
    arg("mixed_precision.fp16", "--fp16", switch),
    only("mixed_precision.fp32", (False,), "false only (fp32 training refused)"),
    NemoKey("mixed_precision.fp8", "megatron", "e4m3 / hybrid → --fp8-format; null: no FP8",
            "--fp8-format"),
    NemoKey("mixed_precision.fp8_recipe", "megatron", "with fp8: --fp8-recipe (delayed, "
            "tensorwise, mxfp8 on Blackwell; blockwise refused)", "--fp8-recipe"),
    *(NemoKey(k, "megatron", "e2m1 → --fp4-format e2m1 (NVFP4, Megatron-Bridge's "
              "bf16_with_nvfp4_mixed); null: no FP4", "--fp4-format")
      for k in ("mixed_precision.fp4", "model.fp4")),
    *(NemoKey(k, "megatron", "with fp4: --fp4-recipe (nvfp4; custom refused)", "--fp4-recipe")
      for k in ("mixed_precision.fp4_recipe", "model.fp4_recipe")),
    arg("mixed_precision.fp4_param", "--fp4-param-gather", switch,
        "NVFP4 primary weights, gathered in FP4: --fp4-param-gather"),
    *irrelevant(("model.fp4_param", "ddp.fp4_param_gather"),
                _SAME_AS.format("mixed_precision.fp4_param_gather")),
    only("model.fp4_quantizer_factory", (None,), "null only (the custom FP4 recipe's "
         "quantizer factory is refused)"),
    arg("mixed_precision.fp8_param", "--fp8-param-gather", switch,
        "FP8 primary weights, gathered in FP8: --fp8-param-gather"),
    NemoKey("mixed_precision.grad_reduce_in_fp32", "megatron", "false with bf16 → "
            "--grad-reduce-in-bf16; true: fp32 (Megatron-LM's default)",
            "--grad-reduce-in-bf16"),
    NemoKey("ddp.grad_reduce_in_fp32", "irrelevant", _SAME_AS.format(
        "mixed_precision.grad_reduce_in_fp32")),
    only("mixed_precision.autocast_enabled", (False,), "false only"),
    *irrelevant(("mixed_precision.params_dtype", "mixed_precision.pipeline_dtype",
                 "mixed_precision.num_layers_at_start_in_bf16",
                 "mixed_precision.num_layers_at_end_in_bf16",
                 "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag"),
                "copied into the model's keys (params_dtype, ...) or read by MXFP8 only"),
    *irrelevant(("optimizer.params_dtype", "optimizer.main_params_dtype",
                 "optimizer.main_grads_dtype", "optimizer.exp_avg_dtype",
                 "optimizer.exp_avg_sq_dtype"), "the optimizer's fp32 state and main "
                "parameters: Megatron's mixed precision (a precision-aware optimizer, which "
                "would use others, is off)"),
    only("optimizer.optimizer", ("adam",), "adam only (Megatron-Core's Adam step simrun "
         "times)"),
    # data parallelism and distribution
    arg("ddp.bucket_size", "--ddp-bucket-size"),
    NemoKey("ddp.megatron_fsdp_main_params_dtype", "irrelevant", "read by Megatron-FSDP only"),
    only("ddp.data_parallel_sharding_strategy", ("no_shard",), "no_shard only (Megatron-FSDP "
         "refused)"),
    only("dist.use_torch_fsdp2", (False,), "false only here (Megatron-LM's --use-torch-fsdp2 "
         "path is read from Megatron-LM arguments)"),
    only("dist.use_megatron_fsdp", (False,), "false only (Megatron-FSDP refused)"),
    only("dist.use_sharp", (False,), "false only (SHARP refused)"),
    arg("dist.align_grad_reduce", "--no-align-grad-reduce", off_switch),
    only("dist.distributed_backend", ("nccl",), "nccl only"),
    only("comm_overlap", (None,), "null only: Bridge's CommOverlapConfig rewrites the model's "
         "and ddp's overlap keys when training starts; set them there"),
    only("peft", (None,), "null only (LoRA and other adapters refused)"),
    only("train.decrease_batch_size_if_needed", (False,), "false only"),
    *irrelevant(("train.exit_signal", "train.exit_signal_handler",
                 "train.exit_signal_handler_for_dataloader", "train.iterations_to_skip",
                 "train.skip_train", "train.train_sync_interval",
                 "train.check_optimizer_step_success",
                 "train.check_weight_hash_across_dp_replicas_interval",
                 "train.skip_sync_grad_norm_across_mp", "train.manual_gc_eval",
                 "train.manual_gc_interval"), "what happens between or around iterations"),
)

#: sections every key of which is irrelevant to one iteration's time
SECTIONS = {
    "checkpoint": "checkpoints are saved between iterations", "logger": "logging",
    "dataset": "the data set and its loading", "tokenizer": "the tokenizer's files "
    "(the vocabulary size is model.vocab_size)", "rng": "random seeds",
    "rerun_state_machine": "fault detection between iterations",
    "profiling": "profiler ranges: the same kernels run", "scheduler": "the learning-rate "
    "and weight-decay schedule", "validation": "validation runs between iterations",
    "ft": "fault tolerance", "straggler": "straggler detection",
    "nvrx_straggler": "straggler detection", "inprocess_restart": "restarts",
    "tensor_inspect": "debugging", "optimizer_config_override_provider": "the optimizer's "
    "per-parameter hyperparameters", "dist": "process-group setup, timeouts, flight recorder",
}

#: key prefixes irrelevant with the optimizer simrun requires (optimizer.optimizer: adam)
PREFIXES = {"optimizer.muon_": "read by the Muon optimizer only (optimizer: adam)",
            "optimizer.lion_": "read by the Lion optimizer only (optimizer: adam)",
            "optimizer.sgd_": "read by SGD only (optimizer: adam)"}

BY_KEY = {k.key: k for k in KEYS}

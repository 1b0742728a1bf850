"""Declarations (:mod:`sim.options.registry`) of the communication-overlap and precision
options: the data-parallel gradient reduction (overlap, delay, dtype, buckets), the parameter
all-gather, the tensor-parallel overlaps and the FP8 recipe and parameters."""

from __future__ import annotations

from sim.models.features import param_gather_step
from sim.models.features.grad_sync import DELAY_SCHEDULES, delay_applies
from sim.options.declaration import Flag, Option, deferred

_MEGATRON_LOG = ("refused", "Megatron's; DeepSpeed's collectives come from the log; leave it out")
_NO_TP_LOG = ("refused", "needs TP > 1; the log is TP 1; leave it out")


def _no_dp(_model, par) -> str | None:
    return "needs DP > 1 (no gradient reduction at DP 1)" if par.dp_cp == 1 else None


def fp8_recipe(text: str) -> str:
    """A recipe simrun models; Megatron-Core's block-scaling recipes and anything else are
    refused with a one-line reason (ValueError)."""
    from sim.models.features.fp8 import NOT_MODELLED, RECIPES  # on use: the parser loads no
    # feature module

    if text in RECIPES:
        return text
    names = f"{', '.join(RECIPES[:-1])} or {RECIPES[-1]}"
    if text in NOT_MODELLED:
        raise ValueError(f"{text} (block scaling) is a Megatron-Core recipe simrun does not "
                         f"model; use {names}")
    raise ValueError(f"expected {names}, got {text!r}")


def fp4_format(text: str) -> str:
    """Megatron-Core's ``--fp4-format``: ``e2m1`` only (ValueError otherwise)."""
    if text != "e2m1":
        raise ValueError(f"expected e2m1 (Megatron-Core's only FP4 format), got {text!r}")
    return text


def fp4_recipe(text: str) -> str:
    """Megatron-Core's ``--fp4-recipe``: ``nvfp4``; ``custom`` (a user quantizer factory) is
    refused with its reason (ValueError)."""
    if text == "custom":
        raise ValueError("custom (a user-supplied fp4_quantizer_factory) is not modelled; "
                         "use nvfp4")
    if text != "nvfp4":
        raise ValueError(f"expected nvfp4, got {text!r}")
    return text


def _no_fp4(_m, par) -> str | None:
    return None if par.fp4 else ("applies to --fp4-format e2m1 runs (without it no GEMM runs "
                                 "in FP4)")


_NO_FP4_LOG = ("refused", "the log is DeepSpeed's, without Transformer Engine's NVFP4 recipe; "
                          "leave it out")

OPTIONS = (
    Option("overlap_grad_reduce", "Megatron-Core DDP overlap_grad_reduce "
                                  "(--overlap-grad-reduce)", "sim.models.features.grad_sync", (
        Flag("--overlap-grad-reduce",
             "Megatron-Core: DP gradient collective per bucket as its gradients are ready in "
             "the last microbatch's backward (the default)", exclusive="overlap-grad-reduce",
             model=("refused-if", "the default, stated; refused at DP 1 (no DP gradient "
                                  "collective)"),
             log=_MEGATRON_LOG, refuse=_no_dp),
        Flag("--no-overlap-grad-reduce",
             "one blocking DP gradient collective after the backward instead of per-bucket "
             "overlap", value=False, exclusive="overlap-grad-reduce",
             model=("refused-if", "refused at DP 1 (no DP gradient collective)"),
             log=_MEGATRON_LOG, refuse=_no_dp)),
        assumption="grad-reduce", recorded_at_default=True),
    Option("delay_grad_reduce", "Megatron-LM --no-delay-grad-reduce (--no-align-grad-reduce)",
           "sim.models.features.grad_sync", (
               Flag("--no-delay-grad-reduce",
                    "Megatron-LM: with --overlap-grad-reduce and PP > 1 (1f1b or interleaved), "
                    "every stage reduces its gradients per bucket during its last backward. "
                    "Default (Megatron's delay_grad_reduce): only stage 0 does; the others "
                    "launch theirs after their last backward (interleaved: per model chunk, "
                    "offset by the pipeline rank)", value=False,
                    aliases=("--no-align-grad-reduce",),
                    model=("refused-if", "every pipeline stage reduces per bucket during each "
                                         "chunk's last backward (assumption '--no-delay-grad-"
                                         "reduce: ...'); refused without overlapped gradient "
                                         "reduction, at PP 1 or DP 1, with ZeRO / FSDP, and "
                                         "for schedules other than Megatron's interleaved one "
                                         "(in 1F1B a later stage's one bucket launches at the "
                                         "same point)"),
                    log=_MEGATRON_LOG,
                    refuse=lambda _m, par: None if delay_applies(par) else (
                        "Megatron delays gradient reductions only with --overlap-grad-reduce, "
                        "PP > 1, DP > 1, Megatron DDP (no ZeRO / FSDP) and its "
                        f"{' or '.join(DELAY_SCHEDULES)} schedule, so it changes nothing "
                        "here")),),
           assumption="dp-gradient", recorded_at_default=True),
    Option("grad_reduce_in_bf16", "Megatron-LM --grad-reduce-in-bf16 (Megatron-Core DDP "
                                  "grad_reduce_in_fp32 = False)", "sim.models.memory", (
        Flag("--grad-reduce-in-bf16",
             "Megatron-LM (Megatron-Core DDP grad_reduce_in_fp32=False), dtype bf16 or fp8: "
             "gradients accumulated and reduced in bf16, 2 bytes per parameter in the gradient "
             "buffer and the DP collectives instead of 4; the optimizer step casts its shard to "
             "fp32 (default: fp32 gradients)",
             model=("refused-if", "bf16 gradients; refused: fp16, ZeRO / FSDP"),
             log=_MEGATRON_LOG,
             refuse=lambda _m, par: ("fp16 and ZeRO / FSDP gradients are 16-bit already; it "
                                     "changes nothing here")
             if par.dtype == "fp16" or bool(par.zero) or par.fsdp else None),),
        assumption="dtype"),
    Option("ddp_bucket_size", "Megatron-LM --ddp-bucket-size (Megatron-Core DDP bucket_size)",
           "sim.models.optimizer", (
               Flag("--ddp-bucket-size",
                    "Megatron-LM (Megatron-Core DDP bucket_size): parameters per DP gradient "
                    "bucket with --overlap-grad-reduce (default: {default})",
                    default_text="Megatron-Core's max(40,000,000, 1,000,000 x DP), DP without "
                                 "CP",
                    kind="int", metavar="N", unit="parameters",
                    model=("refused-if", "the DP gradient buckets (assumption '--overlap-grad-"
                                         "reduce: ...'); refused without overlapped gradient "
                                         "reduction, at DP 1, with ZeRO / FSDP"),
                    log=_MEGATRON_LOG,
                    refuse=lambda _m, par: (
                        "Megatron-Core buckets DP gradients only with DP > 1 and "
                        "--overlap-grad-reduce in its DDP (no ZeRO / FSDP), so it changes "
                        "nothing here") if par.dp_cp == 1 or not par.overlap_grad_reduce
                    or bool(par.zero) or par.fsdp else None),),
           assumption="grad-reduce"),
    Option("overlap_param_gather", "Megatron-Core --overlap-param-gather",
           "sim.models.features.zero", (
               Flag("--overlap-param-gather",
                    "Megatron-Core, with --distributed-optimizer: each bucket's parameter "
                    "all-gather runs beside the next iteration's forward; its first use waits "
                    "for it (default: all-gathers after the optimizer step)",
                    model=("changes", "parameter all-gathers beside the forward (refused "
                                      "without --distributed-optimizer, with ZeRO-3)"),
                    log=_MEGATRON_LOG),),
           assumption="param-gather", recorded_at_default=True),
    Option("overlap_param_gather_with_optimizer_step",
           "Megatron-Core --overlap-param-gather-with-optimizer-step (OptimizerConfig)",
           "sim.models.features.param_gather_step", (
               Flag(param_gather_step.FLAG,
                    "Megatron-Core, with --overlap-param-gather, --distributed-optimizer and "
                    "the interleaved schedule: model chunk 0's parameters are stepped first and "
                    "their all-gather runs beside the optimizer step of the other chunks, not "
                    "beside the next forward; every chunk one gradient bucket",
                    model=("changes", "chunk 0's parameter all-gather beside the optimizer "
                                      "step (assumption '--overlap-param-gather-with-optimizer-"
                                      "step ...'); refused without --overlap-param-gather, "
                                      "--distributed-optimizer or vpp > 1, and with "
                                      "--fp8-param-gather"),
                    log=_MEGATRON_LOG,
                    refuse=lambda _m, par: None if par.dp_cp > 1 else (
                        "needs DP > 1 (no parameter all-gather at DP 1)")),),
           assumption="param-gather-step", check=param_gather_step.check),
    Option("tp_comm_overlap", "Megatron-Core --tp-comm-overlap",
           "sim.models.features.tp_overlap", (
               Flag("--tp-comm-overlap",
                    "Megatron-Core with Transformer Engine userbuffers: each layer's "
                    "sequence-parallel all-gathers/reduce-scatters pipelined in chunks with the "
                    "GEMMs they feed (with CP too; MoE layers: attention and shared experts, "
                    "not routed experts) (needs --sequence-parallel)",
                    model=("refused-if", "TP collectives pipelined with their GEMMs "
                                         "(assumption); refused without sequence parallelism "
                                         "at TP > 1"),
                    log=_NO_TP_LOG),),
           assumption="tp-overlap", recorded_at_default=True),
    Option("async_tensor_model_parallel_allreduce",
           "Megatron-LM --async-tensor-model-parallel-allreduce", "sim.models.features.tp_async", (
               Flag("--async-tensor-model-parallel-allreduce",
                    "Megatron-LM's flag (September 2021; on by default in later Megatron-LM and "
                    "in Transformer Engine): the column-parallel linears' (qkv, fc1) backward "
                    "TP collectives beside their dgrad/wgrad GEMMs, the NCCL kernel taking its "
                    "channels' SMs (default: serial, as the calibration measurements behave; "
                    "see docs/models.md)",
                    model=("refused-if", "the column-parallel linears' backward TP collectives "
                                         "beside their GEMMs (assumption 'TP backward ...'); "
                                         "refused at TP 1, with --tp-comm-overlap and with "
                                         "--no-compile"),
                    log=_NO_TP_LOG),),
           assumption="tp-async", check=deferred("sim.models.features.tp_async")),
    Option("fp8_recipe", "Megatron-Core --fp8-recipe", "sim.models.features.fp8", (
        Flag("--fp8-recipe",
             "with --dtype fp8: Megatron-Core's FP8 recipe as Transformer Engine runs it: "
             "delayed (scales from the amax history, one amax all-reduce per model chunk and "
             "microbatch in forward and in backward), tensorwise (current scaling: an amax "
             "pass over every tensor before its cast) or mxfp8 (MXFP8 block scaling, "
             "data-center Blackwell only: one quantise kernel writing row- and column-wise "
             "copies with E8M0 scales per 32 values, its GEMMs at 1.0512x the per-tensor FP8 "
             "time measured on one B300); blockwise is refused "
             "(default: {default}, Megatron-Core's)", kind="parse", parse=fp8_recipe,
             metavar="RECIPE",
             model=("refused-if", "Transformer Engine's FP8 cast kernels and amax reductions "
                                  "of the recipe, for mxfp8 its GEMMs' rate (assumption "
                                  "'--fp8-recipe ...'); refused "
                                  "without --dtype fp8, mxfp8 on GPUs other than Blackwell"),
             log=("refused", "the log is DeepSpeed's, without Transformer Engine's FP8 "
                             "recipes; leave it out"),
             refuse=lambda _m, par: None if par.dtype == "fp8" else (
                 f"applies to --dtype fp8 runs (a {par.dtype} run has no FP8 casts or scaling "
                 "factors)")),),
        assumption="fp8", recorded_at_default=True),
    Option("fp8_param_gather", "Megatron-Core --fp8-param-gather (fp8_param, TE "
                               "fp8_model_init)", "sim.models.features.fp8_params", (
        Flag("--fp8-param-gather",
             "Megatron-LM, with --dtype fp8 and --distributed-optimizer: the TE linears' "
             "weights are FP8 parameters, quantised from the master weights after the "
             "optimizer step (amax all-reduce in DP) and all-gathered at 1 byte per parameter; "
             "no weight cast in the first forward, an FP8 transpose after the all-gather",
             model=("refused-if", "FP8 weights: 1-byte parameter all-gathers, quantised after "
                                  "the optimizer step (assumption '--fp8-param-gather ...'); "
                                  "refused without --dtype fp8, the distributed optimizer, or "
                                  "with FSDP"),
             log=_MEGATRON_LOG),),
        assumption="fp8-params", check=deferred("sim.models.features.fp8_params")),
    Option("fp4", "Megatron-Core --fp4-format (TransformerConfig.fp4)",
           "sim.models.features.nvfp4", (
               Flag("--fp4-format",
                    "Megatron-Core, with --dtype bf16 on data-center Blackwell: the TE "
                    "linears' fprop, dgrad and wgrad GEMMs in NVFP4 (E2M1 values, E4M3 scale "
                    "per 16, FP32 per tensor) on the GPU's fp4 tensor cores (its MXFP8 rate "
                    "x fp4/fp8 peak x 0.634, measured on one B300), with Transformer "
                    "Engine's quantisation kernels (default: off)", kind="parse",
                    parse=fp4_format, metavar="FORMAT",
                    model=("refused-if", "NVFP4 GEMMs and quantisation kernels (assumption "
                                         "'--fp4-format ...'); refused with --dtype other "
                                         "than bf16, on GPUs other than Blackwell, with MoE "
                                         "layers"),
                    log=_NO_FP4_LOG),),
           assumption="fp4", check=deferred("sim.models.features.nvfp4")),
    Option("fp4_recipe", "Megatron-Core --fp4-recipe (TransformerConfig.fp4_recipe)",
           "sim.models.features.nvfp4", (
               Flag("--fp4-recipe",
                    "with --fp4-format e2m1: Megatron-Core's FP4 recipe: nvfp4 (Transformer "
                    "Engine's NVFP4BlockScaling); custom is refused (default: {default})",
                    kind="parse", parse=fp4_recipe, metavar="RECIPE",
                    model=("refused-if", "names the recipe of the NVFP4 line; refused "
                                         "without --fp4-format"),
                    log=_NO_FP4_LOG, refuse=_no_fp4),),
           assumption="fp4"),
    Option("fp4_param_gather", "Megatron-Core --fp4-param-gather (fp4_param)",
           "sim.models.features.nvfp4_params", (
               Flag("--fp4-param-gather",
                    "Megatron-LM, with --fp4-format e2m1 and --distributed-optimizer: the TE "
                    "linears' weights are NVFP4 parameters, quantised after the optimizer "
                    "step (tile and global amax all-reduces in DP) and all-gathered at 0.5 "
                    "byte per parameter",
                    model=("refused-if", "NVFP4 weights: 0.5-byte parameter all-gathers, "
                                         "quantised after the optimizer step (assumption "
                                         "'--fp4-param-gather ...'); refused without "
                                         "--fp4-format or the distributed optimizer"),
                    log=_MEGATRON_LOG, refuse=_no_fp4),),
           assumption="fp4-params"),
)

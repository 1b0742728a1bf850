"""Declarations (:mod:`sim.options.registry`) of the execution-mode options: compiled or eager
element-wise kernels (torchtitan), PyTorch FSDP2's kernels, Megatron-Core's RoPE fusion, the
deferred output-layer weight gradients and the fused cross entropy."""

from __future__ import annotations

from sim.models.features import defer_wgrad
from sim.options.declaration import Flag, Option

#: a workload file's verdict: its compute times are measured, not these kernels'
_FILE = ("refused", "applies to --model runs (a workload file fixes its compute times); leave "
                    "it out, or use --model")

_EAGER_LOG = ("refused", "the model times the log's compute with Megatron's fused layer; the "
                         "eager operator list is torchtitan's (--model runs); leave it out")
_NO_PIPELINE = ("refused", "Megatron-Core's pipeline flush; the log is one DeepSpeed forward "
                           "and backward (no pipeline stages); leave it out")


def _scope_unused(_model, par) -> str | None:
    if par.cuda_graph_impl == "none":
        return "the scope of CUDA graphs, which are off (--cuda-graph-impl none)"
    return None


def _parse_scope(text: str) -> str:
    from sim.models.features.cuda_graphs import parse_scope  # on use: the parser loads no feature

    return parse_scope(text)


_GRAPHS = "sim.models.features.cuda_graphs"
_GRAPH_LOG = ("refused", "the log's rows carry no kernel launches (no host-dispatch model); "
                         "leave it out")
_GRAPH_MODEL = ("changes", "the host's launches: one per graph replay instead of one per kernel "
                           "(assumption 'CUDA graphs ...'; nothing with --host-dispatch-us 0, "
                           "as the line says); Megatron-Core's refusals, and MoE layers' graphs "
                           "refused")


def _all_deferred(_model, par) -> str | None:
    if 0 < par.wgrad_deferral_limit >= par.microbatches:
        return f"every one of the {par.microbatches} microbatches is deferred, as with 0"
    return None


def _impl_unused(_model, par) -> str | None:
    if not par.cross_entropy_loss_fusion and par.cross_entropy_fusion_impl != "native":
        return "the implementation of the fused cross entropy, which is off"
    return None


_CE_LOG = ("refused", "the log is DeepSpeed's, without Megatron-Core's loss fusion; leave it out")

OPTIONS = (
    Option("compile", "torchtitan training.compile", "sim.models.features.eager", (
        Flag("--compile",
             "element-wise kernels fused, as Megatron-Core / Transformer Engine and "
             "torch.compile (torchtitan's training.compile) run them (the default)",
             exclusive="compile",
             model=("states", "the default: fused element-wise kernels (assumption "
                              "'element-wise kernels fused ...')"),
             log=_EAGER_LOG, aicb=_FILE, optable=_FILE),
        Flag("--no-compile",
             "PyTorch eager, as torchtitan runs with training.compile = false: one kernel per "
             "operator (RMSNorm, rotary embedding, SwiGLU, residual adds); torchtitan's Llama "
             "block only", value=False, exclusive="compile",
             model=("refused-if", "PyTorch eager element-wise kernels of torchtitan's Llama "
                                  "block (assumption '--no-compile: ...'); refused for other "
                                  "models (LayerNorm, GeLU, learned positions, MoE), fp8, "
                                  "unfused attention, --tp-comm-overlap"),
             log=_EAGER_LOG, aicb=_FILE, optable=_FILE)),
        assumption="eager"),
    Option("use_torch_fsdp2", "Megatron-LM --use-torch-fsdp2", "sim.models.features.fsdp2", (
        Flag("--use-torch-fsdp2",
             "with --fsdp, PyTorch FSDP2 (fully_shard, as Megatron-LM's --use-torch-fsdp2 and "
             "torchtitan run it): the copies around each all-gather and reduce-scatter, "
             "gradients reduced in fp32",
             model=("refused-if", "PyTorch FSDP2's copies and fp32 reduce-scatter (assumption "
                                  "'--use-torch-fsdp2: ...'); refused without --fsdp"),
             log=("refused", "the log is DeepSpeed ZeRO-3's; leave it out"), aicb=_FILE,
             optable=_FILE),),
        assumption="zero"),
    Option("norm_type", "torchtitan model.norm_type", "sim.models.features.eager", (
        Flag("--norm-type",
             "with --no-compile, torchtitan's model.norm_type: rmsnorm (eager PyTorch "
             "operators) or fused_rmsnorm (its Triton kernel) (default: {default})",
             kind="choice", choices=("rmsnorm", "fused_rmsnorm"),
             model=("refused-if", "torchtitan's norm_type in eager mode (assumption "
                                  "'--no-compile: ... RMSNorm ...'); refused without "
                                  "--no-compile"),
             log=_EAGER_LOG, aicb=_FILE, optable=_FILE),),
        assumption="eager"),
    Option("apply_rope_fusion", "Megatron-LM --no-rope-fusion (TransformerConfig."
                                "apply_rope_fusion)", "sim.models.features.rope", (
        Flag("--no-rope-fusion",
             "Megatron-Core's unfused rotary embedding of q and k (cos, sin, casts, "
             "rotate_half, muls and adds: 12 forward and 5 backward kernels per tensor) "
             "instead of Transformer Engine's fused kernel (one per tensor and direction, the "
             "default); models with rope positions only", value=False,
             model=("refused-if", "Megatron-Core's unfused RoPE kernels on q and k (assumption "
                                  "'RoPE: --no-rope-fusion ...'); refused for models without "
                                  "rope positions and with --no-compile"),
             log=("refused", "the log is DeepSpeed's, without Megatron-Core's RoPE option; the "
                             "model times its compute with Megatron-Core's fused layer; leave "
                             "it out"), aicb=_FILE, optable=_FILE),),
        assumption="rope"),
    Option("defer_embedding_wgrad_compute",
           "Megatron-Core --defer-embedding-wgrad-compute (ModelParallelConfig)",
           "sim.models.features.defer_wgrad", (
               Flag(defer_wgrad.FLAG,
                    "Megatron-Core: the last pipeline stage runs its output layer's "
                    "weight-gradient GEMMs (and, with sequence parallelism, the all-gathers of "
                    "their input) after its last backward, in the pipeline flush, instead of in "
                    "each microbatch's backward; needs PP > 1 and the 1f1b or interleaved "
                    "schedule",
                    model=("refused-if", "the last stage's output-layer weight-gradient GEMMs "
                                         "(and SP all-gathers) of the deferred microbatches "
                                         "run after its last backward (assumption '--defer-"
                                         "embedding-wgrad-compute ...'); refused at PP 1 (as "
                                         "Megatron-Core), with ZeRO / FSDP and for schedules "
                                         "other than Megatron's 1f1b and interleaved"),
                    log=_NO_PIPELINE, aicb=_FILE, optable=_FILE),),
           assumption="defer-wgrad", check=defer_wgrad.check, recorded_at_default=True),
    Option("wgrad_deferral_limit", "Megatron-Core --wgrad-deferral-limit (ModelParallelConfig)",
           "sim.models.features.defer_wgrad", (
               Flag(defer_wgrad.LIMIT_FLAG,
                    "with --defer-embedding-wgrad-compute: defer only the first N microbatches "
                    "(Megatron-Core's wgrad_deferral_limit; default {default} = all)",
                    kind="count", metavar="N", unit="microbatches",
                    model=("refused-if", "how many microbatches are deferred (0: all; "
                                         "assumption line); refused without --defer-embedding-"
                                         "wgrad-compute and when N > 0 reaches the microbatch "
                                         "count (every one is deferred, as with 0)"),
                    log=_NO_PIPELINE, aicb=_FILE, optable=_FILE,
                    refuse=_all_deferred),),
           assumption="defer-wgrad", check=defer_wgrad.check, recorded_at_default=True),
    Option("cross_entropy_loss_fusion",
           "Megatron-Core --cross-entropy-loss-fusion (ModelParallelConfig)",
           "sim.models.features.cross_entropy", (
               Flag("--cross-entropy-loss-fusion",
                    "Megatron-Core's fused vocab-parallel cross entropy (off by default, as in "
                    "Megatron-LM): fused kernels and, with TP > 1, 2 TP all-reduces per "
                    "microbatch instead of 3 (implementation: --cross-entropy-fusion-impl)",
                    model=("changes", "the loss's kernels and TP all-reduces (assumption "
                                      "'embedding on the first stage ...')"),
                    log=_CE_LOG, aicb=_FILE, optable=_FILE),),
           assumption="cross-entropy"),
    Option("cross_entropy_fusion_impl",
           "Megatron-Core --cross-entropy-fusion-impl (ModelParallelConfig)",
           "sim.models.features.cross_entropy", (
               Flag("--cross-entropy-fusion-impl",
                    "with --cross-entropy-loss-fusion: native (Megatron-Core's torch.compile "
                    "kernels) or te (Transformer Engine's Triton kernels) (default: {default})",
                    kind="choice", choices=("native", "te"),
                    model=("refused-if", "which fused loss runs (assumption 'embedding on "
                                         "the first stage ...'); refused without --cross-"
                                         "entropy-loss-fusion"),
                    log=_CE_LOG, aicb=_FILE, optable=_FILE, refuse=_impl_unused),),
           assumption="cross-entropy"),
    Option("cuda_graph_impl", "Megatron-Core --cuda-graph-impl (TransformerConfig."
                              "cuda_graph_impl)", _GRAPHS, (
        Flag("--cuda-graph-impl",
             "Megatron-Core's CUDA graphs: none, local (Megatron-Core's CudaGraphManager; "
             "full_iteration possible) or transformer_engine (TE make_graphed_callables): the "
             "host issues one launch per graph replay instead of one per kernel; only host "
             "launch costs change (--host-dispatch-us; default {default})", kind="choice",
             choices=("none", "local", "transformer_engine"), exclusive="cuda_graph_impl",
             model=_GRAPH_MODEL, log=_GRAPH_LOG, aicb=_FILE, optable=_FILE),
        Flag("--enable-cuda-graph", "deprecated Megatron-Core name of --cuda-graph-impl local",
             value="local", exclusive="cuda_graph_impl", model=_GRAPH_MODEL, log=_GRAPH_LOG,
             aicb=_FILE, optable=_FILE),
        Flag("--external-cuda-graph",
             "deprecated Megatron-Core name of --cuda-graph-impl transformer_engine",
             value="transformer_engine", exclusive="cuda_graph_impl", model=_GRAPH_MODEL,
             log=_GRAPH_LOG, aicb=_FILE, optable=_FILE)),
        assumption="cuda-graphs", check=None),
    Option("cuda_graph_scope", "Megatron-Core --cuda-graph-scope (TransformerConfig."
                               "cuda_graph_scope)", _GRAPHS, (
        Flag("--cuda-graph-scope",
             "with --cuda-graph-impl: what one graph captures, comma-separated Megatron-Core "
             "scopes (full_iteration: the whole step, local only; attn; mlp; moe, moe_router, "
             "moe_preprocess, mamba: refused, see docs/engine.md); empty or full: the whole "
             "transformer layer (default)", kind="parse", parse=_parse_scope, metavar="SCOPES",
             model=("refused-if", "which kernels one graph launch replays (assumption 'CUDA "
                                  "graphs ...'); refused with --cuda-graph-impl none"),
             log=_GRAPH_LOG, aicb=_FILE, optable=_FILE, refuse=_scope_unused),),
        assumption="cuda-graphs"),
)

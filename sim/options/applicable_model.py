"""The verdicts for ``simrun --model`` of the model-input flags that are not training options
(the layout's data-parallel, context-parallel and expert tensor-parallel sizes, the batch sizes
and ``--ignore-memory``) for :data:`sim.options.applicable.TABLE`: what each changes in a
generated workload, or when it is refused (``refused-if``: checked by
:func:`sim.options.applicable.check_effect`). A workload file fixes compute times and message
sizes, so every one of them is refused there. The training options' verdicts are in their
declarations (:mod:`sim.options.registry`)."""

from __future__ import annotations

MODEL_HOW: dict[str, tuple[str, str]] = {
    "--dp": ("changes", "the data-parallel size (layout line)"),
    "--micro-batch": ("changes", "sequences per microbatch (training options)"),
    "--global-batch": ("changes", "the number of microbatches (layout line)"),
    "--context-parallel-size": ("changes", "CP groups and ring attention (layout line)"),
    "--expert-tensor-parallel-size": ("refused-if", "the experts' tensor-parallel size: the "
                                                     "ETP x EP x EDP expert groups, expert GEMM "
                                                     "shapes and gradient reduction (layout "
                                                     "line, MoE assumption line); refused for a "
                                                     "dense model"),
    "--ignore-memory": ("refused-if", "refused when the layout fits in GPU memory"),
}

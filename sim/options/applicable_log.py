"""The verdicts of every flag of the main run for AICB's physical-format ZeRO-3 log read with
its model spec (``--workload LOG.csv --model SPEC``, :mod:`sim.scenario.collective_log`): the
``aicb-csv`` column of :data:`sim.options.applicable.TABLE` (verdicts as defined there); the
training options' are in their declarations (:mod:`sim.options.registry`)."""

from __future__ import annotations

# the log fixes the layout and the collectives, the model the compute; this column replaces
# the one applicable._all gives and completes applicable._kinds'
_LOG_FIXES = "the log fixes it (one data-parallel group of its ranks, TP = PP = CP = EP = 1, " \
             "one microbatch, ZeRO stage 3); leave it out"
_NO_PIPELINE = "the log is one DeepSpeed forward and backward (no pipeline stages); leave it out"
LOG_VERDICTS: dict[str, tuple[str, str]] = {
    "--calibration": ("changes", "every knob of the profile: the model's operator times and "
                                 "the link efficiencies (one 'calibrated' assumption per knob)"),
    "--workload": ("input", "the collective log (AICB physical format)"),
    "--format": ("refused", "the physical format is detected; --format forces the reader of a "
                            "workload read alone; leave it out"),
    "--set": ("changes", "a topology field (assumption 'topology override (--set): KEY = VALUE "
                         "(file: OLD)'); node.gpu.* changes the model-timed compute"),
    "--nodes": ("changes", "the cluster's node count (report header; the layout keeps the "
                           "log's GPUs)"),
    "--nproc-per-node": ("changes", "processes per node: each node's first K GPUs run ranks, "
                                    "rank r on node r // K (assumption '--nproc-per-node K: "
                                    "...')"),
    **dict.fromkeys(("--tp", "--pp", "--ep", "--vpp", "--microbatches", "--gpus", "--dp",
                     "--zero", "--context-parallel-size"), ("refused", _LOG_FIXES)),
    **dict.fromkeys(("--schedule", "--microbatch-group-size", "--pp-comm-bytes"),
                    ("refused", _NO_PIPELINE)),
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
    "--expert-tensor-parallel-size": ("refused", "the log is of a dense model; leave it out"),
    "--ignore-memory": ("refused-if", "refused when the layout fits in GPU memory"),
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

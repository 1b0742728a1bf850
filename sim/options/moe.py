"""Declarations (:mod:`sim.options.registry`) of the mixture-of-experts options: the load
imbalance and capacity, Megatron-Core's token dispatcher, the shared-expert width and the
expert-parallel all-to-all overlap (combined 1F1B)."""

from __future__ import annotations

from sim.options.declaration import Flag, Option

_DENSE_LOG = ("refused", "the log is of a dense model; leave it out")
_MOE = "sim.models.features.moe"


def _flex_changes_nothing(model, par) -> str | None:
    from sim.models.features.moe import dispatch_nodes  # on use: the parser loads no feature

    if (par.moe_token_dispatcher == "flex" and dispatch_nodes(par) == 1
            and (par.ep == 1 or model.moe is not None and model.moe.experts == par.ep)):
        return ("the EP group lies inside one node with one expert per GPU (or EP is 1), where "
                "the flex dispatcher sends every token copy and permutes them once, as the "
                "alltoall dispatcher does, so it changes nothing")
    return None


OPTIONS = (
    Option("moe_load_imbalance", "simrun's (no framework flag: the router's measured skew)",
           _MOE, (
               Flag("--moe-load-imbalance",
                    "MoE: tokens the busiest expert GPU receives ÷ the balanced share "
                    "(default: {default} = perfectly balanced)", kind="float", metavar="F",
                    model=("changes", "the busiest expert GPU's tokens (refused for a dense "
                                      "model)"), log=_DENSE_LOG),),
           assumption="moe"),
    Option("moe_capacity_factor", "Megatron-Core --moe-expert-capacity-factor", _MOE, (
        Flag("--moe-expert-capacity-factor",
             "MoE: Megatron's expert capacity factor, tokens beyond it dropped (default: "
             "{default})", default_text="dropless", kind="float", metavar="C",
             model=("changes", "tokens dropped beyond capacity (refused for a dense model)"),
             log=_DENSE_LOG),),
        assumption="moe"),
    Option("moe_token_dispatcher", "Megatron-Core --moe-token-dispatcher-type", _MOE, (
        Flag("--moe-token-dispatcher-type",
             "MoE: Megatron-Core's token dispatcher: alltoall (NCCL all-to-all of every token "
             "copy) or flex (DeepEP: one copy per destination node, hierarchical NVLink/RDMA "
             "all-to-all when EP spans nodes) (default: {default})", kind="choice",
             choices=("alltoall", "flex"),
             model=("refused-if", "flex: one token copy per destination node and the "
                                  "hierarchical all-to-all (MoE assumption line, 'chosen: EP "
                                  "alltoall'); alltoall states the default; flex refused where "
                                  "the EP group lies in one node or EP is 1, and for a dense "
                                  "model"),
             log=_DENSE_LOG, refuse=_flex_changes_nothing),),
        assumption="moe", recorded_at_default=True),
    Option("moe_shared_expert_intermediate_size",
           "Megatron-Core --moe-shared-expert-intermediate-size", _MOE, (
               Flag("--moe-shared-expert-intermediate-size",
                    "MoE: width of the shared-expert MLP (Megatron-Core; replaces the model "
                    "spec's shared experts)", kind="int", metavar="N",
                    model=("changes", "the shared-expert MLP's width (MoE assumption line; "
                                      "refused for a dense model)"), log=_DENSE_LOG),),
           assumption="moe", recorded_at_default=True),
    Option("overlap_moe_expert_parallel_comm",
           "Megatron-Core --overlap-moe-expert-parallel-comm (combined 1F1B)",
           "sim.pipeline.schedules", (
               Flag("--overlap-moe-expert-parallel-comm",
                    "MoE: Megatron-Core's EP all-to-all overlap (combined 1F1B): each "
                    "steady-state forward runs with a backward of another microbatch, their "
                    "expert-parallel all-to-alls beside each other's compute; needs EP > 1 and, "
                    "with PP > 1, the interleaved schedule",
                    model=("refused-if", "combined 1F1B: steady-state F&B ops with the EP "
                                         "all-to-alls beside the compute (MoE assumption "
                                         "lines); refused for a dense model, EP 1, full "
                                         "recompute, PP > 1 without the interleaved schedule"),
                    log=_DENSE_LOG),),
           assumption="ep-a2a-overlap", recorded_at_default=True),
)

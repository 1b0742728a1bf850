"""DualPipe's overlapped forward-and-backward chunk (DeepSeek-V3 report, arXiv:2412.19437,
§3.2.1 and Figure 4) on simrun's one-op-at-a-time compute stream.

DualPipe runs the forward of one microbatch and the backward of another as one op, with their
components interleaved so that each one's all-to-all (and pipeline) communication runs while
the other computes. simrun models it as: the two passes' compute back to back on the SMs, and
every blocking collective of both passes (TP, EP all-to-all) issued where its pass reaches it
but run beside the compute on the group's overlap stream instead of stalling it; the op ends
when its compute and all those collectives are done. The dependency of a layer's compute on
its own collective inside the op is not enforced: that is the hiding DualPipe's rearrangement
buys (each collective of one pass is covered by the other pass's compute), made exact. Pipeline
sends leave when the op ends, as for every op.

Megatron-Core's ``--overlap-moe-expert-parallel-comm`` runs the same kind of op in the steady
state of its 1F1B schedules (combined 1F1B, :meth:`sim.pipeline.types.Schedule.combined_ops`): there
only
the expert-parallel all-to-alls leave the compute stream (:func:`detach_blocking`).
"""

from __future__ import annotations

from sim.comm import Comm, GroupKind
from sim.engine.segments import AsyncIssue, Blocking, Compiled


def detached(comm: Comm, ep_only: bool) -> bool:
    """Whether an F&B op moves ``comm`` beside its compute: every blocking collective
    (DualPipe), or only the expert-parallel ones (``ep_only``: Megatron-Core's combined 1F1B).
    The others stay blocking and keep the engine's fused costs."""
    return not ep_only or comm.group is GroupKind.EP


def detach_blocking(comp: Compiled, paired: bool = True,
                    ep_only: bool = False) -> tuple[Compiled, tuple[GroupKind, ...]]:
    """``comp`` with its blocking collectives issued on their group's overlap stream instead
    of waited for, and the groups to await at the end of the op, one per collective in issue
    order (``comp`` unchanged and nothing to await when the op is not ``paired``). A group the
    pass already overlaps itself (an :class:`AsyncIssue` with ``overlap``, awaited inside the
    pass) keeps its collectives blocking, so the stream's FIFO waits stay matched.

    ``ep_only``: Megatron-Core's combined 1F1B (``--overlap-moe-expert-parallel-comm``;
    megatron/core/pipeline_parallel/combined_1f1b.py: "EP A2A in forward step is hidden by the
    attention/mlp computation in the backward step, and vice versa") moves only the
    expert-parallel all-to-alls to the communication stream; TP collectives stay inside the
    attention and MLP computations, blocking as in a single pass. The execution is counted on
    ``comp`` (the per-layer report reads it there)."""
    if not paired:
        return comp, ()
    own = {s.comm.group for s in comp.steps if type(s) is AsyncIssue and s.overlap}
    steps = []
    waits: list[GroupKind] = []
    for s in comp.steps:
        if type(s) is Blocking and s.comm.group not in own and detached(s.comm, ep_only):
            steps.append(AsyncIssue(s.comm, s.phase, s.layer, overlap=True))
            waits.append(s.comm.group)
        else:
            steps.append(s)
    # the engine runs the detached copy once, and its per-layer totals count the executions of
    # the pass it compiled (``comp``): count this one there
    comp.executions += 1
    return Compiled(tuple(steps), comp.layer_totals, barrier=comp.barrier), tuple(waits)


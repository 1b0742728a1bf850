"""The concrete pipeline schedules (:class:`~sim.pipeline.types.Schedule`): GPipe, 1F1B,
interleaved 1F1B (Megatron-LM), ZB-H1, ZB-H2, ZB-V (Qi et al., ICLR 2024) and DualPipe
(DeepSeek-V3). Their op orders are the pure functions of :mod:`sim.pipeline.orders`,
:mod:`sim.pipeline.zero_bubble` and :mod:`sim.pipeline.dualpipe`; the ideal bubbles are the
closed forms of docs/schedules.md. Each class has one instance, in
:mod:`sim.pipeline.registry`."""

from __future__ import annotations

from sim.pipeline.ops import pair_steady_state
from sim.pipeline.orders import check_interleaved, gpipe, interleaved, one_f_one_b
from sim.pipeline.types import Schedule


def _zb():
    """The zero-bubble orders, loaded by the first zero-bubble schedule a run uses."""
    from sim.pipeline import zero_bubble

    return zero_bubble


def _dp():
    """The DualPipe orders, loaded by the first DualPipe run."""
    from sim.pipeline import dualpipe

    return dualpipe


class GPipe(Schedule):
    """All forwards, then all backwards (Huang et al., NeurIPS 2019; Megatron style)."""

    name = "gpipe"

    def ops(self, p, r, m, v=1, n=None):
        return gpipe(p, r, m)


class OneFOneB(Schedule):
    """Non-interleaved 1F1B (PipeDream-Flush; Megatron-LM's default with one chunk)."""

    name = "1f1b"
    defers_embedding_wgrad = True

    def ops(self, p, r, m, v=1, n=None):
        return one_f_one_b(p, r, m)

    def supports_combined_1f1b(self, p):
        return p == 1

    def combined_ops(self, p, r, m, v=1, n=None):
        """Without pipelining (combined_1f1b.py): the first forward alone, then the backward of
        microbatch i with the forward of i + 1, then the last backward."""
        if p != 1:
            return super().combined_ops(p, r, m, v, n)
        return pair_steady_state(one_f_one_b(p, r, m, extra_warmup=1))


class Interleaved(Schedule):
    """Megatron's interleaved 1F1B: ``v ≥ 2`` chunks per stage, chunk ``c`` of stage ``r`` is
    virtual stage ``c·p + r``; ideal bubble ``(p−1)/(v·M)`` (Narayanan et al., SC'21)."""

    name = "interleaved"
    interleaves = True
    delays_grad_sync = True
    defers_embedding_wgrad = True
    bubble_formula = "(p-1)/(v*M)"

    def ops(self, p, r, m, v=1, n=None):
        return interleaved(p, r, m, v, n)

    def check(self, p, m, v=1, n=None, *, vpp_field="schedule"):
        check_interleaved(p, m, v, n)

    def supports_combined_1f1b(self, p):
        return True

    def combined_ops(self, p, r, m, v=1, n=None):
        """megatron/core/pipeline_parallel/schedules.py ``get_pp_rank_microbatches``: one
        warm-up forward more, "to ensure the forward and backward computations are independent
        in all 1f1b steps"."""
        return pair_steady_state(interleaved(p, r, m, v, n, extra_warmup=1))

    def ideal_bubble(self, p, m, v=1):
        return (p - 1) / (m * v)


class ZBH1(Schedule):
    """ZB-H1: 1F1B's F/B order with the W deferred; ``(p−1)/(3M)`` when F = B = W."""

    name = "zb-h1"
    splits_backward = True
    bubble_formula = "(p-1)/(3M) if F=B=W"

    def ops(self, p, r, m, v=1, n=None):
        return _zb().zb_h1(p, r, m)

    def check_chunks(self, p, m, v, vpp_field):
        super().check_chunks(p, m, v, vpp_field)
        _zb().check_zero_bubble(p, m)

    def ideal_bubble(self, p, m, v=1):
        return (p - 1) / (3 * m)


class ZBH2(ZBH1):
    """ZB-H2: the parallelogram; ``(p−1)/(3M)`` when F = B = W, the edge that simrun's
    synchronous optimizer step leaves."""

    name = "zb-h2"
    bubble_formula = "(p-1)/(3M) if F=B=W (synchronous optimizer step)"

    def ops(self, p, r, m, v=1, n=None):
        return _zb().zb_h2(p, r, m)

    def check_chunks(self, p, m, v, vpp_field):
        Schedule.check_chunks(self, p, m, v, vpp_field)
        _zb().check_zb_h2(p, m)


class ZBV(Schedule):
    """ZB-V: two chunks per stage in V placement (chunk 1 of stage ``r`` is virtual stage
    ``2p−1−r``); ``(p−1)/(6M)`` when F = B = W (the fill of one chunk against
    ``2M(F+B+W)``)."""

    name = "zb-v"
    splits_backward = True
    v_shape = True
    default_vpp = 2
    bubble_formula = "(p-1)/(6M) if F=B=W"

    def ops(self, p, r, m, v=1, n=None):
        return _zb().zb_v(p, r, m)

    def check_chunks(self, p, m, v, vpp_field):
        _zb().check_zb_v(p, m, v)

    def virtual_stage(self, p, stage, chunk):
        return 2 * p - 1 - stage if chunk == 1 else stage

    def stage_chunk(self, p, vs):
        return (2 * p - 1 - vs, 1) if vs >= p else (vs, 0)

    def ideal_bubble(self, p, m, v=1):
        return (p - 1) / (6 * m)


class DualPipe(Schedule):
    """DualPipe (DeepSeek-V3): two pipelines in opposite directions, chunk ``c`` the direction;
    rank ``r`` runs model stage ``r`` (chunk 0) and ``p−1−r`` (chunk 1) of a ``p``-stage split;
    ``(p−2)/(3M)`` when F = B = W (DeepSeek-V3's ``(p/2−1)(F&B + B − 3W)`` against
    ``M(F+B)``, ``F&B = F + B``)."""

    name = "dualpipe"
    partly_splits_backward = True
    bidirectional = True
    default_vpp = 2
    bubble_formula = "(p-2)/(3M) if F=B=W: (p/2-1)(F&B+B-3W), F&B = F+B"

    def ops(self, p, r, m, v=1, n=None):
        return _dp().dualpipe(p, r, m)

    def check_chunks(self, p, m, v, vpp_field):
        _dp().check_dualpipe(p, m, v)

    def op_count(self, p, m, v=1):
        return 3 * p * m  # M/2 per chunk; at most one W per backward

    def microbatches_per_chunk(self, m):
        return m // 2

    def virtual_stage_count(self, p, v):
        return p  # two chunks per rank: two stages of the same p-stage split

    def virtual_stage(self, p, stage, chunk):
        return _dp().dualpipe_stage(p, stage, chunk)

    def stage_chunk(self, p, vs):
        raise ValueError("dualpipe runs every model stage on two ranks")

    def peers(self, p, v, stage, chunk):
        return _dp().dualpipe_peers(p, stage, chunk)

    def ideal_bubble(self, p, m, v=1):
        return (p - 2) / (3 * m)

    def assumption(self, p, m):
        return _dp().describe(p, m)


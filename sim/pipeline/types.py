"""The schedule type: what simrun needs to know about a pipeline schedule, as one object.

A :class:`Schedule` carries its op order (:meth:`~Schedule.ops`), its constraints
(:meth:`~Schedule.check`: Megatron's refusals), its virtual-stage mapping
(:meth:`~Schedule.virtual_stage`, :meth:`~Schedule.stage_chunk`), its transfer rule
(:meth:`~Schedule.transfer`: which pipeline send / receive an op implies), whether it splits the
backward into ``B`` and ``W`` (:attr:`~Schedule.splits_backward`) and its ideal bubble
(:meth:`~Schedule.ideal_bubble`, closed form). The concrete schedules are in
:mod:`sim.pipeline.kinds`; :mod:`sim.pipeline.registry` maps names to them. Code outside
:mod:`sim.pipeline` asks these properties instead of comparing names.

Notation: ``p`` pipeline stages, ``r`` / ``stage`` a stage (0 = first), ``m`` microbatches
per iteration, ``v`` model chunks per stage, ``n`` the interleaved schedule's microbatch group
size (``None``: ``p``).
"""

from __future__ import annotations

from sim.errors import UsageError
from sim.pipeline.ops import ScheduleOp

A2A_OPTION = "overlap_moe_expert_parallel_comm"  # errors name the option (the CLI, its flag)


class Schedule:
    """One pipeline schedule (a stateless singleton; see the module docstring).

    Class attributes: ``name`` (the ``--schedule`` value, what reports print);
    ``splits_backward``: every ``B`` is the input-gradient pass only, with a separate ``W`` op
    for the weight gradients (Qi et al., ICLR 2024); ``partly_splits_backward``: some ``B`` are
    (DualPipe, :attr:`~sim.pipeline.ops.ScheduleOp.weights`); ``v_shape``: two chunks per stage
    in V placement (chunk 1 of stage ``r`` is virtual stage ``2p−1−r``); ``bidirectional``:
    two pipelines in opposite directions, chunk ``c`` the direction (every rank holds two
    stages of a ``p``-stage split); ``interleaves``: any ``v ≥ 2`` chunks per stage in
    round-robin placement, microbatches in groups of ``N`` (Megatron's interleaved 1F1B);
    ``delays_grad_sync``: Megatron's ``grad_sync_func`` changes when the DP buckets launch;
    ``defers_embedding_wgrad``: Megatron-Core's schedule calls
    ``finish_embedding_wgrad_compute``; ``default_vpp``: chunks per stage when none is given;
    ``bubble_formula``: :meth:`ideal_bubble` as text for reports."""

    name: str = ""
    splits_backward = False
    partly_splits_backward = False
    v_shape = False
    bidirectional = False
    interleaves = False
    delays_grad_sync = False
    defers_embedding_wgrad = False
    default_vpp = 1
    bubble_formula = "(p-1)/M"

    def __repr__(self) -> str:
        return f"<schedule {self.name}>"

    # op order --------------------------------------------------------------------------

    def ops(self, p: int, r: int, m: int, v: int = 1, n: int | None = None) -> list[ScheduleOp]:
        """The op order of stage ``r``."""
        raise NotImplementedError

    def combined_ops(self, p: int, r: int, m: int, v: int = 1,
                     n: int | None = None) -> list[ScheduleOp]:
        """Stage ``r``'s order with Megatron-Core's ``--overlap-moe-expert-parallel-comm``
        (combined 1F1B: every steady-state forward runs with the backward after it as one
        F&B op). Raises :class:`UsageError` where Megatron-Core refuses it
        (:meth:`supports_combined_1f1b`)."""
        raise UsageError("with pipeline parallelism, Megatron-Core overlaps the expert-parallel "
                         "all-to-alls only in the interleaved schedule (set --vpp)",
                         field=A2A_OPTION)

    def supports_combined_1f1b(self, p: int) -> bool:
        """Whether Megatron-Core runs combined 1F1B with this schedule on ``p`` stages."""
        return False

    def op_count(self, p: int, m: int, v: int = 1) -> int:
        """Forward/backward (and ``W``) ops of one iteration over all stages (at most: the
        budget :data:`sim.pipeline.schedules.MAX_OPS` is checked against it)."""
        return (3 if self.splits_backward else 2) * p * m * v

    def microbatches_per_chunk(self, m: int) -> int:
        """How many microbatches each model chunk runs per iteration."""
        return m

    # constraints -----------------------------------------------------------------------

    def check(self, p: int, m: int, v: int = 1, n: int | None = None, *,
              vpp_field: str = "schedule") -> None:
        """Every constraint the schedule puts on the layout. Raises :class:`UsageError`
        (``vpp_field``: the option named when a one-chunk schedule gets ``v > 1``)."""
        if n is not None:
            raise UsageError(f"only the interleaved schedule groups microbatches; this run uses "
                             f"{self.name} (virtual pipeline size {v})",
                             field="microbatch_group_size")
        self.check_chunks(p, m, v, vpp_field)

    def check_chunks(self, p: int, m: int, v: int, vpp_field: str) -> None:
        """The constraints besides the microbatch group size (one chunk per stage here)."""
        if v != 1:
            hint = "--vpp 1" if self.splits_backward else "--schedule interleaved or --vpp 1"
            raise UsageError(f"the {self.name} schedule runs one model chunk per stage; got a "
                             f"virtual pipeline size of {v} (use {hint})", field=vpp_field)

    # virtual stages and transfers --------------------------------------------------------

    def virtual_stage_count(self, p: int, v: int) -> int:
        """How many parts the model's layers are split into (``p·v``)."""
        return p * v

    def virtual_stage(self, p: int, stage: int, chunk: int) -> int:
        """The virtual stage (0 = the first layers) that ``chunk`` of ``stage`` runs:
        ``c·p + r`` (round robin)."""
        return chunk * p + stage

    def stage_chunk(self, p: int, vs: int) -> tuple[int, int]:
        """``(stage, chunk)`` running virtual stage ``vs`` (inverse of :meth:`virtual_stage`)."""
        return vs % p, vs // p

    def last_stage(self, p: int, v: int) -> int:
        """The stage holding the last virtual stage (the output layer and loss)."""
        return self.stage_chunk(p, self.virtual_stage_count(p, v) - 1)[0]

    def peers(self, p: int, v: int, stage: int, chunk: int) -> tuple[int | None, int | None]:
        """``(stage that sends chunk's forward input, stage its forward output goes to)`` (the
        backward gradients travel the other way); ``None`` where there is no transfer: the ends
        of the pipeline, or the turn of a V, which stays on the stage."""
        vs, last = self.virtual_stage(p, stage, chunk), p * v - 1
        prv = self.stage_chunk(p, vs - 1)[0] if vs > 0 else None
        nxt = self.stage_chunk(p, vs + 1)[0] if vs < last else None
        return (None if prv == stage else prv), (None if nxt == stage else nxt)

    def transfer(self, p: int, v: int, stage: int, op: ScheduleOp,
                 out: bool) -> tuple[int, int] | None:
        """``(peer stage, receiver's virtual stage)`` of the pipeline transfer into (``out``
        False) or out of ``op``: forwards receive from upstream and send downstream, backwards
        the other way; ``None`` for ``W`` and where there is no transfer (the ends of the
        pipeline, the turn of a V)."""
        if op.kind == "W":
            return None
        prv, nxt = self.peers(p, v, stage, op.chunk)
        down = (op.kind == "F") == out  # toward the later stages
        peer = nxt if down else prv
        if peer is None:
            return None
        vs = self.virtual_stage(p, stage, op.chunk)
        return peer, (vs + (1 if down else -1) if out else vs)

    # bubble and report -------------------------------------------------------------------

    def ideal_bubble(self, p: int, m: int, v: int = 1) -> float:
        """Bubble time / ideal time with equal stages and free communication: ``(p−1)/M``."""
        return (p - 1) / m

    def assumption(self, p: int, m: int) -> str | None:
        """The report's assumption line about the schedule itself (``None``: none)."""
        return None

"""What the engine runs: the per-stage programs of a pipeline-parallel iteration.

Readers produce a :class:`~sim.program.workload.Workload` (the rows of one representative rank);
:mod:`sim.workload.stages` turns it into a :class:`PipelineProgram`; the model-driven generator
produces a :class:`PipelineProgram` directly. The engine times it.

Per microbatch, model chunk ``c`` of stage ``s`` runs ``stages[s].chunks[c]``: forward in list
order, backward in reverse order (input-gradient then weight-gradient phase of each layer).
Non-blocking (data-parallel) communications of per-microbatch layers are issued only in the
backward of the last microbatch (gradient accumulation defers the sync, as Megatron and DDP do).
``prologue`` runs once before the first microbatch; ``epilogue`` once after the stage's last
backward. ``grad_syncs``: gradient collectives issued (non-blocking) after a given backward op
of the stage instead of during it (Megatron's delayed gradient reduction,
:mod:`sim.models.features.grad_sync`). ``deferred``: Megatron-Core's
``defer_embedding_wgrad_compute``
on the stage that holds the output layer (:mod:`sim.models.features.defer_wgrad`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from sim.comm import CollKind, Comm, GroupKind
from sim.parallel.layout import Layout
from sim.pipeline.registry import schedule_type
from sim.pipeline.types import Schedule
from sim.program.graphs import GraphCapture
from sim.program.workload import Layer, Workload


class TaskKind(str, Enum):
    """What a prologue/epilogue task is, for the report's breakdown."""

    COMPUTE = "compute"  # counted as compute
    OPTIMIZER = "optimizer"  # optimizer step compute
    WEIGHT_GRAD = "weight_grad"  # deferred weight-gradient compute, counted as compute
    GRAD_SYNC = "grad_sync"  # gradient / parameter collectives around the optimizer

    @property
    def span(self) -> str:
        """The kind of the task's compute span in traces (other than these: ``forward``)."""
        return self.value if self.value in ("optimizer", "weight_grad") else "forward"


@dataclass(frozen=True, slots=True)
class Task:
    """One step of a prologue or epilogue: wait (optionally), compute, then communicate.

    ``wait_async``: first wait until every outstanding non-blocking communication of this rank
    has completed (the optimizer waits for the gradient reductions).
    """

    label: str
    kind: TaskKind = TaskKind.COMPUTE
    compute_ns: int = 0
    comm: Comm | None = None
    wait_async: bool = False
    param_bucket: int = -1  # a non-blocking parameter all-gather: the bucket it fills


@dataclass(frozen=True, slots=True)
class GradSync:
    """Non-blocking gradient collectives (``tasks``, issued in order) launched right after the
    stage's backward op number ``after_backward`` (0-based, counting the stage's ``B`` ops in
    schedule order) finishes its compute — Megatron's ``grad_sync_func`` of model chunk
    ``chunk``."""

    chunk: int
    after_backward: int
    tasks: tuple[Task, ...]


@dataclass(frozen=True, slots=True)
class DeferredWgrad:
    """Megatron-Core's ``defer_embedding_wgrad_compute`` (:mod:`sim.models.features.defer_wgrad`):
    the backward of the first ``microbatches`` microbatches of model chunk ``chunk`` runs
    ``layers`` (the chunk without the output layer's weight-gradient GEMM and its
    sequence-parallel input all-gather) instead of the chunk's layers, and ``drain`` (the
    deferred all-gathers and GEMMs) runs after the stage's last backward, before the
    epilogue."""

    chunk: int
    microbatches: int
    layers: tuple[Layer, ...]
    drain: tuple[Task, ...]


@dataclass
class StageProgram:
    """The work of one pipeline stage (every rank of the stage runs the same program)."""

    stage: int
    chunks: list[tuple[Layer, ...]]
    prologue: tuple[Task, ...] = ()
    epilogue: tuple[Task, ...] = ()
    grad_syncs: tuple[GradSync, ...] = ()
    deferred: DeferredWgrad | None = None

    def pass_layers(self, chunk: int, kind: str) -> tuple[Layer, ...]:
        """The layers op ``kind`` runs on ``chunk``; ``Bd``: a backward whose output-layer
        weight gradient is deferred (:attr:`deferred`)."""
        d = self.deferred
        return d.layers if kind == "Bd" and d is not None else self.chunks[chunk]

    def defers(self, chunk: int, microbatch: int) -> bool:
        """Whether the backward of ``microbatch`` on ``chunk`` defers its output-layer wgrad."""
        d = self.deferred
        return d is not None and chunk == d.chunk and microbatch < d.microbatches

    @property
    def tail(self) -> tuple[Task, ...]:
        """What runs after the stage's last backward: the deferred drain, then the epilogue."""
        return (self.deferred.drain if self.deferred else ()) + self.epilogue

    def syncs_by_backward(self) -> dict[int, tuple[Task, ...]]:
        """The tasks of :attr:`grad_syncs` by the backward op number they follow."""
        out: dict[int, tuple[Task, ...]] = {}
        for g in self.grad_syncs:
            out[g.after_backward] = out.get(g.after_backward, ()) + g.tasks
        return out


@dataclass
class PipelineProgram:
    """A whole iteration: layout, schedule and per-stage programs.

    ``pp_bytes``: bytes of one activation message between adjacent (virtual) stages per
    microbatch; the gradient sent back has the same size.
    ``dp``: ranks that hold the same model shard (DP×CP with context parallelism: gradients are
    reduced over them); ``cp``: context-parallel ranks within them (``sim.parallel.placement``).
    ``microbatch_group_size``: Megatron's ``microbatch_group_size_per_vp_stage`` (interleaved
    only; ``None`` = pipeline size). ``etp``: expert tensor-parallel size (``None``: TP).
    ``ep_a2a_overlap``: Megatron-Core's ``--overlap-moe-expert-parallel-comm`` (combined 1F1B:
    :meth:`sim.pipeline.types.Schedule.combined_ops`, :mod:`sim.engine.paired`).
    ``cuda_graphs``: the regions Megatron-Core's CUDA graphs capture (``None``: eager launches;
    only the host-dispatch model reads it: :mod:`sim.program.graphs`).
    """

    tp: int
    pp: int
    dp: int
    ep: int
    vpp: int
    microbatches: int
    pp_bytes: int
    stages: list[StageProgram]
    schedule: str
    source: str = ""
    microbatch_group_size: int | None = None
    assumptions: list[str] = field(default_factory=list)
    cp: int = 1
    etp: int | None = None
    ep_a2a_overlap: bool = False
    cuda_graphs: GraphCapture | None = None
    # the rows a workload file's program was built from (after compute scaling), for writers
    # that re-emit them (--chakra: sim.workload.chakra_write); None for generated programs
    rows: Workload | None = field(default=None, compare=False, repr=False)
    # compute time per iteration summed over stages (ns) by what timed it: "kernel_table",
    # "roofline" (generated programs; None for workload files, whose times are given)
    compute_sources: dict[str, float] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, layout: Layout, **rest) -> PipelineProgram:
        """The program of ``layout`` (``rest``: ``pp_bytes``, ``stages`` and the optional
        fields); its ``dp`` is the layout's DP×CP."""
        return cls(tp=layout.tp, pp=layout.pp, dp=layout.dp * layout.cp, ep=layout.ep,
                   vpp=layout.vpp, microbatches=layout.microbatches,
                   schedule=layout.schedule_name, cp=layout.cp, etp=layout.etp,
                   microbatch_group_size=layout.microbatch_group_size, **rest)

    @property
    def layout(self) -> Layout:
        """The program's parallel layout, with the real data- and context-parallel sizes
        (``dp`` here is DP×CP)."""
        return Layout(tp=self.tp, pp=self.pp, dp=self.dp // self.cp, ep=self.ep, vpp=self.vpp,
                      microbatches=self.microbatches, schedule=self.schedule,
                      microbatch_group_size=self.microbatch_group_size, cp=self.cp,
                      etp=self.etp)

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def schedule_type(self) -> Schedule:
        """The program's schedule as an object (:mod:`sim.pipeline.registry`)."""
        return schedule_type(self.schedule)

    def traffic(self) -> dict[GroupKind, frozenset[CollKind]]:
        """Which communication kinds the program issues in each group kind (``PP``:
        ``SENDRECV`` when stages exchange activations); tells the network what can meet."""
        out: dict[GroupKind, set[CollKind]] = {}
        for st in self.stages:
            comms = [t.comm for t in st.prologue + st.tail]
            comms += [t.comm for g in st.grad_syncs for t in g.tasks]
            for chunk in (*st.chunks, st.deferred.layers if st.deferred else ()):
                for lay in chunk:
                    for ph in (lay.forward, lay.input_grad, lay.weight_grad):
                        comms.append(ph.comm)
                        comms.extend(o.comm for o in ph.overlaps)
            for c in comms:
                if c is not None and c.size_bytes > 0:
                    out.setdefault(c.group, set()).add(c.kind)
        if self.pp > 1 and self.pp_bytes > 0:
            out.setdefault(GroupKind.PP, set()).add(CollKind.SENDRECV)
        return {g: frozenset(ks) for g, ks in out.items()}

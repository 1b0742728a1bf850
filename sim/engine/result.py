"""What a simulation produces: per-rank time accounting, per-layer totals and optional spans.

All times are integer nanoseconds. For every simulated rank the categories partition the
iteration exactly: ``compute + optimizer + Σ exposed_comm + bubble == iteration_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.comm import GroupKind
from sim.engine.critical import CriticalTotals, PathSegment
from sim.program.pipeline import PipelineProgram

GROUPS = tuple(GroupKind)


@dataclass
class LayerStats:
    """Totals over the iteration for all layers with one name on one rank (ns)."""

    forward_ns: int = 0
    input_grad_ns: int = 0
    weight_grad_ns: int = 0
    comm_ns: dict[str, int] = field(default_factory=dict)  # exposed, by group name
    count: int = 0  # forward executions


@dataclass
class RankStats:
    """Where one rank's iteration time went (ns)."""

    rank: int
    stage: int
    represents: int = 1  # ranks this simulated rank stands for (itself included)
    compute_ns: int = 0
    optimizer_ns: int = 0
    exposed_comm_ns: dict[GroupKind, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    bubble_ns: int = 0  # all idle time: pipeline bubble plus the wait after end_ns
    host_wait_ns: int = 0  # the part of bubble_ns the GPU waited for the host (sim.engine.host)
    end_ns: int = 0  # when this rank's last work finished
    pipeline_start_ns: int = 0  # when the schedule's first op began (after the prologue)
    pipeline_end_ns: int = 0  # when the schedule's last op finished (before the epilogue)
    pipeline_wait_ns: int = 0  # waits for another stage between those two times
    layers: dict[str, LayerStats] = field(default_factory=dict)

    @property
    def busy_ns(self) -> int:
        return self.compute_ns + self.optimizer_ns + sum(self.exposed_comm_ns.values())

    @property
    def pipeline_busy_ns(self) -> int:
        """Time between the schedule's first and last op not spent waiting for another stage."""
        return self.pipeline_end_ns - self.pipeline_start_ns - self.pipeline_wait_ns


@dataclass(frozen=True, slots=True)
class Span:
    """One interval on one stream of one rank (for traces and timeline plots).

    ``stream``: ``compute`` or a communication stream name (``TP``, ``PP``, ``DP``, …).
    ``kind``: forward, input_grad, weight_grad, optimizer, comm, recv_wait, bubble.
    """

    rank: int
    stream: str
    start_ns: int
    end_ns: int
    kind: str
    label: str
    microbatch: int = -1
    chunk: int = -1
    args: tuple[tuple[str, object], ...] = ()


@dataclass
class SimResult:
    """The outcome of :func:`sim.engine.simulate`."""

    program: PipelineProgram
    iteration_ns: int
    ranks: list[RankStats]
    spans: list[Span]
    events: int
    per_rank: bool
    network_notes: list[str] = field(default_factory=list)
    mode: str = ""  # how the ranks were simulated (sim.parallel.rank_classes.RankClasses.describe)
    critical_path: list[PathSegment] = field(default_factory=list)
    # compute time (ns, summed over simulated ranks) that ran beside an asynchronous collective
    # (sim.engine.interference; 0 when simulated without interference)
    beside_compute_ns: int = 0
    # CTA counts the asynchronous collectives' kernels took, by group (interference)
    nccl_ctas: dict[GroupKind, tuple[int, ...]] = field(default_factory=dict)
    # the critical path's totals where the path itself is not kept (a periodic run,
    # sim.scenario.periodic_run); None: computed from critical_path
    critical_totals: CriticalTotals | None = None
    # (microbatches, events) of the short runs this result was extrapolated from (empty:
    # simulated in full; sim.scenario.periodic_run)
    periodic_runs: tuple[tuple[int, int], ...] = ()
    # > 0: the short runs stepped evenly only within this tolerance (a fraction of one
    # period's iteration time; sim.engine.periodic.slack_ns), not exactly
    periodic_tolerance: float = 0.0

    def stage_stats(self) -> list[RankStats]:
        """One entry per pipeline stage: the simulated rank of that stage that finished last."""
        best: dict[int, RankStats] = {}
        for r in self.ranks:
            cur = best.get(r.stage)
            if cur is None or (r.end_ns, -r.rank) > (cur.end_ns, -cur.rank):
                best[r.stage] = r
        return [best[s] for s in sorted(best)]


def add_layer_totals(layers: dict[str, LayerStats], totals: dict, n: int) -> None:
    """Add ``n`` executions of a compiled pass's per-layer totals to ``layers``. ``totals``:
    layer name → (forward, input-grad, weight-grad ns, comm ns by group name, forward count)
    (:attr:`sim.engine.segments.Compiled.layer_totals`)."""
    for name, (f, ig, wg, comm, cnt) in totals.items():
        ls = layers.setdefault(name, LayerStats())
        ls.forward_ns += n * f
        ls.input_grad_ns += n * ig
        ls.weight_grad_ns += n * wg
        ls.count += n * cnt
        for g, ns in comm.items():
            ls.comm_ns[g] = ls.comm_ns.get(g, 0) + n * ns

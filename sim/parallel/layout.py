"""The parallel layout of one training run: one type for every part of simrun.

A :class:`Layout` is what Megatron-LM calls the parallel configuration: tensor- (``tp``),
pipeline- (``pp``), data- (``dp``) and expert-parallel (``ep``, splits DP) sizes, the virtual
pipeline size (``vpp``: model chunks per stage), the microbatches per iteration and the pipeline
schedule. Workload programs (:mod:`sim.workload.stages`), generated programs
(:mod:`sim.models`), the placement of ranks on GPUs (:mod:`sim.parallel.placement`), sweeps and
validation cases all use it. :class:`LayoutRequest` is what a user asks for before the workload
file or the cluster size fill the gaps (``None`` = not given).

The check that a layout fits the cluster ("the layout needs N GPUs") lives here, once:
:func:`require_gpus`.

Context parallelism (``cp``: each sequence split over ``cp`` ranks, Megatron-Core ring
attention) and the ZeRO stage (``zero``: DeepSpeed ZeRO 0-3) are fields of both;
``world_size`` is the one place that multiplies the dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import UsageError
from sim.pipeline.registry import default_schedule, schedule_type
from sim.pipeline.types import Schedule


@dataclass(frozen=True)
class Layout:
    """A resolved parallel layout (every size a positive integer).

    ``schedule``: ``gpipe``, ``1f1b``, ``interleaved`` or ``None`` (interleaved when
    ``vpp > 1``, else 1F1B: :attr:`schedule_name`). ``microbatch_group_size``: Megatron's
    ``microbatch_group_size_per_vp_stage`` (interleaved only; ``None`` = ``pp``); ``zb-h1``
    is Qi et al.'s zero-bubble schedule. ``cp``: context-parallel size; ``zero``: DeepSpeed
    ZeRO stage (0: none). ``etp``: Megatron-Core's ``--expert-tensor-parallel-size`` (``None``:
    the same as ``tp``; the expert groups are formed as :mod:`sim.parallel.placement` says).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    vpp: int = 1
    microbatches: int = 1
    schedule: str | None = None
    microbatch_group_size: int | None = None
    cp: int = 1
    zero: int = 0
    etp: int | None = None

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size (``etp``; ``None`` = TP, Megatron-Core's default)."""
        return self.tp if self.etp is None else self.etp

    @property
    def world_size(self) -> int:
        """GPUs the layout occupies: ``tp · pp · dp · cp`` (EP splits DP×CP)."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def schedule_name(self) -> str:
        """The schedule in effect (the default when ``schedule`` is ``None``)."""
        if self.schedule is not None:
            return self.schedule
        return default_schedule(self.vpp).name

    @property
    def schedule_type(self) -> Schedule:
        """The schedule in effect as an object (:mod:`sim.pipeline.registry`): what code asks
        about the schedule (its properties), instead of comparing :attr:`schedule_name`."""
        return schedule_type(self.schedule_name)

    def describe(self) -> str:
        """``TP 8 x PP 8 x DP 32``: the sizes that make up :attr:`world_size`."""
        cp = f" x CP {self.cp}" if self.cp != 1 else ""
        return f"TP {self.tp} x PP {self.pp} x DP {self.dp}{cp}"

    def require_gpus_of(self, topology, *, field: str = "--gpus",
                        hint: str = "use --nodes or --gpus") -> None:
        """Raise :class:`UsageError` if the layout needs more GPUs than ``topology`` has."""
        require_gpus(self.world_size, topology.num_gpus, self.describe(),
                     f"{topology.path}", field=field, hint=hint,
                     size=cluster_size(topology))


@dataclass(frozen=True)
class LayoutRequest:
    """A layout as asked for on the command line (``None``: from the workload file, derived
    from the cluster size or the global batch, or the default). ``gpus``: all GPUs of the run
    (``dp = gpus / (tp · pp · cp)``)."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    vpp: int | None = None
    microbatches: int | None = None
    gpus: int | None = None
    schedule: str | None = None
    microbatch_group_size: int | None = None
    cp: int | None = None
    zero: int | None = None
    etp: int | None = None


def require_gpus(needed: int, available: int, detail: str, where: str, *,
                 field: str = "--gpus", hint: str = "use --nodes or --gpus",
                 size: str = "") -> None:
    """The one GPU-count check: raise :class:`UsageError` ("the layout needs N GPUs (detail)
    but WHERE has M (size); hint") if ``needed > available``."""
    if needed > available:
        made_of = f" ({size})" if size else ""
        raise UsageError(f"the layout needs {needed} GPUs ({detail}) but {where} has "
                         f"{available}{made_of}; {hint}", field=field)


def cluster_size(topology) -> str:
    """``128 nodes x 8``: how a topology's GPU count is made up (``2 nodes x 64 of 72 GPUs
    (--nproc-per-node 64)`` when processes run on only some of each node's GPUs)."""
    idle = topology.idle_gpus_per_node
    k = topology.gpus_per_node
    used = f" of {k + idle} GPUs (--nproc-per-node {k})" if idle else ""
    return f"{topology.num_nodes} nodes x {k}{used}"

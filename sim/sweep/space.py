"""The layouts a sweep considers: every valid (TP, PP, DP, VPP, micro batch, EP, expert TP,
CP, ZeRO stage, schedule) on N GPUs.

A combination is *valid* when ``TP·PP·DP·CP = N`` and Megatron can run it
(:func:`sim.models.parallel_checks.validate`: TP divides heads, KV heads and FFN; PP·VPP divides the
layers; micro batch · DP divides the global batch; the interleaved and zero-bubble schedules'
constraints; EP divides DP and the experts, or with an expert TP size ETP ≠ TP, ETP·EP divides
TP·DP·CP; CP and ZeRO as for a single run). Invalid
combinations are not simulated; they are returned with the reason so the CLI can say how many
were skipped and why. Memory feasibility is decided
later, per layout (:mod:`sim.sweep.evaluate`), and recorded as a result.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from sim.errors import UsageError
from sim.models.parallel_checks import validate
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig, Training
from sim.parallel.layout import Layout
from sim.pipeline.schedules import default_vpp


@dataclass(frozen=True, order=True)
class SweepPoint:
    """One point of a sweep's space: the parallel sizes and the micro batch (the microbatches
    per iteration follow from the shared global batch: :meth:`config`)."""

    tp: int
    pp: int
    dp: int
    vpp: int = 1
    micro_batch: int = 1
    ep: int = 1
    cp: int = 1
    zero: int = 0
    schedule: str = ""  # "" = the default for vpp (interleaved if vpp > 1, else 1f1b)
    etp: int = 0  # expert tensor-parallel size; 0 = TP (Megatron-Core's default)
    group_size: int = 0  # --microbatch-group-size; 0 = PP (Megatron's default)
    # swept training options: (flag key, value) pairs (sim.sweep.variants); () = none swept
    variant: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """Canonical string naming the point (the resume key), e.g. ``tp8-pp8-dp16-vpp3-mb1``
        (``-ep``, ``-cp``, ``-zero``, the schedule, ``-etp`` and ``-mgs`` (the interleaved
        schedule's microbatch group size) appended when not the default, then each swept
        training option as ``-<option>-<value>``)."""
        return (f"tp{self.tp}-pp{self.pp}-dp{self.dp}-vpp{self.vpp}-mb{self.micro_batch}"
                + (f"-ep{self.ep}" if self.ep > 1 else "")
                + (f"-cp{self.cp}" if self.cp > 1 else "")
                + (f"-zero{self.zero}" if self.zero else "")
                + (f"-{self.schedule}" if self.schedule else "")
                + (f"-etp{self.etp}" if self.etp else "")
                + (f"-mgs{self.group_size}" if self.group_size else "")
                + "".join(f"-{k}-{v}" for k, v in self.variant))

    def config(self, training: Training) -> ParallelConfig:
        """The :class:`ParallelConfig` of this point trained with ``training`` (its micro batch
        replaced by the point's; interleaved schedule when ``vpp > 1``, else 1F1B)."""
        return ParallelConfig.derive(
            Layout(tp=self.tp, pp=self.pp, dp=self.dp, vpp=self.vpp, ep=self.ep, cp=self.cp,
                   zero=self.zero, schedule=self.schedule or None, etp=self.etp or None,
                   microbatch_group_size=self.group_size or None),
            replace(training, micro_batch=self.micro_batch,
                    distributed_optimizer=training.distributed_optimizer and not self.zero))


@dataclass(frozen=True)
class Space:
    """Candidate values per dimension; ``None`` means the default set (see :func:`candidates`);
    ``vpp`` empty: each schedule's default (2 for zb-v and dualpipe, else 1). ``gpus``: GPUs
    every layout uses (``None`` until the sweep resolves it: all of the topology)."""

    gpus: int | None = None
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] = ()
    micro_batch: tuple[int, ...] = (1,)
    ep: tuple[int, ...] = (1,)
    cp: tuple[int, ...] = (1,)
    zero: tuple[int, ...] = (0,)
    schedule: tuple[str, ...] = ("",)
    etp: tuple[int, ...] = (0,)  # 0: the layout's TP
    group_size: int = 0  # --microbatch-group-size of every layout (0: Megatron's default, PP)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(model: ModelSpec, space: Space, gpus_per_node: int) -> tuple[list[int], list[int]]:
    """TP and PP candidates: the given lists, or by default TP = powers of two up to one node's
    GPUs and PP = the divisors of the layer count (both dividing the GPU count)."""
    tps = list(space.tp) if space.tp else [
        t for t in (1, 2, 4, 8, 16, 32, 64) if t <= gpus_per_node and space.gpus % t == 0]
    pps = list(space.pp) if space.pp else [
        p for p in divisors(model.layers) if space.gpus % p == 0]
    return sorted(set(tps)), sorted(set(pps))


def _points(space: Space):
    """(vpp, micro batch, ep, zero, schedule) combinations, vpp outermost; an empty vpp list
    gives each schedule its default (:func:`~sim.pipeline.schedules.default_vpp`)."""
    scheds = sorted(set(space.schedule))
    vpps = sorted(set(space.vpp) or {default_vpp(s or None) for s in scheds})
    for vpp, mb, ep, zero, sched in itertools.product(
            vpps, sorted(set(space.micro_batch)), sorted(set(space.ep)),
            sorted(set(space.zero)), scheds):
        if space.vpp or vpp == default_vpp(sched or None):
            yield vpp, mb, ep, zero, sched


def enumerate_layouts(model: ModelSpec, space: Space, training: Training, gpus_per_node: int,
                      check: Callable[[ParallelConfig], None] | None = None,
                      ) -> tuple[list[SweepPoint], list[tuple[str, str]]]:
    """Valid layouts (sorted by key) and the skipped combinations as ``(description, reason)``
    (the reason names the flag). ``check``: more refusals per layout, after Megatron's
    (:func:`~sim.models.parallel_checks.validate`): a :class:`UsageError` skips the layout (the
    sweep's flags that change nothing in it: :func:`sim.options.applicable.check_layout`)."""
    if space.gpus is None:
        raise ValueError("the sweep space's GPU count is not resolved")
    tps, pps = candidates(model, space, gpus_per_node)
    ok: list[SweepPoint] = []
    skipped: list[tuple[str, str]] = []
    for tp, pp, cp in itertools.product(tps, pps, sorted(set(space.cp))):
        if space.gpus % (tp * pp * cp):
            what = f"tp{tp}-pp{pp}" + (f"-cp{cp}" if cp > 1 else "")
            skipped.append((what, f"TP·PP{'·CP' if cp > 1 else ''} = {tp * pp * cp} does not "
                                  f"divide {space.gpus} GPUs"))
            continue
        dp = space.gpus // (tp * pp * cp)
        # an expert TP size equal to TP is the default (0): one layout, not two
        etps = sorted({0 if e == tp else e for e in space.etp})
        for (vpp, mb, ep, zero, sched), etp in itertools.product(_points(space), etps):
            lay = SweepPoint(tp, pp, dp, vpp, mb, ep, cp, zero, sched, etp, space.group_size)
            try:
                par = lay.config(training)
                validate(model, par)
                if check is not None:
                    check(par)
            except UsageError as exc:
                skipped.append((lay.key, f"{exc.field}: {exc.message}" if exc.field
                                else exc.message))
                continue
            ok.append(lay)
    ok.sort(key=lambda x: x.key)
    return ok, skipped

"""Advice for a layout that does not fit in GPU memory: the changes that would make it fit.

Each candidate is one change of one option (Megatron-LM's names) on the same GPUs and global
batch; it is kept only if the layout stays valid (:func:`sim.models.parallel.validate`), the
option changes something (no flag already given, no sequence parallelism at TP 1, no
distributed optimizer at DP 1), and the memory model, run again on the changed layout
(:func:`sim.models.memory.check_memory`), says it fits. Each is listed with the memory it saves
at the peak stage. When no single change fits, the options that save memory without changing the
layout are tried together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from sim.errors import UsageError
from sim.models.memory import check_memory
from sim.models.parallel import ParallelConfig, validate
from sim.models.spec import ModelSpec
from sim.topology.gpu import GpuSpec

GB = 1e9


def _candidates(par: ParallelConfig) -> Iterator[tuple[str, ParallelConfig]]:
    """(flag text, changed layout) for every single change worth trying."""
    r = dataclasses.replace
    if not par.flash_attention:
        yield "--flash-attention", r(par, flash_attention=True)
    for level in ("selective", "full"):
        if par.recompute != level and not (par.recompute == "full" and level == "selective"):
            yield f"--recompute {level}", r(par, recompute=level)
    if not par.sequence_parallel and par.tp > 1:
        yield "--sequence-parallel", r(par, sequence_parallel=True)
    if not par.distributed_optimizer and par.dp > 1:
        yield "--distributed-optimizer", r(par, distributed_optimizer=True)
    if par.micro_batch > 1 and par.micro_batch % 2 == 0:
        yield f"--micro-batch {par.micro_batch // 2}", r(par, micro_batch=par.micro_batch // 2)
    for name in ("tp", "pp"):  # the same GPUs: twice the model parallelism, half the DP
        if par.dp % 2 == 0:
            bigger = r(par, **{name: getattr(par, name) * 2}, dp=par.dp // 2)
            yield f"--{name} {getattr(bigger, name)} (DP {bigger.dp})", bigger


def _flag_only(par: ParallelConfig) -> ParallelConfig:
    """Every option that saves memory without changing the layout, at once."""
    return dataclasses.replace(
        par, flash_attention=True, recompute="full", sequence_parallel=par.tp > 1 or
        par.sequence_parallel, distributed_optimizer=par.dp > 1 or par.distributed_optimizer)


def _peak(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec) -> tuple[int, bool] | None:
    try:
        validate(model, par)
    except UsageError:
        return None
    mem = check_memory(model, par, gpu)
    return mem.peak.total_bytes, mem.feasible


def memory_advice(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec, peak_bytes: int) -> str:
    """One phrase: the changes that make ``par`` fit, each with the memory it saves."""
    fits = []
    for flag, changed in _candidates(par):
        got = _peak(model, changed, gpu)
        if got is not None and got[1] and got[0] < peak_bytes:
            fits.append((peak_bytes - got[0], flag, got[0]))
    if fits:
        fits.sort(key=lambda x: (-x[0], x[1]))
        return "it fits with any one of: " + ", ".join(
            f"{flag} (saves {saved / GB:.1f} GB → {after / GB:.1f} GB)"
            for saved, flag, after in fits)
    together = _flag_only(par)
    got = _peak(model, together, gpu)
    flags = [f for f, c in _candidates(par) if not (c.tp != par.tp or c.pp != par.pp
                                                    or c.micro_batch != par.micro_batch)
             and f != "--recompute selective"]
    if got is not None and got[0] < peak_bytes and flags:
        verdict = "fits" if got[1] else "still does not fit"
        return (f"no single change fits; together, {' '.join(flags)} save "
                f"{(peak_bytes - got[0]) / GB:.1f} GB → {got[0] / GB:.1f} GB ({verdict}); more "
                "GPUs or a larger model-parallel layout are needed" if not got[1] else
                f"no single change fits; it fits with {' '.join(flags)} together (saves "
                f"{(peak_bytes - got[0]) / GB:.1f} GB → {got[0] / GB:.1f} GB)")
    return "no change of the memory options makes it fit; use more GPUs (--nodes) or a larger " \
           "model-parallel layout"

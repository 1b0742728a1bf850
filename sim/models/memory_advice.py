"""Advice for a layout that does not fit in GPU memory: the changes that would make it fit.

Each candidate is one change of one option (Megatron-LM's names) on the same GPUs and global
batch. It is kept only if the option changes something (no flag already given, no sequence
parallelism at TP 1, no distributed optimizer at DP 1 or under ZeRO), the changed layout is
valid (:func:`sim.models.parallel_checks.validate`) and the memory model, run again on it
(:func:`sim.models.memory.check_memory`), says it fits. Each is listed with the memory it saves
at the busiest stage and the total after it. Pairs of changes are tried too, and listed where
neither change fits alone (fused attention often removes most of the activations but not
enough by itself). When nothing fits, the error says so and how close every memory option
together comes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import combinations

from sim.errors import UsageError
from sim.models.memory import check_memory
from sim.models.parallel_checks import validate
from sim.models.vocab.spec import ModelSpec
from sim.parallel.config import ParallelConfig
from sim.topology.gpu import GpuSpec

GB = 1e9
MAX_LISTED = 6  # changes named in the one-line error, largest saving first


def _with(par: ParallelConfig, *, layout: dict | None = None,
          training: dict | None = None) -> ParallelConfig | None:
    """``par`` with some layout and training fields replaced (the microbatches follow the
    global batch); ``None`` if that is not a whole number of microbatches."""
    lay = dataclasses.replace(par.layout, **(layout or {}))
    tr = dataclasses.replace(par.training, **(training or {}))
    per = tr.micro_batch * lay.dp
    if tr.global_batch is None or tr.global_batch % per:
        return None
    return ParallelConfig.of(dataclasses.replace(lay, microbatches=tr.global_batch // per), tr)


def _fused_flag(par: ParallelConfig) -> str:
    return "--flash-attention" if not par.attention_backend else "--attention-backend fused"


def _candidates(par: ParallelConfig) -> Iterator[tuple[str, dict, dict]]:
    """(flag text, layout changes, training changes) for every single change worth trying."""
    if not par.fused_attention:
        backend = {"flash_attention": True} if not par.attention_backend else {
            "attention_backend": "fused"}
        yield _fused_flag(par), {}, backend
    for level in ("selective", "full"):
        if par.recompute != level and par.recompute != "full":
            yield f"--recompute {level}", {}, {"recompute": level}
    if not par.sequence_parallel and par.tp > 1:
        yield "--sequence-parallel", {}, {"sequence_parallel": True}
    if not par.shards_optimizer and par.dp > 1:
        yield "--distributed-optimizer", {}, {"distributed_optimizer": True}
    if par.micro_batch > 1 and par.micro_batch % 2 == 0:
        yield f"--micro-batch {par.micro_batch // 2}", {}, {"micro_batch": par.micro_batch // 2}
    for name in ("tp", "pp"):  # the same GPUs: twice the model parallelism, half the DP
        if par.dp % 2 == 0:
            value = getattr(par, name) * 2
            yield f"--{name} {value} (DP {par.dp // 2})", {name: value, "dp": par.dp // 2}, {}


def _peak(model: ModelSpec, par: ParallelConfig | None, gpu: GpuSpec
          ) -> tuple[int, bool] | None:
    """(peak bytes per GPU, fits) of ``par``, or ``None`` if it is not a valid layout."""
    if par is None:
        return None
    try:
        validate(model, par)
        mem = check_memory(model, par, gpu)
    except UsageError:
        return None
    return mem.peak.total_bytes, mem.feasible


def _combined(par: ParallelConfig, picks: tuple[tuple[str, dict, dict], ...]
              ) -> tuple[str, ParallelConfig | None]:
    layout: dict = {}
    training: dict = {}
    for _, lay, tr in picks:
        if set(lay) & set(layout) - {"dp"} or set(tr) & set(training):
            return "", None  # two values of one option
        if "dp" in lay and "dp" in layout:
            return "", None
        layout.update(lay)
        training.update(tr)
    return " with ".join(f for f, _, _ in picks), _with(par, layout=layout, training=training)


def fitting_changes(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec, peak_bytes: int
                    ) -> list[tuple[str, int, int]]:
    """``(flags, bytes saved, bytes after)`` of every single change that makes ``par`` fit,
    then of every pair of changes that fits where neither change fits alone."""
    cands = list(_candidates(par))
    found: list[tuple[int, int, str, int]] = []  # (changes, -saved, flags, after)

    def attempt(picks: tuple[tuple[str, dict, dict], ...]) -> bool:
        flags, changed = _combined(par, picks)
        got = _peak(model, changed, gpu)
        if got is None or not got[1] or got[0] >= peak_bytes:
            return False
        found.append((len(picks), got[0] - peak_bytes, flags, got[0]))
        return True

    alone = {c[0] for c in cands if attempt((c,))}
    for pair in combinations(cands, 2):
        if not {pair[0][0], pair[1][0]} & alone:
            attempt(pair)
    found.sort()
    return [(flags, -neg_saved, after) for _, neg_saved, flags, after in found]


def memory_advice(model: ModelSpec, par: ParallelConfig, gpu: GpuSpec, peak_bytes: int) -> str:
    """One phrase: the changes that make ``par`` fit, each with the memory it saves."""
    fits = fitting_changes(model, par, gpu, peak_bytes)
    if fits:
        listed = ", ".join(f"{flags} (saves {saved / GB:.1f} GB → {after / GB:.1f} GB)"
                           for flags, saved, after in fits[:MAX_LISTED])
        more = f" and {len(fits) - MAX_LISTED} more" if len(fits) > MAX_LISTED else ""
        return f"it fits with any one of these changes: {listed}{more}"
    flags, together = _all_options(par)
    got = _peak(model, together, gpu)
    if flags and got is not None and got[0] < peak_bytes:
        return (f"no change of one or two options fits; {', '.join(flags)} together save "
                f"{(peak_bytes - got[0]) / GB:.1f} GB → {got[0] / GB:.1f} GB"
                + ("" if got[1] else ", still too much") + "; more GPUs (--nodes) or more "
                "model parallelism are needed")
    return ("no change of the memory options makes it fit; use more GPUs (--nodes) or more "
            "model parallelism")


def _all_options(par: ParallelConfig) -> tuple[list[str], ParallelConfig | None]:
    """Every option that saves memory without changing the layout or the micro batch, at
    once (their flags and the changed config)."""
    picks = tuple(c for c in _candidates(par) if not c[1] and "micro_batch" not in c[2]
                  and c[0] != "--recompute selective")
    if not picks:
        return [], None
    return [f for f, _, _ in picks], _combined(par, picks)[1]

"""Tests' builder of a :class:`~sim.parallel.config.ParallelConfig` from flat keyword arguments.

``make_par(tp=8, pp=8, global_batch=64, sequence_parallel=True)`` splits the keywords over the
fields of :class:`~sim.parallel.layout.Layout` and :class:`~sim.parallel.config.Training` (taken
from the dataclasses, so a new field needs no change here) and derives the layout's
microbatches from the global batch (:meth:`ParallelConfig.derive`). The global batch defaults
to 1 sequence (tests that leave it out time one microbatch). The library itself has no flat
constructor: it builds configs from the two parts.
"""

from __future__ import annotations

from dataclasses import fields

from sim.parallel.config import ParallelConfig, Training
from sim.parallel.layout import Layout

_LAYOUT = frozenset(f.name for f in fields(Layout)) - {"microbatches"}
_TRAINING = frozenset(f.name for f in fields(Training))


def make_par(**kw) -> ParallelConfig:
    """The config of the flat keywords ``kw`` (each a field of Layout or Training; the
    microbatches are derived, not given)."""
    unknown = set(kw) - _LAYOUT - _TRAINING
    if unknown:
        raise TypeError(f"make_par: not a Layout or Training field: {sorted(unknown)}")
    kw.setdefault("global_batch", 1)
    return ParallelConfig.derive(Layout(**{k: v for k, v in kw.items() if k in _LAYOUT}),
                                 Training(**{k: v for k, v in kw.items() if k in _TRAINING}))

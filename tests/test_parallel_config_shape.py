"""ParallelConfig is (layout, training): no flat constructor, fields read through generically."""

import inspect
from dataclasses import fields

import pytest
from par_support import make_par

from sim.errors import UsageError
from sim.parallel.config import ParallelConfig, Training
from sim.parallel.layout import Layout


def test_constructor_takes_at_most_five_parameters():
    params = [p for p in inspect.signature(ParallelConfig.__init__).parameters if p != "self"]
    assert params == ["layout", "training"]
    assert len(params) <= 5


def test_derive_sets_microbatches_from_the_global_batch():
    # M = global_batch / (micro_batch · dp) = 64 / (2 · 4) = 8
    par = ParallelConfig.derive(Layout(tp=2, dp=4), Training(global_batch=64, micro_batch=2))
    assert par.layout.microbatches == 8 and par.microbatches == 8
    assert ParallelConfig.of(par.layout, par.training) == par
    with pytest.raises(UsageError):
        ParallelConfig.of(Layout(tp=2, dp=4, microbatches=3),
                          Training(global_batch=64, micro_batch=2))


def test_every_field_of_both_parts_reads_through():
    par = make_par(tp=4, pp=2, dp=2, global_batch=8, dtype="fp16", moe_load_imbalance=1.5)
    for f in fields(Layout):
        assert getattr(par, f.name) == getattr(par.layout, f.name) or f.name == "etp"
    for f in fields(Training):
        assert getattr(par, f.name) == getattr(par.training, f.name)
    assert (par.tp, par.dtype, par.moe_load_imbalance, par.etp) == (4, "fp16", 1.5, 4)
    with pytest.raises(AttributeError):
        _ = par.no_such_option


def test_make_par_refuses_unknown_keywords():
    with pytest.raises(TypeError, match="tpp"):
        make_par(tpp=2)

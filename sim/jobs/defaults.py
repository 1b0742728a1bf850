"""Megatron-LM's defaults (sim/data/megatron_defaults.json, made by
scripts/megatron_defaults.py from NVIDIA/Megatron-LM d98e8a64dd): an argument a training log
prints at its default, or a Megatron-Bridge key at Megatron-Core's default, is what simrun
models (Megatron-LM's default behaviour) and is accepted without its own declaration.

:data:`BOOKKEEPING`: values Megatron-LM's ``validate_args`` computes and a log's ``arguments``
block prints (the JSON's ``derived`` list holds every name it assigns without declaring it);
only these are irrelevant whatever their value: counters, ranks and sizes simrun derives itself.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

#: derived values irrelevant to one iteration's time, with the reason
BOOKKEEPING = {
    **dict.fromkeys(("world_size", "rank", "data_parallel_size",
                     "transformer_pipeline_model_parallel_size"),
                    "a size or rank Megatron-LM derives from the others (simrun derives DP from "
                    "--nodes / --gpus)"),
    **dict.fromkeys(("consumed_train_samples", "consumed_valid_samples", "consumed_train_bins",
                     "skipped_train_samples"), "a counter of the run so far"),
    **dict.fromkeys(("params_dtype",), "the weights' dtype Megatron-LM derives from --bf16 / "
                                       "--fp16"),
    **dict.fromkeys(("eval_global_batch_size", "eval_micro_batch_size"), "evaluation batches"),
    **dict.fromkeys(("_is_global_batch_size_explicitly_specified",), "bookkeeping"),
}
#: the default tables consulted for a log's argument, in order
LOG_TABLES = ("arguments", "model", "ddp", "optimizer", "training")


@cache
def megatron_defaults() -> dict[str, Any]:
    """The JSON file's tables: ``arguments``, ``model``, ``ddp``, ``optimizer``, ``training``
    (name → default) and ``derived`` (names)."""
    text = resources.files("sim.data").joinpath("megatron_defaults.json").read_text()
    return json.loads(text)


def default_of(name: str, tables: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, default) of ``name`` in the first of ``tables`` that has it."""
    data = megatron_defaults()
    for table in tables:
        if name in data[table]:
            return True, data[table][name]
    return False, None


def printed_at_default(dest: str, text: str) -> bool:
    """Whether a log's printed ``text`` of argument ``dest`` is Megatron-LM's default (as
    Python's ``str`` prints it)."""
    found, default = default_of(dest, LOG_TABLES)
    return found and str(default) == text

"""Megatron-Bridge / NeMo 2 ``ConfigContainer`` dumps (``run_config.yaml``) → Megatron-LM
arguments → simrun's options, by the rules of :mod:`sim.jobs.bridge_table`.

The dump lists every field of every config (~600 keys); each is applied (through the Megatron
reader, :func:`sim.jobs.megatron_args.translate`, whose errors are reported under the YAML key
and its line), accepted at Megatron's default, stated irrelevant, or refused. Bounded by the
YAML loader's limits (:mod:`sim.files.yaml_load`).
"""

from __future__ import annotations

from typing import Any

from sim.errors import InputError
from sim.files.yaml_load import load_yaml_with_lines
from sim.jobs.bridge_table import BY_KEY, PREFIXES, SECTIONS
from sim.jobs.defaults import default_of, megatron_defaults
from sim.jobs.megatron_args import MegatronJob, translate
from sim.jobs.megatron_table import ARGS
from sim.jobs.nemo_table import NemoKey
from sim.jobs.shell import Word

#: the sections whose keys are compared with each Megatron defaults table, in order
_DEFAULTS = {"model": ("model", "arguments"), "ddp": ("ddp",), "optimizer": ("optimizer",),
             "train": ("training", "arguments"), "mixed_precision": ("model",),
             "dist": ("training", "arguments")}
_ACTIVATIONS = {"torch.nn.functional.silu": "silu", "torch.nn.functional.gelu": "gelu"}


def is_bridge_config(data: Any) -> bool:
    """Whether YAML ``data`` is a ConfigContainer dump (its ``model``, ``train`` and
    ``optimizer`` sections)."""
    return isinstance(data, dict) and all(isinstance(data.get(s), dict) for s in (
        "model", "train", "optimizer"))


def at_default(section: str, name: str, value: Any) -> bool:
    """Whether ``value`` is Megatron's default for ``name`` in the tables of ``section``."""
    found, d = default_of(name, _DEFAULTS.get(section, ()))
    return found and d == value and type(d) is type(value)


def read_bridge(text: str, file: str) -> MegatronJob:
    """The translation of the ConfigContainer dump ``text``."""
    data, lines = load_yaml_with_lines(text, file)
    flat: dict[str, Any] = {}
    for section, body in data.items():
        if isinstance(body, dict) and body:
            for k, v in body.items():
                flat[f"{section}.{k}"] = v.get("_target_", v) if isinstance(v, dict) else v
        else:
            flat[str(section)] = body
    get_line = {k: lines.get(tuple(k.split(".", 1))) for k in flat}
    return _Reader(flat, get_line, file).translate()


class _Reader:
    def __init__(self, flat: dict[str, Any], lines: dict[str, int | None], file: str):
        self.flat, self.lines, self.file = flat, lines, file

    def error(self, key: str, why: str) -> InputError:
        return InputError(why, file=self.file, line=self.lines.get(key), field=key)

    def translate(self) -> MegatronJob:
        words: list[Word] = []
        back: dict[str, str] = {}
        own: dict[str, list[str]] = {"applied": [], "irrelevant": [], "stated": []}
        for key, value in self.flat.items():
            got = self._one(key, value)
            if isinstance(got, str):
                own[got].append(key)
                continue
            if not got:
                own["irrelevant"].append(key)
            for flag, values in got:
                back[flag] = key
                line = self.lines.get(key) or 0
                words += [Word(flag, line), *(Word(v, line) for v in values)]
        try:
            mjob = translate(words, self.file, str(self.flat.get("model.hf_model_id") or
                                                   "bridge").split("/")[-1])
        except InputError as e:
            key = back.get(e.field or "") or next(
                (k for k, n in self.lines.items() if e.line and n == e.line), e.field)
            raise InputError(f"{e.message} (as Megatron-LM's {e.field})", file=self.file,
                             line=self.lines.get(key or "", e.line), field=key) from None
        job = MegatronJob(self.file, argv=mjob.argv, model=mjob.model, stated=own["stated"])
        job.applied = list(dict.fromkeys(own["applied"] + [back.get(f, f)
                                                           for f in mjob.applied]))
        job.irrelevant = list(dict.fromkeys(own["irrelevant"] + [back.get(f, f)
                                                                 for f in mjob.irrelevant]))
        return job

    def _one(self, key: str, value: Any) -> str | list[tuple[str, list[str]]]:
        section, _, name = key.partition(".")
        if name == "_target_" or key == "_target_":
            return "irrelevant"
        decl = BY_KEY.get(key)
        if decl is not None:
            return self._declared(key, decl, value)
        if at_default(section, name, value):
            return "irrelevant"
        flag = "--" + name.replace("_", "-")
        if flag in ARGS:
            return self._megatron(key, flag, value)
        if section in SECTIONS or any(key.startswith(p) for p in PREFIXES):
            return "irrelevant"
        if value is None and not any(name in megatron_defaults()[t]
                                     for t in _DEFAULTS.get(section, ())):
            return "irrelevant"  # an optional setting left unset: its feature is off
        raise self.error(key, f"not modelled: {value!r} is not Megatron's default and simrun "
                              "does not know this Megatron-Bridge key (docs/job-formats.md "
                              "lists those it knows); leave it at its default")

    def _megatron(self, key: str, flag: str, value: Any) -> list[tuple[str, list[str]]]:
        if value is None or value is False:
            return []
        if value is True:
            if ARGS[flag].nargs != 0:
                raise self.error(key, f"expected a value for {flag}, got true")
            return [(flag, [])]
        if isinstance(value, dict):
            raise self.error(key, "expected a value, got a mapping")
        if isinstance(value, list):
            return [(flag, [str(v) for v in value])] if value else []
        if ARGS[flag].nargs == 0:
            raise self.error(key, f"expected true or false, got {value!r}")
        return [(flag, [str(value)])]

    def _declared(self, key: str, decl: NemoKey, value: Any
                  ) -> str | list[tuple[str, list[str]]]:
        if decl.verdict in ("irrelevant", "stated"):
            return decl.verdict
        if decl.verdict == "allowed" and key not in _SPECIAL:
            self.check_allowed(key, decl, value)
            return "irrelevant"
        special = _SPECIAL.get(key)
        if special is not None:
            return special(self, key, value)
        words = decl.how(value)
        return [] if words is None else [(decl.megatron, words)]

    def check_allowed(self, key: str, decl: NemoKey, v: Any) -> None:
        if key == "model.seq_length":
            data = self.flat.get("dataset.seq_length", v)
            if not isinstance(v, int) or not isinstance(data, int) or v < data:
                raise self.error(key, f"{v!r} is shorter than dataset.seq_length {data!r}")
        elif key == "model.params_dtype":
            want = ("torch.float16" if self.flat.get("mixed_precision.fp16") is True
                    else "torch.bfloat16")
            if v != want:
                raise self.error(key, f"not modelled: {v!r} (the mixed precision's {want})")
        elif not any(v is a or (v == a and type(v) is type(a)) for a in decl.allowed):
            raise self.error(key, f"not modelled with the value {v!r}: {decl.why}")


def _activation(r: _Reader, key: str, v: Any) -> list[tuple[str, list[str]]]:
    act, gated = _ACTIVATIONS.get(v), r.flat.get("model.gated_linear_unit") is True
    if act == "silu" and gated:
        return [("--swiglu", [])]
    if act == "gelu" and not gated:
        return []
    raise r.error(key, f"not modelled: {v!r} with gated_linear_unit {gated} (SwiGLU or GeLU)")


def _fp8(r: _Reader, key: str, v: Any) -> list[tuple[str, list[str]]]:
    if v is None:
        return []
    if v not in ("e4m3", "hybrid"):
        raise r.error(key, f"not modelled: {v!r} (e4m3 or hybrid)")
    return [("--fp8-format", [v])]


def _fp8_recipe(r: _Reader, key: str, v: Any) -> list[tuple[str, list[str]]]:
    if r.flat.get("mixed_precision.fp8") is None:
        return []
    if v not in ("delayed", "tensorwise", "mxfp8"):
        raise r.error(key, f"not modelled: {v!r} (delayed, tensorwise or mxfp8; Megatron-Core's "
                           "blockwise recipe is not modelled)")
    return [("--fp8-recipe", [v])]


def _fp4(r: _Reader, key: str, v: Any) -> list[tuple[str, list[str]]]:
    """``fp4`` (the mixed-precision section's, or the model's Bridge copies it into)."""
    if v is None or (key.startswith("model.") and "mixed_precision.fp4" in r.flat):
        return []
    if v != "e2m1":
        raise r.error(key, f"not modelled: {v!r} (e2m1, Megatron-Core's only FP4 format)")
    return [("--fp4-format", [v])]


def _fp4_recipe(r: _Reader, key: str, v: Any) -> list[tuple[str, list[str]]]:
    section = key.partition(".")[0]
    if r.flat.get(f"{section}.fp4") is None or (
            section == "model" and "mixed_precision.fp4_recipe" in r.flat):
        return []
    if v != "nvfp4":
        raise r.error(key, f"not modelled: {v!r} (nvfp4; the custom recipe's quantizer "
                           "factory is refused)")
    return [("--fp4-recipe", [v])]


def _grad_reduce(r: _Reader, _key: str, v: Any) -> list[tuple[str, list[str]]]:
    bf16 = r.flat.get("mixed_precision.bf16") is True
    return [("--grad-reduce-in-bf16", [])] if v is False and bf16 else []


def _query_groups(_r: _Reader, _key: str, v: Any) -> list[tuple[str, list[str]]]:
    return [] if v is None else [("--group-query-attention", []),
                                 ("--num-query-groups", [str(v)])]


def _seq_length(r: _Reader, key: str, v: Any) -> list[tuple[str, list[str]]]:
    """dataset.seq_length, or model.seq_length in a dump whose data set has none."""
    if key == "model.seq_length":
        if "dataset.seq_length" in r.flat:
            r.check_allowed(key, BY_KEY[key], v)
            return []
    return [] if v is None else [("--seq-length", [str(v)])]


def _graph_scope(r: _Reader, key: str, v: Any) -> list[tuple[str, list[str]]]:
    """The scope, where CUDA graphs are on (Megatron-Core's transformer_config.py at d98e8a64:
    "cuda_graph_modules has no effect when cuda_graph_impl="none""; Bridge's dumps carry a
    scope either way)."""
    on = (r.flat.get("model.cuda_graph_impl") not in (None, "none")
          or r.flat.get("model.enable_cuda_graph") is True
          or r.flat.get("model.external_cuda_graph") is True)
    words = BY_KEY[key].how(v) if on else None
    return [] if words is None else [("--cuda-graph-scope", words)]


_SPECIAL = {"model.activation_func": _activation, "model.cuda_graph_scope": _graph_scope,
            "mixed_precision.fp8": _fp8,
            "mixed_precision.fp8_recipe": _fp8_recipe, "model.num_query_groups": _query_groups,
            "mixed_precision.grad_reduce_in_fp32": _grad_reduce,
            "mixed_precision.fp4": _fp4, "model.fp4": _fp4,
            "mixed_precision.fp4_recipe": _fp4_recipe, "model.fp4_recipe": _fp4_recipe,
            "dataset.seq_length": _seq_length, "model.seq_length": _seq_length}


def is_declared(key: str) -> NemoKey | None:
    """The table's declaration of ``key`` (for the docs' table)."""
    return BY_KEY.get(key)

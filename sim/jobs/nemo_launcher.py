"""NeMo 1 launcher training configs (NVIDIA/NeMo-Framework-Launcher
``launcher_scripts/conf/training/*/*.yaml``) → Megatron-LM arguments → simrun's options.

Each key is declared in :mod:`sim.jobs.nemo_table`: most hand their value to the Megatron-LM
argument NeMo gives it to, and the Megatron reader (:func:`sim.jobs.megatron_args.translate`)
applies, states or refuses it exactly as for a Megatron script; errors name the YAML key and its
line, not the Megatron argument. OmegaConf interpolations are evaluated where a value matters:
``${.key}`` (a sibling), ``${training.model.key}`` (the launcher's root is ``training``) and
``${multiply:a, b}``; another interpolation in a key simrun applies is refused, naming it.
Bounded by the YAML loader's limits (:mod:`sim.files.yaml_load`).
"""

from __future__ import annotations

import re
from typing import Any

from sim.errors import InputError
from sim.files.yaml_load import load_yaml_with_lines
from sim.jobs.megatron_args import MegatronJob, translate
from sim.jobs.nemo_table import NemoKey, verdict_of
from sim.jobs.shell import Word
from sim.limits import parse_int

_REF = re.compile(r"\$\{([^${}]*)\}")
_MULTIPLY = re.compile(r"multiply:\s*(-?\d{1,18})\s*,\s*(-?\d{1,18})")


def is_launcher_config(data: Any) -> bool:
    """Whether YAML ``data`` has the launcher training config's top-level sections."""
    return isinstance(data, dict) and isinstance(data.get("trainer"), dict) and isinstance(
        data.get("model"), dict) and "run" in data


def read_launcher(text: str, file: str) -> MegatronJob:
    """The translation of the launcher config ``text`` (its ``model`` spec fields in
    ``job.model``; the GPU count in ``job.gpus``)."""
    data, lines = load_yaml_with_lines(text, file)
    flat: dict[str, Any] = {}
    _flatten(data, (), flat)
    cfg = _Config(flat, {k: lines.get(tuple(k.split("."))) or 0 for k in flat}, file)
    return cfg.translate()


def _flatten(node: Any, path: tuple, out: dict[str, Any]) -> None:
    key = ".".join(path)
    if isinstance(node, dict) and (not path or verdict_of(key) is None
                                   or verdict_of(key).verdict == "irrelevant"):
        for k, v in node.items():
            _flatten(v, (*path, str(k)), out)
        return
    out[key] = node


class _Config:
    def __init__(self, flat: dict[str, Any], lines: dict[str, int], file: str):
        self.flat, self.lines, self.file = flat, lines, file

    def error(self, key: str, why: str) -> InputError:
        return InputError(why, file=self.file, line=self.lines.get(key), field=key)

    def value(self, key: str, depth: int = 0) -> Any:
        """The value of ``key`` with its interpolations evaluated."""
        v = self.flat.get(key)
        if not isinstance(v, str) or "${" not in v:
            return v
        if depth > 8:
            raise self.error(key, "interpolations nested too deep")
        text = v
        for _ in range(16):
            m = _REF.search(text)
            if m is None:
                break
            text = text[:m.start()] + str(self._resolve(key, m[1], depth)) + text[m.end():]
        else:
            raise self.error(key, "too many interpolations")
        n = parse_int(text)
        return n if n is not None else text

    def _resolve(self, key: str, ref: str, depth: int) -> Any:
        m = _MULTIPLY.fullmatch(ref.strip())
        if m:
            return int(m[1]) * int(m[2])
        if ref.startswith(".") and not ref.startswith(".."):
            target = key.rsplit(".", 1)[0] + ref
        elif ref.startswith("training."):
            target = ref.removeprefix("training.")
        else:
            raise self.error(key, f"the interpolation ${{{ref}}} cannot be evaluated")
        if target not in self.flat:
            raise self.error(key, f"the interpolation ${{{ref}}} names no key of the file")
        return self.value(target, depth + 1)

    def translate(self) -> MegatronJob:
        words: list[Word] = []
        back: dict[str, str] = {}  # Megatron argument → the key it came from
        own: list[tuple[str, str]] = []  # (key, applied / irrelevant / stated)
        for key in self.flat:
            decl = verdict_of(key)
            if decl is None:
                raise self.error(key, "not modelled: simrun does not know this NeMo launcher "
                                      "key (docs/job-formats.md lists those it knows)")
            got = self._one(key, decl)
            if isinstance(got, str) or not got:  # [] : null / false, the argument not given
                own.append((key, got or "irrelevant"))
                continue
            for flag, values in got:
                back[flag] = key
                line = self.lines.get(key, 0)
                words += [Word(flag, line), *(Word(v, line) for v in values)]
        try:
            mjob = translate(words, self.file, self._name())
        except InputError as e:
            key = back.get(e.field or "") or next(
                (k for k, n in self.lines.items() if e.line and n == e.line), e.field)
            raise InputError(f"{e.message} (as Megatron-LM's {e.field})", file=self.file,
                             line=self.lines.get(key or "", e.line), field=key) from None
        job = MegatronJob(self.file, argv=mjob.argv, model=mjob.model)
        job.gpus = self._gpus()
        for key, verdict in own:
            {"applied": job.applied, "irrelevant": job.irrelevant,
             "stated": job.stated}[verdict].append(key)
        for flag in mjob.applied:
            if back.get(flag, flag) not in job.applied:
                job.applied.append(back.get(flag, flag))
        for flag in mjob.irrelevant:
            job.irrelevant.append(back.get(flag, flag))
        if self._te_async():
            job.argv.append("--async-tensor-model-parallel-allreduce")
        return job

    def _name(self) -> str:
        name = self.flat.get("run.name")
        return name if isinstance(name, str) and "${" not in name else "nemo"

    def _one(self, key: str, decl: NemoKey) -> str | list[tuple[str, list[str]]]:
        """A key's own verdict, or its Megatron-LM arguments."""
        v = self.flat[key]
        if decl.verdict in ("irrelevant", "stated", "gpus"):
            return {"gpus": "applied"}.get(decl.verdict, decl.verdict)
        v = self.value(key)
        if decl.verdict == "refused":
            raise self.error(key, f"not modelled: {decl.why}")
        if decl.verdict == "allowed":
            return self._allowed(key, decl, v)
        special = _SPECIAL.get(key)
        if special is not None:
            return special(self, key, v)
        if isinstance(v, (dict, list)) and key != "model.rampup_batch_size":
            raise self.error(key, f"expected a value, got {type(v).__name__}")
        if isinstance(v, str) and "${" in v:
            raise self.error(key, "the interpolation cannot be evaluated")
        words = decl.how(v)
        return [] if words is None else [(decl.megatron, words)]

    def _allowed(self, key: str, decl: NemoKey, v: Any) -> str:
        if key == "model.data.seq_length":
            if v != self.value("model.encoder_seq_length"):
                raise self.error(key, f"{v!r} differs from model.encoder_seq_length")
            return "irrelevant"
        vp = self.value("model.virtual_pipeline_model_parallel_size")
        if key in ("model.overlap_p2p_comm", "model.batch_p2p_comm") and not (
                isinstance(vp, int) and vp > 1):
            return "irrelevant"  # NeMo reads them with an interleaved pipeline only
        if not any(v is a or (v == a and type(v) is type(a)) for a in decl.allowed):
            raise self.error(key, f"not modelled with the value {v!r}: {decl.why}")
        return "applied" if key == "model.transformer_engine" else "irrelevant"

    def _te_async(self) -> bool:
        tp = self.value("model.tensor_model_parallel_size")
        return (self.flat.get("model.transformer_engine") is True and isinstance(tp, int)
                and tp > 1 and self.value("model.ub_tp_comm_overlap") is not True)

    def _gpus(self) -> int | None:
        nodes, devices = self.value("trainer.num_nodes"), self.value("trainer.devices")
        for key, v in (("trainer.num_nodes", nodes), ("trainer.devices", devices)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise self.error(key, f"expected a positive integer, got {v!r}")
        return nodes * devices if nodes and devices else None


def _precision(cfg: _Config, key: str, v: Any) -> list[tuple[str, list[str]]]:
    flag = {"bf16": "--bf16", "bf16-mixed": "--bf16", 16: "--fp16", "16": "--fp16",
            "16-mixed": "--fp16"}.get(v)
    if flag is None:
        raise cfg.error(key, f"not modelled: {v!r} (bf16, bf16-mixed, 16 or 16-mixed)")
    return [(flag, [])]


def _fp8(cfg: _Config, key: str, v: Any) -> list[tuple[str, list[str]]]:
    if v is not True:
        return []
    if cfg.value("model.fp8_hybrid") is True:
        fmt = "hybrid"
    elif cfg.value("model.fp8_e4m3") is True:
        fmt = "e4m3"
    else:
        raise cfg.error(key, "needs model.fp8_hybrid or model.fp8_e4m3")
    return [("--fp8-format", [fmt]), ("--fp8-recipe", ["delayed"])]


def _optimizer(cfg: _Config, key: str, v: Any) -> list[tuple[str, list[str]]]:
    if v == "distributed_fused_adam":
        return [("--use-distributed-optimizer", [])]
    if v in ("fused_adam", "adam"):
        return []
    raise cfg.error(key, f"not modelled: {v!r} (distributed_fused_adam, fused_adam, adam)")


def _recompute(cfg: _Config, key: str, v: Any) -> list[tuple[str, list[str]]]:
    """NeMo reads the method and layer count with a granularity only."""
    if v is None or cfg.value("model.activations_checkpoint_granularity") is None:
        return []
    flag = {"model.activations_checkpoint_method": "--recompute-method",
            "model.activations_checkpoint_num_layers": "--recompute-num-layers"}[key]
    return [(flag, [str(v)])]


def _query_groups(_cfg: _Config, _key: str, v: Any) -> list[tuple[str, list[str]]]:
    if v is None:
        return []
    return [("--group-query-attention", []), ("--num-query-groups", [str(v)])]


_SPECIAL = {"trainer.precision": _precision, "model.fp8": _fp8,
            "model.optim.name": _optimizer, "model.num_query_groups": _query_groups,
            "model.activations_checkpoint_method": _recompute,
            "model.activations_checkpoint_num_layers": _recompute,
            }

"""torchtitan job configs (TOML, the releases of 2024 and 2025 up to the move to Python configs in
February 2026, pytorch/torchtitan 9810191bb) → simrun's options and a model spec.

Schema read: torchtitan/config/job_config.py at pytorch/torchtitan 8a2686c4a (2025-09-30):
``[model] name / flavor``, ``[training] local_batch_size / global_batch_size / seq_len /
mixed_precision_param / mixed_precision_reduce``, ``[parallelism] data_parallel_replicate_degree
/ data_parallel_shard_degree / tensor_parallel_degree / pipeline_parallel_degree /
pipeline_parallel_schedule / pipeline_parallel_microbatch_size / context_parallel_degree /
enable_async_tensor_parallel``, ``[compile] enable``, ``[activation_checkpoint] mode``,
``[quantize.linear.float8]`` with ``model.converters``; and the 2024 releases' names
(:data:`RENAMED`, ``model.norm_type``, ``training.fp8_linear``; torchtitan/config_manager.py at
041336434, 2024-04-24). Every key is applied, irrelevant to
timing or refused (:data:`KEYS`; a key absent from it is refused as unknown); wrong types exit
2 naming the key. Current torchtitan defines its configs in Python: out of scope.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tomllib

from sim.errors import InputError
from sim.jobs.megatron_args import MegatronJob
from sim.models.vocab.spec import ModelSpec, load_model
from sim.pipeline.kinds import ZBV, GPipe, OneFOneB

#: torchtitan's llama3 flavours (torchtitan/models/llama3/__init__.py) → shipped specs whose
#: sizes are the flavour's (workloads/models/llama3-*.yaml)
FLAVORS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b",
           ("llama3", "405B"): "llama3-405b"}
#: torchtitan's schedule names (torch.distributed.pipelining) → simrun's (one stage per rank,
#: or ZBV's two in a V; the looped schedules' stages per rank are not read, so they are refused)
SCHEDULES = {"GPipe": GPipe.name, "1F1B": OneFOneB.name, "ZBVZeroBubble": ZBV.name}
_IRRELEVANT_SECTIONS = {
    "job": "where outputs go", "profiling": "profiler traces: the same kernels run",
    "metrics": "logging", "checkpoint": "checkpoints are saved between iterations",
    "optimizer": "the optimizer's hyperparameters (AdamW's step is modelled whatever they are)",
    "lr_scheduler": "the learning-rate schedule", "validation": "validation runs between "
    "training iterations", "comm": "timeouts and tracing of the process group",
    "fault_tolerance": "restarts", "memory_estimation": "a dry run", "experimental":
    "custom model registration", "float8": "torchao float8 settings (see model.converters)"}


@dataclasses.dataclass(frozen=True)
class Key:
    """One TOML key (``section.key``): its ``verdict`` and what it does (or why not)."""

    key: str
    verdict: str
    why: str


KEYS = (
    Key("model.name", "applied", "with model.flavor, the shipped model spec (llama3 only)"),
    Key("model.flavor", "applied", "8B, 70B, 405B → llama3-8b / -70b / -405b"),
    Key("model.converters", "applied", "['float8'] → --dtype fp8 --fp8-recipe tensorwise "
                                       "(torchao's dynamic scaling); others refused"),
    Key("model.hf_assets_path", "irrelevant", "tokenizer and weights files"),
    Key("model.tokenizer_path", "irrelevant", "the tokenizer file"),
    Key("training.local_batch_size", "applied", "sequences per DP rank per step: --micro-batch "
                                                "(with PP: --microbatches of "
                                                "pipeline_parallel_microbatch_size)"),
    Key("training.global_batch_size", "applied", "-1 (local × DP, no accumulation) only"),
    Key("training.seq_len", "applied", "the model spec's sequence length"),
    Key("training.mixed_precision_param", "applied", "bfloat16 → --dtype bf16 (float32 refused)"),
    Key("training.mixed_precision_reduce", "applied", "float32: FSDP2's fp32 reduce-scatter "
                                                      "(--use-torch-fsdp2); bfloat16 refused"),
    Key("training.max_norm", "irrelevant", "the clipping threshold (> 0): the norm is computed "
                                           "whatever it is"),
    Key("training.steps", "irrelevant", "how long the job runs"),
    Key("training.dataset", "irrelevant", "the data set"),
    Key("training.dataset_path", "irrelevant", "the data set"),
    Key("training.compile", "applied", "(2024 releases) --compile / --no-compile"),
    Key("parallelism.data_parallel_replicate_degree", "applied", "1 only (HSDP's replication "
                                                                 "is not modelled)"),
    Key("parallelism.data_parallel_shard_degree", "applied", "FSDP2 over DP: --fsdp "
                                                             "--use-torch-fsdp2, N → --dp N"),
    Key("parallelism.tensor_parallel_degree", "applied", "--tp N, with --sequence-parallel "
                                                         "(torchtitan's TP plan shards the "
                                                         "norms: SequenceParallel)"),
    Key("parallelism.pipeline_parallel_degree", "applied", "--pp N"),
    Key("parallelism.pipeline_parallel_schedule", "applied",
        "GPipe, 1F1B, ZBVZeroBubble → --schedule gpipe / 1f1b / zb-v; others (the looped "
        "schedules, whose stages per rank are not read) refused"),
    Key("parallelism.pipeline_parallel_microbatch_size", "applied", "--micro-batch with PP"),
    Key("parallelism.context_parallel_degree", "applied", "--context-parallel-size N"),
    Key("parallelism.enable_async_tensor_parallel", "applied", "false only (async TP is not "
                                                               "modelled)"),
    Key("compile.enable", "applied", "--compile / --no-compile"),
    Key("compile.components", "irrelevant", "what compile.enable compiles (model and loss)"),
    Key("activation_checkpoint.mode", "applied", "none / full → --recompute none / full; "
                                                 "torchtitan's selective (per op or per layer) "
                                                 "is not Megatron's: refused"),
    Key("activation_checkpoint.selective_ac_option", "irrelevant",
        "read by mode selective only, which is refused"),
    Key("quantize.linear.float8.enable_fsdp_float8_all_gather", "applied", "false only"),
    # the 2024 releases' keys (torchtitan/config_manager.py at 041336434, 2024-04-24) that
    # :data:`RENAMED` does not map onto the 2025 ones
    Key("model.norm_type", "applied", "rmsnorm / fused_rmsnorm → --norm-type (with compile "
                                      "off); layernorm, np_layernorm refused (llama3 is RMSNorm)"),
    Key("training.fp8_linear", "applied", "'' (off) → --dtype bf16; 'dynamic' → --dtype fp8 "
                                          "--fp8-recipe tensorwise"),
    Key("training.enable_loss_parallel", "applied", "true: the vocab-parallel loss simrun "
                                                    "models with TP; false refused"),
    Key("training.warmup_steps", "irrelevant", "the learning-rate schedule"),
    Key("training.gc_freq", "irrelevant", "Python garbage collection between steps: simrun "
                                          "models no GC pauses"),
    Key("quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", "irrelevant",
        "with float8 all-gathers only"),
    Key("quantize.linear.float8.filter_fqns", "irrelevant", "the output layer kept in bf16, "
                                                            "as simrun's fp8 runs it"),
)
_BY_KEY = {k.key: k for k in KEYS}
#: the 2024 releases' names of keys the 2025 releases moved
RENAMED = {"training.batch_size": "training.local_batch_size",
           "training.data_parallel_degree": "parallelism.data_parallel_shard_degree",
           "training.tensor_parallel_degree": "parallelism.tensor_parallel_degree",
           "training.pipeline_parallel_degree": "parallelism.pipeline_parallel_degree"}


def read_torchtitan(text: str, file: str) -> tuple[MegatronJob, ModelSpec]:
    """The simrun flags and model spec of the torchtitan TOML ``text``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"not valid TOML: {e}", file=file, field="toml") from None
    except RecursionError:  # arrays or tables nested thousands deep
        raise InputError("nested too deeply", file=file, field="toml") from None
    flat = _flatten(data, file)
    job = MegatronJob(file)
    cfg = _Config(flat, file)
    for key in flat:
        (job.applied if verdict_of(key).verdict == "applied" else job.irrelevant).append(key)
    job.argv = cfg.argv()  # the types of the layout keys checked before the model's
    if "model.norm_type" in flat and "--norm-type" not in job.argv:  # compiled: not used
        job.applied.remove("model.norm_type")
        job.irrelevant.append("model.norm_type")
    return job, cfg.spec()


def verdict_of(key: str) -> Key | None:
    """The declaration of ``key`` (a key of an irrelevant section is irrelevant)."""
    section = key.split(".")[0]
    if key in _BY_KEY:
        return _BY_KEY[key]
    if section in _IRRELEVANT_SECTIONS:
        return Key(key, "irrelevant", _IRRELEVANT_SECTIONS[section])
    return None


def _flatten(data: dict, file: str, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and (not prefix or key in ("quantize.linear",
                                                          "quantize.linear.float8")):
            for k2, v2 in _flatten(v, file, key + ".").items():
                _put(out, k2, v2, file)
        elif key in RENAMED:
            _put(out, RENAMED[key], v, file)
        elif verdict_of(key) is None:
            raise InputError("not modelled: simrun does not know this torchtitan key "
                             "(docs/job-formats.md lists those it knows)", file=file, field=key)
        else:
            _put(out, key, v, file)
    return out


def _put(out: dict[str, Any], key: str, value: Any, file: str) -> None:
    """``out[key] = value``, refusing a key given twice (under its 2024 and 2025 names)."""
    if key in out:
        old = next((o for o, n in RENAMED.items() if n == key), key)
        raise InputError(f"given twice (also as {old})", file=file, field=key)
    out[key] = value


class _Config:
    def __init__(self, flat: dict[str, Any], file: str):
        self.flat, self.file = flat, file

    def get(self, key: str, kind: type, default: Any) -> Any:
        v = self.flat.get(key, default)
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
        if not ok:
            raise InputError(f"expected {kind.__name__}, got {type(v).__name__} {v!r}",
                             file=self.file, field=key)
        return v

    def refuse(self, key: str, why: str) -> InputError:
        return InputError(f"not modelled: {why}", file=self.file, field=key)

    def spec(self) -> ModelSpec:
        name = self.get("model.name", str, "llama3")
        flavor = self.get("model.flavor", str, "debugmodel")
        shipped = FLAVORS.get((name, flavor))
        if shipped is None:
            raise self.refuse("model.flavor", f"{name} {flavor} (known: "
                                              f"{', '.join(f'{n} {f}' for n, f in FLAVORS)})")
        spec = load_model(shipped)
        seq = self.get("training.seq_len", int, 2048)  # torchtitan's default
        if seq < 1:
            raise InputError(f"expected ≥ 1, got {seq}", file=self.file, field="training.seq_len")
        return dataclasses.replace(spec, seq_len=seq)

    def argv(self) -> list[str]:
        out = self._precision() + self._parallel() + self._execution()
        return out

    def _precision(self) -> list[str]:
        if self.get("training.mixed_precision_param", str, "bfloat16") != "bfloat16":
            raise self.refuse("training.mixed_precision_param", "bfloat16 only")
        if self.get("training.mixed_precision_reduce", str, "float32") != "float32":
            raise self.refuse("training.mixed_precision_reduce", "float32 only (FSDP2's)")
        converters = self.get("model.converters", list, [])
        if any(c != "float8" for c in converters):
            raise self.refuse("model.converters", f"{converters!r} (float8 only)")
        if self.get("quantize.linear.float8.enable_fsdp_float8_all_gather", bool, False):
            raise self.refuse("quantize.linear.float8.enable_fsdp_float8_all_gather",
                              "float8 all-gathers of FSDP parameters")
        fp8_linear = self.get("training.fp8_linear", str, "")
        if fp8_linear not in ("", "dynamic"):
            raise self.refuse("training.fp8_linear", f"{fp8_linear!r} ('' or 'dynamic')")
        if not self.get("training.enable_loss_parallel", bool, True):
            raise self.refuse("training.enable_loss_parallel", "a loss gathered over TP")
        if converters or fp8_linear:
            return ["--dtype", "fp8", "--fp8-recipe", "tensorwise"]
        return ["--dtype", "bf16"]

    def _parallel(self) -> list[str]:
        g = self.get
        if g("parallelism.data_parallel_replicate_degree", int, 1) != 1:
            raise self.refuse("parallelism.data_parallel_replicate_degree", "HSDP replication")
        if g("parallelism.enable_async_tensor_parallel", bool, False):
            raise self.refuse("parallelism.enable_async_tensor_parallel", "async TP")
        if g("training.global_batch_size", int, -1) != -1:
            raise self.refuse("training.global_batch_size", "gradient accumulation; leave "
                                                            "it at -1")
        tp = g("parallelism.tensor_parallel_degree", int, 1)
        pp = g("parallelism.pipeline_parallel_degree", int, 1)
        cp = g("parallelism.context_parallel_degree", int, 1)
        shard = g("parallelism.data_parallel_shard_degree", int, -1)
        local = g("training.local_batch_size", int, 8)
        for key, v in (("tensor_parallel_degree", tp), ("pipeline_parallel_degree", pp),
                       ("context_parallel_degree", cp), ("local_batch_size", local)):
            if v < 1:
                raise InputError(f"expected ≥ 1, got {v}", file=self.file, field=key)
        out = ["--tp", str(tp), "--pp", str(pp), "--context-parallel-size", str(cp),
               "--fsdp", "--use-torch-fsdp2"]
        out += ["--sequence-parallel"] if tp > 1 else []
        out += ["--dp", str(shard)] if shard > 0 else []
        mb = g("parallelism.pipeline_parallel_microbatch_size", int, 1) if pp > 1 else local
        if mb < 1 or local % mb:
            raise InputError(f"local_batch_size {local} is not a multiple of {mb}",
                             file=self.file, field="parallelism.pipeline_parallel_microbatch_size")
        out += ["--micro-batch", str(mb), "--microbatches", str(local // mb)]
        if pp > 1:
            name = g("parallelism.pipeline_parallel_schedule", str, "1F1B")
            if name not in SCHEDULES:
                raise self.refuse("parallelism.pipeline_parallel_schedule", name)
            out += ["--schedule", SCHEDULES[name]]
        return out

    def _execution(self) -> list[str]:
        compiled = self.get("compile.enable", bool, self.get("training.compile", bool, False))
        mode = self.get("activation_checkpoint.mode", str, "selective")
        if mode not in ("none", "full"):
            raise self.refuse("activation_checkpoint.mode",
                              f"{mode!r}: torchtitan's selective checkpointing (per op or per "
                              "layer) is not Megatron's selective recompute")
        out = ["--compile" if compiled else "--no-compile", "--recompute", mode]
        if "model.norm_type" in self.flat:
            norm = self.get("model.norm_type", str, "rmsnorm")
            if norm not in ("rmsnorm", "fused_rmsnorm"):
                raise self.refuse("model.norm_type", f"{norm!r} (llama3 is RMSNorm)")
            out += [] if compiled else ["--norm-type", norm]
        return out

"""Megatron-LM arguments → simrun's options and a model spec.

Input: the words of a launch script's training command, of an argument file
(:func:`sim.jobs.script.launch_arguments`) or of a training log's ``arguments`` block
(:func:`sim.jobs.megatron_log.arguments_block_of`, names given as ``--`` flags). Output: a
:class:`MegatronJob`: the simrun flags (``--tp 8``, ``--dtype fp16``, ...; parsed by simrun's
own parser, so every option's declaration applies), the model-spec fields and one line per
argument saying what became of it (:mod:`sim.jobs.megatron_table`). An argument that is
neither applied nor irrelevant is refused, naming it, file and line (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.errors import InputError
from sim.jobs.megatron_table import ARGS, MegatronArg
from sim.jobs.shell import Word
from sim.limits import parse_float, parse_int

#: GPT-2's BPE vocabulary (Radford et al. 2019, "a vocabulary of 50,257"), the vocabulary of
#: Megatron-LM's GPT2BPETokenizer, pretrain_gpt.py's default tokenizer
GPT2_VOCAB = 50257
_NORMS = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
_POSITIONS = {"learned_absolute": "learned", "rope": "rope"}


@dataclass
class MegatronJob:
    """The translation: ``argv`` (simrun flags), ``model`` (model-spec fields), ``applied``
    and ``irrelevant`` (the Megatron argument names, in order), ``file``; ``stated`` (read, not
    modelled, said in the report) and ``gpus`` (the job's own GPU count, used when the command
    line gives none) for the formats that have them."""

    file: str
    argv: list[str] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    irrelevant: list[str] = field(default_factory=list)
    stated: list[str] = field(default_factory=list)
    gpus: int | None = None


def split_arguments(words: list[Word], file: str) -> dict[str, tuple[list[Word], int]]:
    """``--name values...`` → name → (values, line); a later repeat wins, as in argparse."""
    out: dict[str, tuple[list[Word], int]] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.unknown and w.text.startswith("$"):
            raise InputError(f"an argument name cannot be evaluated: {w.unknown}", file=file,
                             line=w.line, field=w.text)
        name, eq, inline = w.text.partition("=")
        if not name.startswith("--"):
            raise InputError(f"expected a '--' argument, got {w.text[:60]!r}", file=file,
                             line=w.line, field="arguments")
        arg = ARGS.get(name)
        if arg is None:
            raise InputError("not modelled: simrun does not know this Megatron-LM argument "
                             "(docs/job-formats.md lists those it knows); leave it out",
                             file=file, line=w.line, field=name)
        if eq:
            values, i = [Word(inline, w.line, w.unknown)], i + 1
        elif arg.nargs == "+":
            j = i + 1
            while j < len(words) and not words[j].text.startswith("--"):
                j += 1
            values, i = words[i + 1:j], j
        else:
            values, i = words[i + 1:i + 1 + arg.nargs], i + 1 + arg.nargs
            if len(values) < arg.nargs or any(v.text.startswith("--") for v in values):
                raise InputError("expects a value", file=file, line=w.line, field=name)
        out[name] = (values, w.line)
    return out


def translate(words: list[Word], file: str, name: str) -> MegatronJob:
    """The :class:`MegatronJob` of the argument ``words``; ``name``: the model's name."""
    args = split_arguments(words, file)
    job = MegatronJob(file)
    ctx = _Context(args, file)
    for flag, (values, line) in args.items():
        arg = ARGS[flag]
        if arg.verdict == "refused":
            raise InputError(arg.why, file=file, line=line, field=flag)
        if arg.verdict == "irrelevant":
            ctx.check_irrelevant(arg, values, line)
            job.irrelevant.append(flag)
            continue
        if values and values[0].unknown:
            raise InputError(f"the value cannot be evaluated: {values[0].unknown}", file=file,
                             line=line, field=flag)
        if ctx.apply(arg, values, job):
            job.applied.append(flag)
        else:
            job.irrelevant.append(flag)
    job.model = ctx.model_fields(name)
    return job


class _Context:
    """The arguments being translated, their values by name."""

    def __init__(self, args: dict[str, tuple[list[Word], int]], file: str):
        self.args, self.file = args, file

    def text(self, flag: str) -> str | None:
        got = self.args.get(flag)
        return got[0][0].text if got and got[0] else None

    def has(self, flag: str) -> bool:
        return flag in self.args

    def int(self, flag: str, default: int | None = None) -> int | None:
        text = self.text(flag)
        if text is None:
            return default
        v = parse_int(text)
        if v is None or v < 1:
            raise self.error(flag, f"expected a positive integer, got {text!r}")
        return v

    def error(self, flag: str, why: str) -> InputError:
        return InputError(why, file=self.file, line=self.args[flag][1], field=flag)

    def check_irrelevant(self, arg: MegatronArg, values: list[Word], line: int) -> None:
        v = values[0].text if values else ""
        bad = {"--clip-grad": lambda: parse_float(v) == 0.0,
               "--empty-unused-memory-level": lambda: v not in ("0", "1"),
               "--rotary-percent": lambda: parse_float(v) != 1.0,
               "--checkpoint-num-layers": lambda: v != "1",
               "--DDP-impl": lambda: v != "local"}.get(arg.name)
        if bad and bad():
            raise InputError(f"not modelled with the value {v!r}: {arg.why}", file=self.file,
                             line=line, field=arg.name)

    def apply(self, arg: MegatronArg, values: list[Word], job: MegatronJob) -> bool:
        """Add ``arg``'s simrun flags to ``job``; False when Megatron-LM itself ignores it."""
        if arg.to.startswith("model."):
            return True  # read by model_fields
        v = values[0].text if values else ""
        flag = arg.name
        if arg.to == flag and flag != "--sequence-parallel":
            words = [w.text for w in values]
            job.argv += [flag, *([",".join(words)] if arg.nargs == "+" else words)]
            return True
        handler = _TRANSLATE[flag]
        out = handler(self, v)
        if out is None:
            return False
        job.argv += out
        return True

    def model_fields(self, name: str) -> dict[str, Any]:
        m: dict[str, Any] = {"name": name}
        for flag, key in (("--num-layers", "layers"), ("--hidden-size", "hidden"),
                          ("--num-attention-heads", "heads"), ("--seq-length", "seq_len"),
                          ("--ffn-hidden-size", "ffn_hidden"), ("--kv-channels", "kv_channels")):
            value = self.int(flag)
            if value is not None:
                m[key] = value
        for flag in ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length"):
            if flag not in self.args:
                raise InputError("missing: the model needs it", file=self.file, field=flag)
        self._shape(m)
        self._vocab(m)
        self._moe(m)
        for flag, key in (("--hidden-dropout", "hidden_dropout"),
                          ("--attention-dropout", "attention_dropout")):
            text = self.text(flag)
            if text is not None:
                value = parse_float(text)
                if value is None:
                    raise self.error(flag, f"expected a number, got {text!r}")
                m[key] = value
        return m

    def _shape(self, m: dict[str, Any]) -> None:
        if self.has("--swiglu"):
            m["gated_mlp"] = True
            if "ffn_hidden" not in m:  # arguments.py: int((4 * hidden * 2 / 3) / 64) * 64
                m["ffn_hidden"] = int((4 * m["hidden"] * 2 / 3) / 64) * 64
        if self.has("--group-query-attention"):
            m["kv_heads"] = self.int("--num-query-groups", 1)
        if self.has("--normalization"):
            norm = self.text("--normalization")
            if norm not in _NORMS:
                raise self.error("--normalization", f"not modelled: {norm!r} (LayerNorm or "
                                                    "RMSNorm)")
            m["norm"] = _NORMS[norm]
        pos = "rope" if self.has("--use-rotary-position-embeddings") else "learned"
        if self.has("--position-embedding-type"):
            kind = self.text("--position-embedding-type")
            if kind not in _POSITIONS:
                raise self.error("--position-embedding-type",
                                 f"not modelled: {kind!r} (learned_absolute or rope)")
            pos = _POSITIONS[kind]
        m["position_embedding"] = pos
        max_pos = self.int("--max-position-embeddings")
        if pos == "learned" and max_pos is not None and max_pos != m["seq_len"]:
            raise self.error("--max-position-embeddings",
                             f"not modelled: {max_pos} rows ≠ --seq-length {m['seq_len']} "
                             "(the model spec has one length)")
        if self.has("--untie-embeddings-and-output-weights"):
            m["tied_embeddings"] = False
        if self.has("--disable-bias-linear"):
            m["bias"] = False
        if self.has("--qk-layernorm"):
            m["qk_layernorm"] = True

    def _vocab(self, m: dict[str, Any]) -> None:
        if self.int("--make-vocab-size-divisible-by", 128) != 128:
            raise self.error("--make-vocab-size-divisible-by",
                             "not modelled: simrun pads the vocabulary to a multiple of 128·TP")
        vocab = self.int("--vocab-size")
        kind = self.text("--tokenizer-type") or "GPT2BPETokenizer"
        if vocab is None and kind != "GPT2BPETokenizer":
            raise InputError(f"the vocabulary of {kind} is unknown without --vocab-size; give "
                             "--vocab-size", file=self.file, line=self.args["--tokenizer-type"][1],
                             field="--vocab-size")
        m["vocab"] = vocab or GPT2_VOCAB

    def _moe(self, m: dict[str, Any]) -> None:
        experts = self.int("--num-experts")
        if experts is None:
            for flag in ("--moe-router-topk", "--moe-ffn-hidden-size"):
                if self.has(flag):
                    raise self.error(flag, "needs --num-experts")
            return
        m["moe"] = {"experts": experts, "top_k": self.int("--moe-router-topk", 2)}
        ffn = self.int("--moe-ffn-hidden-size")
        if ffn is not None:
            m["moe"]["expert_ffn_hidden"] = ffn


def _fp8(ctx: _Context, v: str) -> list[str]:
    if v not in ("hybrid", "e4m3"):
        raise ctx.error("--fp8-format", f"not modelled: {v!r} (hybrid or e4m3)")
    return ["--dtype", "fp8"]


def _recompute_method(ctx: _Context, v: str) -> list[str] | None:
    if v != "uniform" or ctx.int("--recompute-num-layers", 1) != 1:
        raise ctx.error("--recompute-method", "not modelled: simrun's full recomputation "
                                              "checkpoints every layer's input (uniform, "
                                              "--recompute-num-layers 1)")
    if ctx.text("--recompute-granularity") != "full":
        raise ctx.error("--recompute-method", "needs --recompute-granularity full")
    return []


def _layers_per_chunk(ctx: _Context, _v: str) -> list[str]:
    n = ctx.int("--num-layers-per-virtual-pipeline-stage")
    layers, pp = ctx.int("--num-layers"), ctx.int("--pipeline-model-parallel-size", 1)
    if layers is None or layers % (pp * n):
        raise ctx.error("--num-layers-per-virtual-pipeline-stage",
                        f"--num-layers {layers} is not a multiple of PP {pp} × {n}")
    return ["--vpp", str(layers // (pp * n))]


def _sequence_parallel(ctx: _Context, _v: str) -> list[str] | None:
    return ["--sequence-parallel"] if ctx.int("--tensor-model-parallel-size", 1) > 1 else None


_TRANSLATE = {
    # with --fp8-format, --bf16 / --fp16 is the precision of what --dtype fp8 runs outside FP8
    "--bf16": lambda ctx, _v: [] if ctx.has("--fp8-format") else ["--dtype", "bf16"],
    "--fp16": lambda ctx, _v: [] if ctx.has("--fp8-format") else ["--dtype", "fp16"],
    "--fp8-format": _fp8,
    "--recompute-activations": lambda _ctx, _v: ["--recompute", "selective"],
    "--checkpoint-activations": lambda _ctx, _v: ["--recompute", "full"],
    "--recompute-method": _recompute_method,
    "--recompute-num-layers": lambda ctx, _v: _recompute_method(ctx, "uniform") and [],
    "--num-layers-per-virtual-pipeline-stage": _layers_per_chunk,
    "--use-torch-fsdp2": lambda _ctx, _v: ["--fsdp", "--use-torch-fsdp2"],
    "--sequence-parallel": _sequence_parallel,
}

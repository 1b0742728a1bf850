"""Megatron-Core's ``--pipeline-model-parallel-layout``: which layers each virtual pipeline stage
holds, written out (``PipelineParallelLayerLayout``,
megatron/core/transformer/pipeline_parallel_layer_layout.py, NVIDIA/Megatron-LM).

Grammar (``parse_str_to_list``): ``E`` the embedding, ``t`` a transformer (decoder) layer,
``m`` an MTP layer, ``L`` the output layer and loss; ``|`` separates virtual stages (an empty
stage is allowed); commas are cosmetic and removed first; then ``(...)*N`` repeats a group
(no nested parentheses) and ``x*N`` a single character, in that order, each in one pass.
The list holds ``pp·vpp`` virtual stages in Megatron's order: virtual stage ``i`` is chunk
``i // pp`` of pipeline rank ``i % pp`` (``vpp`` follows from the count). Megatron-Core's checks
(``validate_layer_layout``, ``TransformerConfig.__post_init__``, ``validate_args``): the count
is a multiple of PP; the first layer is ``E`` and the last ``L``, each exactly once; the
``t`` count is ``num_layers``; the ``m`` count is ``mtp_num_layers`` (simrun models no MTP, so
none); the layout is not combined with the uneven-split flags nor with a virtual pipeline size
(``--vpp``). simrun also needs ``E`` in the first and ``L`` in the last virtual stage (only
empty stages before / after them could move them elsewhere).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.errors import UsageError

FLAG = "--pipeline-model-parallel-layout"
OPTION = "pipeline_model_parallel_layout"  # errors name the option (the CLI, its flag)
LAYERS = {"E": "the embedding", "t": "a transformer layer", "m": "an MTP layer",
          "L": "the output layer and loss"}
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")  # Megatron's two patterns, applied in this order
_SINGLE = re.compile(r"(.)\*(\d+)")
MAX_CHARS = 1_000_000
"""Most characters a layout may expand to (a mistyped repetition is refused, not allocated)."""


@dataclass(frozen=True)
class LayerLayout:
    """A parsed layout: ``text`` as given, ``stages`` the layer characters of each virtual
    stage in Megatron's order (``"Et"``, ``"tt"``, ``""``, ``"L"``...)."""

    text: str
    stages: tuple[str, ...]

    def virtual_pipeline_size(self, pp: int) -> int:
        """Chunks per pipeline stage: the stage count over ``pp``. Raises :class:`UsageError`
        when the count is not a multiple of ``pp`` (Megatron-Core's check)."""
        n = len(self.stages)
        if n % pp:
            raise UsageError(f"{self.text!r} lists {n} virtual stages, not a multiple of the "
                             f"pipeline-parallel size {pp} (Megatron-Core)", field=OPTION)
        return n // pp

    def decoder_layers(self) -> list[int]:
        """Transformer layers of each virtual stage, in virtual-stage order."""
        return [s.count("t") for s in self.stages]

    def describe(self, pp: int) -> str:
        """``rank 0: E,t | t ...``: what each pipeline rank's chunks hold (for the report)."""
        v = len(self.stages) // pp
        ranks = []
        for r in range(pp):
            chunks = [_chunk_text(self.stages[c * pp + r]) for c in range(v)]
            ranks.append(f"rank {r}: " + " | ".join(chunks))
        return "; ".join(ranks)

    def check(self, layers: int) -> None:
        """Megatron-Core's ``validate_layer_layout`` against a model of ``layers`` transformer
        layers and no MTP layer. Raises :class:`UsageError` naming the option."""
        flat = "".join(self.stages)
        if not flat or flat[0] != "E":
            raise UsageError(f"{self.text!r}: the first layer must be the embedding E, got "
                             f"{_got(flat[:1])} (Megatron-Core)", field=OPTION)
        if flat[-1] != "L":
            raise UsageError(f"{self.text!r}: the last layer must be the loss L, got "
                             f"{_got(flat[-1])} (Megatron-Core)", field=OPTION)
        for ch in "EL":
            if flat.count(ch) != 1:
                raise UsageError(f"{self.text!r}: {LAYERS[ch]} {ch} must appear exactly once, "
                                 f"it appears {flat.count(ch)} times (Megatron-Core)", field=OPTION)
        if "m" in flat:
            n = flat.count("m")
            raise UsageError(f"{self.text!r}: {n} MTP layer{'s' if n > 1 else ''} m, but the "
                             "model has no MTP layer (Megatron-Core: the count must equal "
                             "mtp_num_layers; simrun models no MTP)", field=OPTION)
        if flat.count("t") != layers:
            raise UsageError(f"{self.text!r} holds {flat.count('t')} transformer layers t, but "
                             f"the model has {layers} (Megatron-Core: must match num_layers)",
                             field=OPTION)
        if "E" not in self.stages[0] or "L" not in self.stages[-1]:
            raise UsageError(f"{self.text!r}: empty virtual stages before the embedding or "
                             "after the loss are not modelled (E must be in the first virtual "
                             "stage and L in the last)", field=OPTION)


def parse_layout(text: str | None) -> LayerLayout | None:
    """The layout ``text`` (``None``: none given). Raises a one-line :class:`UsageError`
    naming the option and the character (1-based, in ``text``) that cannot be read."""
    if text is None:
        return None
    if not text.strip():
        raise UsageError("empty layout (e.g. 'Et*3|(tt|)*29,m|L')", field=OPTION)
    items = _expand(text)
    stages: list[str] = [""]
    for ch, pos in items:
        if ch == "|":
            stages.append("")
        elif ch in LAYERS:
            stages[-1] += ch
        else:
            raise UsageError(f"cannot read {ch!r} at character {pos + 1} of {text!r}: a layer "
                             "is E (embedding), t (transformer layer), m (MTP layer) or L "
                             "(loss), '|' separates virtual stages, '(...)*N' and 'x*N' repeat",
                             field=OPTION)
    return LayerLayout(text, tuple(stages))


def _expand(text: str) -> list[tuple[str, int]]:
    """Megatron-Core's ``parse_str_to_list`` before the split at ``|``: commas removed, then
    ``(...)*N`` and ``x*N`` unrolled, each character kept with its position in ``text``."""
    items = [(ch, i) for i, ch in enumerate(text) if ch != ","]
    for pattern in (_GROUP, _SINGLE):
        s = "".join(ch for ch, _ in items)
        out: list[tuple[str, int]] = []
        last = 0
        for mt in pattern.finditer(s):
            out += items[last:mt.start()]
            times = int(mt.group(2))
            if len(out) + (mt.end(1) - mt.start(1)) * times > MAX_CHARS:
                raise UsageError(f"the repetition at character {items[mt.start()][1] + 1} of "
                                 f"{text!r} expands past {MAX_CHARS:,} layers", field=OPTION)
            out += items[mt.start(1):mt.end(1)] * times
            last = mt.end()
        items = out + items[last:]
    return items


def _chunk_text(stage: str) -> str:
    parts = [(run.group(1), len(run.group())) for run in re.finditer(r"(.)\1*", stage)]
    return ",".join(ch if n == 1 else f"{ch}*{n}" for ch, n in parts) or "(empty)"


def _got(ch: str) -> str:
    return repr(ch) if ch else "nothing"

"""How the transformer layers are split over pipeline stages (Megatron-Core's rules).

Even split (the default): ``L / (p·v)`` layers per virtual stage. Megatron-Core also runs two
kinds of uneven split (``get_num_layers_to_build`` / ``get_transformer_layer_offset`` in
``megatron/core/transformer/transformer_block.py``):

- ``--decoder-first-pipeline-num-layers N`` / ``--decoder-last-pipeline-num-layers N``: the
  first / last pipeline stage holds ``N`` layers; the rest are divided evenly over the other
  stages. With a virtual pipeline every stage's count must be divisible by ``v``.
- ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``: the
  embedding / the output layer and loss count as one layer each when dividing
  ``L (+1) (+1)`` evenly over the ``p·v`` virtual stages, so the first / last virtual stage
  runs one transformer layer fewer, possibly none: it then holds only the embedding / only the
  output layer and loss, as a layout's ``E|`` / ``|L`` chunk. BLOOM-176B's 70 layers on 12
  stages (BigScience, BLOOM paper arXiv:2211.05100 §3.4; docs/models.md) split this way as
  5 + 10·6 + 5; Llama 3 405B's 126 on 16 stages × 8 chunks (NVIDIA's Megatron-Bridge recipe)
  as 0 + 126·1 + 0, the same split as the layout ``E|(t|)*126,L``.

- ``--pipeline-model-parallel-layout``: every virtual stage's layers written out
  (:mod:`sim.parallel.layer_layout`); a virtual stage may hold no transformer layer (only the
  embedding, only the loss, or nothing), and the virtual pipeline size follows from the count.

Megatron-Core refuses to combine the two kinds ("Does not support standalone embedding stage
and standalone loss stage with uneven pp"); so does simrun, and every other split Megatron-Core
refuses (``TransformerConfig.__post_init__``): a count that does not divide as above, a first /
last stage count below 1 or not divisible by ``v``. simrun also refuses, as changing nothing,
an uneven split that gives the even one (one stage; both accounting flags on two virtual
stages). Virtual stage ``c·p + r`` is chunk
``c`` of stage ``r``; layers are numbered along virtual stages in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import UsageError
from sim.parallel.layer_layout import OPTION as LAYOUT_OPTION
from sim.parallel.layer_layout import LayerLayout

FIRST = "--decoder-first-pipeline-num-layers"
LAST = "--decoder-last-pipeline-num-layers"
EMB = "--account-for-embedding-in-pipeline-split"
LOSS = "--account-for-loss-in-pipeline-split"
# errors name the option (the CLI, its flag)
_OPTION = {FIRST: "first_stage_layers", LAST: "last_stage_layers",
           EMB: "account_for_embedding_in_pipeline_split",
           LOSS: "account_for_loss_in_pipeline_split"}


@dataclass(frozen=True, slots=True)
class PipelineSplit:
    """Megatron-Core's uneven-split options (all off: the even split); ``layout``: the
    parsed ``--pipeline-model-parallel-layout``."""

    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    account_for_embedding: bool = False
    account_for_loss: bool = False
    layout: LayerLayout | None = None

    @property
    def uneven(self) -> bool:
        return (self.first_stage_layers is not None or self.last_stage_layers is not None
                or self.account_for_embedding or self.account_for_loss
                or self.layout is not None)

    def virtual_pipeline_size(self, pp: int, vpp: int | None) -> int | None:
        """Chunks per stage that the layout fixes (``None`` without a layout). ``vpp``: the
        one asked for (``--vpp``), refused with a layout as Megatron-Core refuses
        ``--num-virtual-stages-per-pipeline-rank`` with it."""
        if self.layout is None:
            return None
        if vpp is not None:
            raise UsageError("sets the virtual pipeline size itself (its virtual stages / PP); "
                             "leave --vpp out (Megatron-Core: no more than one of "
                             "--num-layers-per-virtual-pipeline-stage, "
                             "--num-virtual-stages-per-pipeline-rank and this option)",
                             field=LAYOUT_OPTION)
        return self.layout.virtual_pipeline_size(pp)


def virtual_stage_layers(layers: int, p: int, v: int, split: PipelineSplit) -> list[int]:
    """Transformer layers of each virtual stage ``c·p + r`` (a list of length ``p·v``).

    Raises :class:`UsageError` naming the flag when Megatron-Core would refuse the split."""
    if split.layout is not None:
        return _from_layout(layers, p, v, split)
    first, last = split.first_stage_layers, split.last_stage_layers
    if first is not None or last is not None:
        if split.account_for_embedding or split.account_for_loss:
            raise UsageError("cannot be combined with --decoder-first/last-pipeline-num-layers "
                             "(Megatron-Core refuses standalone embedding/loss accounting with "
                             "uneven stages)",
                             field=_OPTION[EMB if split.account_for_embedding else LOSS])
        per_stage = _first_last(layers, p, v, first, last)
    elif split.account_for_embedding or split.account_for_loss:
        return _accounted(layers, p, v, split)
    else:
        if layers % (p * v):
            raise UsageError(f"{layers} layers cannot be split evenly into pp·vpp = {p}·{v} "
                             f"model chunks (uneven splits: {FIRST}, {LAST}, {EMB})",
                             field="pp")
        return [layers // (p * v)] * (p * v)
    return [per_stage[r] // v for c in range(v) for r in range(p)]


def _from_layout(layers: int, p: int, v: int, split: PipelineSplit) -> list[int]:
    """The layout's transformer layers per virtual stage (Megatron-Core's checks)."""
    lay = split.layout
    assert lay is not None
    if (split.first_stage_layers is not None or split.last_stage_layers is not None
            or split.account_for_embedding or split.account_for_loss):
        raise UsageError(f"cannot be combined with {FIRST}, {LAST}, {EMB} or {LOSS} "
                         "(Megatron-Core: the layout cannot be set with other pipeline layout "
                         "arguments)", field=LAYOUT_OPTION)
    if lay.virtual_pipeline_size(p) != v:
        raise UsageError(f"{lay.text!r} lists {len(lay.stages)} virtual stages, but PP × "
                         f"virtual pipeline size = {p} × {v} = {p * v}", field=LAYOUT_OPTION)
    lay.check(layers)
    return lay.decoder_layers()


def _first_last(layers: int, p: int, v: int, first: int | None,
                last: int | None) -> list[int]:
    """Layers per pipeline stage with ``--decoder-first/last-pipeline-num-layers``: Megatron-Core's
    checks in ``TransformerConfig.__post_init__`` in its order (first, last, middle), then
    ``get_num_layers_to_build``."""
    rest, stages = layers, p
    for flag, n, where in ((FIRST, first, "first"), (LAST, last, "last")):
        if n is None:
            continue
        if n < 1:
            raise UsageError(f"must be ≥ 1, got {n} (Megatron-Core: num_layers_in_{where}_"
                             "pipeline_stage must be larger than 0)", field=_OPTION[flag])
        if n % v:
            raise UsageError(f"the {where} stage's {n} layers are not divisible by the virtual "
                             f"pipeline size {v} (Megatron-Core)", field=_OPTION[flag])
        rest -= n
        stages -= 1
    given = FIRST if first is not None else LAST
    if p < 2:  # Megatron-Core needs first == num_layers here: the even split, a no-op
        raise UsageError("uneven pipeline stages need ≥ 2 stages", field=_OPTION[given])
    if stages == 0:
        if rest:
            raise UsageError(f"first + last = {first} + {last} must equal the {layers} layers "
                             "with 2 stages (Megatron-Core: no middle stage for the "
                             f"{rest} left)", field=_OPTION[LAST])
        assert first is not None and last is not None
        return [first, last]
    if rest < stages or rest % stages:
        raise UsageError(f"the {rest} layers left for the {stages} middle stages cannot be "
                         "split evenly, at least one each (Megatron-Core: the middle layers "
                         "must be divisible by the middle pipeline-parallel size)",
                         field=_OPTION[given])
    mid = rest // stages
    if mid % v:
        raise UsageError(f"each middle stage's {mid} layers are not divisible by the virtual "
                         f"pipeline size {v} (Megatron-Core)", field="vpp")
    return [first if first is not None else mid] + [mid] * (p - 2) + [
        last if last is not None else mid]


def _accounted(layers: int, p: int, v: int, split: PipelineSplit) -> list[int]:
    """Megatron-Core's ``get_num_layers_to_build`` with the embedding / loss counted as layers:
    ``L + e + l`` divisible by ``p``, each rank's share by ``v`` (``TransformerConfig`` checks);
    every virtual stage gets ``(L + e + l)/(p·v)``, less one on virtual stage 0 (embedding) and
    on the last (loss). That may leave none: the first virtual stage then holds only the
    embedding, the last only the output layer and loss (Llama 3 405B: 126 + 2 on 16 × 8)."""
    emb, loss = split.account_for_embedding, split.account_for_loss
    total = layers + int(emb) + int(loss)
    flag = EMB if emb else LOSS
    what = " + ".join(x for x in ("embedding" if emb else "", "loss" if loss else "") if x)
    if total % p:
        raise UsageError(f"{layers} layers + {what} = {total} cannot be split evenly over "
                         f"the {p} pipeline stages (Megatron-Core: not divisible by the "
                         "pipeline-parallel size)", field=_OPTION[flag])
    if (total // p) % v:
        raise UsageError(f"{layers} layers + {what} = {total} over {p} stages gives "
                         f"{total // p} per stage, not divisible by the virtual pipeline size "
                         f"{v} (Megatron-Core)", field=_OPTION[flag])
    counts = [total // (p * v)] * (p * v)
    if emb:
        counts[0] -= 1
    if loss:
        counts[-1] -= 1
    if len(set(counts)) == 1:  # one virtual stage, or both flags on two: the even split
        where = ("with one pipeline stage there is nothing to split" if p * v == 1 else
                 f"the split it gives, {counts[0]} layers on each of the {p * v} virtual "
                 "stages, is the even split")
        raise UsageError(f"{where}, so it would change nothing; leave it out",
                         field=_OPTION[LOSS if loss else EMB])
    return counts


def stage_layer_counts(per_virtual: list[int], p: int) -> list[int]:
    """Layers per pipeline stage (summed over its chunks)."""
    return [sum(per_virtual[r::p]) for r in range(p)]

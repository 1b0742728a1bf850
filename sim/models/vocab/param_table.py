"""Importer of per-rank parameter tables (seed 000: DeepSpeed ``GPT2ModelPipe`` + Shampoo).

Format: semicolon-separated, header ``name;module;shape;partitioning_ranks;precs``; one row per
tensor (weight and bias) of one pipeline stage's tensor-parallel shard. ``partitioning_ranks``
is the data-parallel rank owning the tensor's Shampoo work; ``precs`` lists its preconditioner
factors as ``torch.Size([m, m]), torch.Size([n, n])`` pairs (left, right) per block.

Inference (each stated in :meth:`ParamTableInfo.lines`):

- hidden ``h``: size of the LayerNorm weights (cross-checked with the embeddings' width);
- TP degree: ``3h / rows`` of the column-parallel QKV weight (assumes multi-head attention:
  Q, K, V of width h each), cross-checked with ``h / cols`` of the row-parallel projection;
- FFN hidden: rows of ``dense_h_to_4h`` × TP; vocabulary: rows of the word embedding × TP
  (Megatron's padded vocabulary); sequence length: rows of the position embedding;
- layers in this stage: distinct numeric ``module.N`` indices with transformer sub-modules;
- exact parameter counts: products of the shapes (per GPU, as stored).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sim.errors import InputError
from sim.files.inputs import read_text, split_lines
from sim.models.optimizer import ShampooBlock, ShampooPlan, block_step_flops

HEADER = ("name", "module", "shape", "partitioning_ranks", "precs")
_SIZE = re.compile(r"torch\.Size\(\[\s*([0-9]+)\s*,\s*([0-9]+)\s*\]\)")
_SHAPE = re.compile(r"^\(\s*[0-9]+\s*(,\s*[0-9]+\s*)*,?\s*\)$")
_LAYER = re.compile(r"^module\.([0-9]+)\.")
MAX_DIM = 2**40  # larger tensor dimensions are corrupt values, not real models


@dataclass(frozen=True)
class ParamTensor:
    name: str
    module: str
    shape: tuple[int, ...]
    owner: int
    precs: tuple[tuple[int, int], ...]  # (left, right) factor sizes per block
    line: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class ParamTableInfo:
    """What a parameter table tells about the model and its layout (sizes in elements)."""

    path: str
    tensors: list[ParamTensor]
    hidden: int
    tp: int
    ffn_hidden: int | None
    vocab_padded: int | None
    seq_len: int | None
    layer_ids: list[int]
    params_per_gpu: int
    params_per_layer: dict[int, int]
    embedding_params: int
    shampoo: ShampooPlan | None
    notes: list[str] = field(default_factory=list)

    @property
    def layers_in_stage(self) -> int:
        return len(self.layer_ids)

    def owner_flops(self) -> dict[int, int]:
        """Shampoo FLOPs per optimizer step for each owning DP rank (blocks as in the table)."""
        out: dict[int, int] = {}
        for t in self.tensors:
            for left, right in t.precs:
                b = ShampooBlock(t.name, t.owner, left, right)
                out[t.owner] = out.get(t.owner, 0) + block_step_flops(b)
        return dict(sorted(out.items()))

    def lines(self) -> list[str]:
        """Human-readable summary for ``simrun inspect``."""
        out = [
            f"format: per-rank parameter table ({len(self.tensors)} tensors)",
            f"hidden: {self.hidden} (LayerNorm weight size)",
            f"tensor parallel: {self.tp} (QKV rows {3 * self.hidden // self.tp} = 3·h/tp)",
            f"ffn_hidden: {self.ffn_hidden} (dense_h_to_4h rows × tp)",
            f"vocab (padded): {self.vocab_padded} (word-embedding rows × tp)",
            f"sequence length: {self.seq_len} (position-embedding rows)",
            f"layers in this stage: {self.layers_in_stage} (module indices "
            f"{', '.join(map(str, self.layer_ids))})",
            f"parameters on this GPU: {self.params_per_gpu:,} (embeddings "
            f"{self.embedding_params:,}; per layer "
            + ", ".join(f"{i}: {n:,}" for i, n in self.params_per_layer.items()) + ")",
        ]
        if self.shampoo is not None:
            n_blocks = sum(len(t.precs) for t in self.tensors)
            per_owner = ", ".join(f"rank {r}: {f:.3e}" for r, f in self.owner_flops().items())
            out.append(f"Shampoo: {n_blocks} preconditioned blocks ({2 * n_blocks} factors); "
                       f"optimizer-step FLOPs per owning DP rank: {per_owner} "
                       "(stats 4m²n + 4mn², inverse 4th roots 40·n³ per factor)")
        out.extend(self.notes)
        return out


def _parse_shape(text: str, path: str, line: int) -> tuple[int, ...]:
    if not _SHAPE.match(text):
        raise InputError(f"bad shape {text!r} (expected e.g. (768, 1024) or (1024,))",
                         file=path, line=line, field="shape")
    shape = tuple(int(x) for x in re.findall(r"[0-9]+", text))
    bad = [d for d in shape if not 1 <= d <= MAX_DIM]
    if bad:
        raise InputError(f"dimension {bad[0]} out of range [1, 2^40] in {text!r}", file=path,
                         line=line, field="shape")
    return shape


def read_param_table(path: str | Path) -> list[ParamTensor]:
    """Parse the table; raises :class:`InputError` naming file, line and column."""
    p = str(path)
    lines = split_lines(read_text(path, what="parameter table"))
    if not lines or tuple(c.strip() for c in lines[0].split(";")) != HEADER:
        raise InputError(f"header must be {';'.join(HEADER)}", file=p, line=1, field="header")
    out = []
    for no, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        cols = raw.split(";")
        if len(cols) != len(HEADER):
            raise InputError(f"expected {len(HEADER)} ';'-separated columns, got {len(cols)}",
                             file=p, line=no, field="row")
        name, module, shape, owner, precs = (c.strip() for c in cols)
        if not re.fullmatch(r"[0-9]{1,18}", owner):
            raise InputError(f"must be a non-negative integer, got {owner!r}", file=p, line=no,
                             field="partitioning_ranks")
        sizes = [(int(a), int(b)) for a, b in _SIZE.findall(precs)]
        if any(a != b for a, b in sizes) or len(sizes) % 2:
            raise InputError("expected pairs of square factors (left, right) per block",
                             file=p, line=no, field="precs")
        if any(not 1 <= a <= MAX_DIM for a, _ in sizes):
            raise InputError("factor sizes must be in [1, 2^40]", file=p, line=no, field="precs")
        pairs = tuple((sizes[i][0], sizes[i + 1][0]) for i in range(0, len(sizes), 2))
        out.append(ParamTensor(name, module, _parse_shape(shape, p, no), int(owner), pairs, no))
    if not out:
        raise InputError("no parameter rows", file=p, line=2, field="rows")
    return out


def _find(tensors: list[ParamTensor], suffix: str, ndim: int) -> ParamTensor | None:
    for t in tensors:
        if t.name.endswith(suffix) and len(t.shape) == ndim:
            return t
    return None


def import_param_table(path: str | Path) -> ParamTableInfo:
    """Read a parameter table and infer sizes, TP degree, layers and Shampoo work."""
    p = str(path)
    tensors = read_param_table(path)
    norm = next((t for t in tensors if "LayerNorm" in t.module or "RMSNorm" in t.module), None)
    if norm is None:
        raise InputError("no LayerNorm tensor: cannot infer the hidden size", file=p,
                         field="module")
    h = norm.shape[0]
    qkv = _find(tensors, "query_key_value", 2)
    if qkv is None or (3 * h) % qkv.shape[0]:
        raise InputError("no QKV weight of 3·h/tp rows: cannot infer the TP degree", file=p,
                         line=qkv.line if qkv else None, field="shape" if qkv else "name")
    tp = 3 * h // qkv.shape[0]
    proj = _find(tensors, "attention.dense", 2)
    if proj is not None and proj.shape[1] * tp != h:
        raise InputError(f"row-parallel projection {proj.shape} disagrees with tp={tp}",
                         file=p, line=proj.line, field="shape")
    fc1 = _find(tensors, "dense_h_to_4h", 2)
    emb = _find(tensors, "word_embeddings", 2)
    pos = _find(tensors, "position_embeddings", 2)
    layer_params: dict[int, int] = {}
    emb_params = 0
    for t in tensors:
        m = _LAYER.match(t.name)
        if m:
            layer_params[int(m.group(1))] = layer_params.get(int(m.group(1)), 0) + t.numel
        elif "embed" in t.name:
            emb_params += t.numel
    layer_ids = sorted(layer_params)
    notes = ["heads: not recorded in a parameter table (give --heads)",
             "total layers: only this stage's layers are listed (give --layers or --pp)"]
    if emb is not None and layer_ids and layer_ids[0] == 2:
        notes.append("stage: holds the word embedding and layers start at module index 2 "
                     "(DeepSpeed GPT2ModelPipe: 0 = embedding, 1 = transpose) → first stage")
    return ParamTableInfo(
        path=p, tensors=tensors, hidden=h, tp=tp,
        ffn_hidden=fc1.shape[0] * tp if fc1 else None,
        vocab_padded=emb.shape[0] * tp if emb else None,
        seq_len=pos.shape[0] if pos else None,
        layer_ids=layer_ids, params_per_gpu=sum(t.numel for t in tensors),
        params_per_layer={i: layer_params[i] for i in layer_ids}, embedding_params=emb_params,
        shampoo=_shampoo_plan(tensors, layer_ids), notes=notes,
    )


def _shampoo_plan(tensors: list[ParamTensor], layer_ids: list[int]) -> ShampooPlan | None:
    """Shampoo blocks of one layer (the first; the layers of a stage are identical) and of the
    non-layer tensors, with their owners."""
    if not any(t.precs for t in tensors):
        return None
    first = f"module.{layer_ids[0]}." if layer_ids else None
    layer, other = [], []
    for t in tensors:
        blocks = [ShampooBlock(t.name, t.owner, a, b) for a, b in t.precs]
        if first and t.name.startswith(first):
            layer += blocks
        elif not _LAYER.match(t.name):
            other += blocks
    return ShampooPlan(tuple(layer), tuple(other))

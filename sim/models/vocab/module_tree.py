"""Importer of Megatron-Core module trees (seed 001: an indented ``Module:`` / ``Submodule:`` dump).

Each node is a ``Submodule: <name> (<Type>)`` line followed, one indent deeper, by
``Module: <Type>`` and its children. The tree gives the structure — transformer layer count,
attention and MLP kinds, norm type, learned or rotary positions, output layer, MoE experts —
but no sizes: hidden, heads, FFN, vocabulary and sequence length must come from flags or a
model config (:func:`to_model_spec`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sim.errors import InputError
from sim.files.inputs import read_text, split_lines
from sim.models.vocab.spec import ModelSpec, MoESpec

_SUB = re.compile(r"^(\s*)Submodule:\s*(\S+)\s*\(([^)]*)\)\s*$")
_MOD = re.compile(r"^(\s*)Module:\s*(\S+)\s*$")


@dataclass
class Node:
    name: str
    type: str
    line: int
    children: list[Node] = field(default_factory=list)

    def child(self, name: str) -> Node | None:
        return next((c for c in self.children if c.name == name), None)

    def find(self, name: str) -> Node | None:
        """First descendant (depth-first, pre-order) named ``name``; iterative, so any depth."""
        todo = list(reversed(self.children))
        while todo:
            c = todo.pop()
            if c.name == name:
                return c
            todo.extend(reversed(c.children))
        return None


@dataclass
class ModuleTreeInfo:
    path: str
    root_type: str
    layers: int
    layer_type: str
    norm: str  # layernorm | rmsnorm
    position_embedding: str  # learned | rope | none
    attention: str
    mlp: str
    has_output_layer: bool
    moe_experts: int | None
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [
            f"format: Megatron-Core module tree ({self.root_type})",
            f"layers: {self.layers} × {self.layer_type}",
            f"attention: {self.attention}; MLP: {self.mlp}"
            + (f" ({self.moe_experts} experts listed)" if self.moe_experts else ""),
            f"norm: {self.norm}; position embedding: {self.position_embedding}; output layer: "
            + ("present" if self.has_output_layer else "absent"),
            "sizes (hidden, heads, ffn_hidden, vocab, seq_len) are not in a module tree: "
            "give them as flags or in a model spec",
            *self.notes,
        ]


def parse_tree(path: str | Path) -> Node:
    """Parse the indented dump into a tree; raises :class:`InputError` naming the line."""
    p = str(path)
    lines = split_lines(read_text(path, what="module tree"))
    root: Node | None = None
    stack: list[tuple[int, Node]] = []  # (indent of the node's Submodule line, node)
    for no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        m = _SUB.match(raw)
        if m:
            indent = len(m.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            if not stack:
                raise InputError("Submodule outside any Module", file=p, line=no,
                                 field="Submodule")
            node = Node(m.group(2), m.group(3), no)
            stack[-1][1].children.append(node)
            stack.append((indent, node))
            continue
        m = _MOD.match(raw)
        if m is None:
            raise InputError("expected 'Module: Type' or 'Submodule: name (Type)'", file=p,
                             line=no, field="line")
        if root is None:
            root = Node("", m.group(2), no)
            stack = [(-1, root)]
        elif stack and stack[-1][1].type != m.group(2):
            raise InputError(f"Module type {m.group(2)} does not match its Submodule line "
                             f"({stack[-1][1].type})", file=p, line=no, field="Module")
    if root is None:
        raise InputError("no 'Module:' line", file=p, line=1, field="Module")
    return root


def import_module_tree(path: str | Path) -> ModuleTreeInfo:
    """Structure of a Megatron-Core GPT model from its module tree."""
    p = str(path)
    root = parse_tree(path)
    layers_node = root.find("layers")
    if layers_node is None or not layers_node.children:
        raise InputError("no 'layers' ModuleList of transformer layers found", file=p,
                         field="layers")
    layers = layers_node.children
    types = sorted({c.type for c in layers})
    first = layers[0]
    norm_node = first.child("input_layernorm") or first.find("input_layernorm")
    norm_type = norm_node.type if norm_node else "?"
    norm = "rmsnorm" if "RMS" in norm_type.upper() else "layernorm"
    notes = []
    if norm_node is not None and norm_node.type in ("IdentityOp", "IdentityFuncOp"):
        notes.append("input_layernorm is fused into linear_qkv (TELayerNormColumnParallelLinear)"
                     "; norm type assumed layernorm")
    emb = root.child("embedding")
    position = "none"
    if emb is not None and emb.child("position_embeddings") is not None:
        position = "learned"
    if root.find("rotary_pos_emb") is not None:
        position = "rope"
    if root.child("output_layer") is not None:
        notes.append("output_layer present: whether it shares the word-embedding weight is not "
                     "visible in a module tree (assumed tied, Megatron's default; set "
                     "tied_embeddings in a model spec otherwise)")
    attn = first.child("self_attention")
    mlp = first.child("mlp")
    experts = None
    if mlp is not None and "MoE" in mlp.type:
        local = mlp.find("local_experts")
        experts = len(local.children) if local is not None else None
        notes.append("MoE layer: expert count as listed (local experts of one EP rank)")
    return ModuleTreeInfo(
        path=p, root_type=root.type, layers=len(layers), layer_type="/".join(types),
        norm=norm, position_embedding=position,
        attention=attn.type if attn else "none", mlp=mlp.type if mlp else "none",
        has_output_layer=root.child("output_layer") is not None, moe_experts=experts,
        notes=notes,
    )


def to_model_spec(info: ModuleTreeInfo, *, name: str, hidden: int, heads: int, vocab: int,
                  seq_len: int, ffn_hidden: int | None = None, kv_heads: int | None = None,
                  top_k: int | None = None) -> ModelSpec:
    """A :class:`ModelSpec` with the tree's structure and the given sizes."""
    moe = None
    if info.moe_experts:
        moe = MoESpec(info.moe_experts, top_k or 1)
    return ModelSpec(
        name=name, layers=info.layers, hidden=hidden, heads=heads, vocab=vocab, seq_len=seq_len,
        ffn_hidden=ffn_hidden or 0, kv_heads=kv_heads or 0, norm=info.norm,
        position_embedding="rope" if info.position_embedding == "rope" else "learned",
        moe=moe,
    )

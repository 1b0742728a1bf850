"""From a layer's forward-order sequence of compute blocks and communication operators to rows.

A layer is described as in Megatron's code: compute blocks separated by *conjugate*
communication operators — an operator with a forward collective and the collective its
autograd backward runs (``f``: identity / all-reduce; ``g``: all-reduce / identity; with
sequence parallelism ``ḡ``: all-gather / reduce-scatter and ``g``: reduce-scatter / all-gather;
MoE token dispatch: all-to-all / all-to-all).

A row (one :class:`~sim.program.workload.Layer`) runs ``forward compute → forward comm`` and, in
backward (rows walked in reverse), ``input-grad compute → comm`` then ``weight-grad compute →
comm``. An operator between blocks ``i`` and ``i+1`` therefore puts its forward collective after
block ``i``'s forward and its backward collective after block ``i+1``'s input-gradient compute —
exactly where autograd runs them. When a slot is already taken, an empty row carries the comm.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.comm import Comm
from sim.models.vocab.ops import Op, OpKind, as_recompute


@dataclass
class Block:
    """Compute of one row: forward, input-gradient and weight-gradient operators (per GPU).

    ``params`` / ``expert_params``: parameters on this GPU whose gradients the block produces
    (dense parameters sync in the DP group, expert parameters in the DP_EP group);
    ``fp8_params`` / ``fp8_expert_params``: those of them kept in FP8 with Megatron-Core's
    ``--fp8-param-gather`` (the TE linears' weights, :mod:`sim.models.features.fp8_params`).
    """

    name: str
    fwd: tuple[Op, ...] = ()
    ig: tuple[Op, ...] = ()
    wg: tuple[Op, ...] = ()
    params: int = 0
    expert_params: int = 0
    first_fwd: tuple[Op, ...] = ()  # once per iteration, in the first microbatch's forward
    fp8_params: int = 0
    fp8_expert_params: int = 0

    def fprop_gemm(self) -> Op | None:
        """The block's forward GEMM of shape ``(m, k, n)`` (a linear's fprop), if any."""
        return next((o for o in self.fwd if o.kind is OpKind.GEMM and len(o.shape) == 3), None)


@dataclass(frozen=True)
class Conj:
    """A communication operator: ``fwd`` in the forward pass, ``bwd`` in the backward pass."""

    fwd: Comm | None = None
    bwd: Comm | None = None


@dataclass
class Row:
    """A generated row before timing: operators and communications of its three phases."""

    name: str
    fwd: tuple[Op, ...] = ()
    fwd_comm: Comm | None = None
    ig: tuple[Op, ...] = ()
    ig_comm: Comm | None = None
    wg: tuple[Op, ...] = ()
    wg_comm: Comm | None = None
    params: int = 0
    expert_params: int = 0
    tags: dict[str, int] = field(default_factory=dict)
    # --tp-comm-overlap (sim.models.features.tp_overlap): per phase, (comm, name of the GEMM op of
    # the phase it is pipelined with, Transformer Engine's overlap method)
    fwd_ovl: tuple[tuple[Comm, str, str], ...] = ()
    ig_ovl: tuple[tuple[Comm, str, str], ...] = ()
    wg_ovl: tuple[tuple[Comm, str, str], ...] = ()
    first_fwd: tuple[Op, ...] = ()  # once per iteration, in the first microbatch's forward
    fp8_params: int = 0  # of params / expert_params: FP8 weights (--fp8-param-gather)
    fp8_expert_params: int = 0

    def ops(self) -> tuple[Op, ...]:
        return self.fwd + self.ig + self.wg


def renamed(row: Row, name: str, tags: dict[str, int]) -> Row:
    """A copy of ``row`` with ``name`` and ``tags`` (``dataclasses.replace`` without its
    per-call field introspection: a sweep copies layers' rows about 10⁵ times)."""
    out = object.__new__(Row)
    out.__dict__.update(row.__dict__, name=name, tags=tags)
    return out


def rows_from_items(items: list[Block | Conj]) -> list[Row]:
    """Rows for a forward-order sequence of blocks and operators (see module docstring)."""
    rows: list[Row] = []
    pending_bwd: list[Comm] = []  # backward comms waiting for the next block's input-grad slot
    for item in items:
        if isinstance(item, Block):
            row = Row(item.name, fwd=item.fwd, ig=item.ig, wg=item.wg, params=item.params,
                      expert_params=item.expert_params, first_fwd=item.first_fwd,
                      fp8_params=item.fp8_params, fp8_expert_params=item.fp8_expert_params)
            if pending_bwd:
                # Backward runs this block's input grad, then the operators' backward comms in
                # reverse forward order: the last operator's comm goes in this row, the earlier
                # ones in comm-only rows placed before it (walked after it in backward).
                row.ig_comm = pending_bwd.pop()
                rows.extend(Row(f"{item.name}_bwd_comm", ig_comm=c) for c in pending_bwd)
                pending_bwd = []
            rows.append(row)
            continue
        if item.fwd is not None:
            if rows and rows[-1].fwd_comm is None:
                rows[-1].fwd_comm = item.fwd
            else:
                name = rows[-1].name + "_fwd_comm" if rows else "fwd_comm"
                rows.append(Row(name, fwd_comm=item.fwd))
        if item.bwd is not None:
            pending_bwd.append(item.bwd)
    # Operators at the end of the sequence: their backward comms run first, latest first.
    rows.extend(Row("bwd_comm", ig_comm=c) for c in pending_bwd)
    return rows


def recompute_rows(rows: list[Row]) -> list[Row]:
    """Full activation recomputation: rows that re-run ``rows``' forward (compute and comms)
    at the start of their backward. Returned in list order (append after ``rows``): the
    backward walks rows in reverse, so the re-run happens in forward order, first."""
    out = [
        Row("recompute_" + r.name, ig=as_recompute(r.fwd), ig_comm=r.fwd_comm,
            ig_ovl=tuple((c, "recompute_" + op, how) for c, op, how in r.fwd_ovl))
        for r in rows
        if r.fwd or r.fwd_comm is not None or r.fwd_ovl
    ]
    out.reverse()
    return out

"""The pipeline timeline figure (``--plot timeline.png|.svg|.pdf``).

One row per shown rank (default: one per pipeline stage), stage 0 at the top. Each row has a
compute lane (per-op boxes coloured by kind, labelled with the microbatch — ``3.1`` = microbatch
3, chunk 1 for interleaved schedules, where later chunks are also drawn in lighter shades —,
hatched grey bubbles, exposed-communication waits in the group's colour) and a thin lane below
it with the communication on the wire (TP/EP collectives, pipeline sends, DP gradient
reductions). The data is :func:`sim.viz.boxes.timeline_boxes`; the label placement is computed
from the figure geometry (:func:`label_plan`) and returned for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.engine.result import SimResult
from sim.errors import UsageError
from sim.viz.boxes import Box, timeline_boxes
from sim.viz.mpl import DPI, hex_rgb, lighten, luminance, render
from sim.viz.select import select_ranks

COLORS = {
    "forward": "#3274a1", "backward": "#e1812c", "weight_grad": "#3a923a",
    "compute": "#8c8c8c", "optimizer": "#845b9e", "bubble": "#e6e6e6",
    "TP": "#c03d3e", "EP": "#b8b23a", "PP": "#7b4f2c", "DP": "#2aa6b8", "DP_EP": "#4f6d7a",
    "EMB": "#9c6b98", "ETP": "#d9704a", "CP": "#d45fa8",
}
"""Every :class:`~sim.comm.GroupKind` has a colour (tests/test_plots_groups.py checks it)."""
LEGEND = [
    ("forward", "forward"), ("backward", "backward (input-grad + weight-grad)"),
    ("weight_grad", "weight-grad only"), ("compute", "iteration-level compute"),
    ("optimizer", "optimizer"), ("bubble", "idle (waiting for other stages)"),
    ("TP", "TP comm"), ("CP", "CP comm"), ("EP", "EP comm"), ("ETP", "ETP comm"),
    ("PP", "PP comm"), ("DP", "DP comm"), ("DP_EP", "DP_EP comm"), ("EMB", "embedding-grad comm"),
]
OP_KINDS = ("forward", "backward", "weight_grad")
CHUNK_TINT = 0.4
"""How far the last model chunk's op colour is blended towards white (earlier: in between)."""
SPLIT_LEGEND = {"backward": "B: input-grad", "weight_grad": "W: weight-grad (separate pass)"}
"""Legend of the split-backward schedules (zb-h1, zb-h2, zb-v): W passes are their own boxes."""

# geometry (pixels)
LEFT_PX, RIGHT_PX, TOP_PX, BOTTOM_PX = 140, 24, 64, 116  # left: "stage 15 · rank 65535" at 8 pt
ROW_PX = 44
COMPUTE_FRAC, COMM_FRAC = 0.58, 0.2  # lane heights as fractions of a row
LABEL_PT, MIN_LABEL_PT = 7.0, 5.0


@dataclass(frozen=True, slots=True)
class Label:
    """A microbatch label drawn inside an op box (``rotated``: vertical text)."""

    row: int
    text: str
    x_ns: float
    size_pt: float
    rotated: bool
    kind: str = "forward"
    chunk: int = 0


@dataclass
class TimelinePlot:
    """What was drawn: the boxes, the labels, and the image size in pixels."""

    ranks: list[int]
    boxes: list[Box]
    labels: list[Label]
    width_px: int
    height_px: int


def time_unit(iteration_ns: int) -> tuple[str, float]:
    """Axis unit and ns → unit factor: ms for real iterations (≥ 1 ms), else µs or ns."""
    if iteration_ns >= 1_000_000:
        return "ms", 1e-6
    if iteration_ns >= 1_000:
        return "µs", 1e-3
    return "ns", 1.0


def figure_size(rows: int, width_px: int = 1600) -> tuple[int, int]:
    """Image size (pixels) of a timeline with ``rows`` rows."""
    return width_px, TOP_PX + BOTTOM_PX + ROW_PX * max(rows, 1)


def label_plan(boxes: Sequence[Box], iteration_ns: int, axes_width_px: float, with_chunk: bool,
               dpi: int = DPI) -> list[Label]:
    """Where each op box's microbatch label goes: horizontal at 7 pt if it fits, else vertical
    (down to 5 pt) if the box is at least one text line wide, else no label."""
    out = []
    lane_px = ROW_PX * COMPUTE_FRAC
    for b in boxes:
        if b.lane != "compute" or b.kind not in OP_KINDS:
            continue
        text = ("W" if b.kind == "weight_grad" else "") + b.label(with_chunk)
        w_px = b.duration_ns / iteration_ns * axes_width_px
        x = (b.start_ns + b.end_ns) / 2
        for pt in (LABEL_PT, 6.0, MIN_LABEL_PT):
            em = pt * dpi / 72
            if len(text) * 0.62 * em + 2 <= w_px and em <= lane_px:
                out.append(Label(b.row, text, x, pt, False, b.kind, b.chunk))
                break
        else:
            for pt in (LABEL_PT, 6.0, MIN_LABEL_PT):
                em = pt * dpi / 72
                if em * 1.05 <= w_px and len(text) * 0.62 * em + 2 <= lane_px:
                    out.append(Label(b.row, text, x, pt, True, b.kind, b.chunk))
                    break
    return out


def _color(b: Box, vpp: int) -> tuple[float, float, float]:
    kind = b.kind[len("exposed_"):] if b.kind.startswith("exposed_") else b.kind
    base = COLORS.get(kind, "#000000")
    if b.kind in OP_KINDS and vpp > 1 and b.chunk > 0:
        # at most 40% towards white: the lightest chunk keeps its hue, never the idle grey
        return lighten(base, CHUNK_TINT * b.chunk / (vpp - 1))
    return hex_rgb(base)


def plot_window(boxes: Sequence[Box], iteration_ns: int,
                window_ms: tuple[float, float] | None = None,
                microbatches: int | None = None) -> tuple[int, int]:
    """The drawn window ``[lo, hi)`` (ns): ``window_ms`` (clipped to the iteration), or from the
    first op of microbatch 0 to the end of the last op of microbatches ``0..microbatches-1``
    on any row, or the whole iteration."""
    if window_ms is not None:
        lo, hi = round(window_ms[0] * 1e6), min(round(window_ms[1] * 1e6), iteration_ns)
        if lo >= hi:
            raise UsageError(f"the window starts after the iteration's end "
                             f"({iteration_ns / 1e6:,.3f} ms)", field="plot_window")
        return lo, hi
    if microbatches is not None:
        ops = [b for b in boxes if b.kind in OP_KINDS and 0 <= b.microbatch < microbatches]
        if ops:
            return min(b.start_ns for b in ops), max(b.end_ns for b in ops)
    return 0, iteration_ns


def clip_boxes(boxes: Sequence[Box], lo: int, hi: int) -> list[Box]:
    """The boxes that overlap ``[lo, hi)``, cut to it."""
    return [replace(b, start_ns=max(b.start_ns, lo), end_ns=min(b.end_ns, hi))
            for b in boxes if b.end_ns > lo and b.start_ns < hi]


def plot_timeline(result: SimResult, path: str | Path, *, ranks: str | Sequence[int] | None = None,
                  report: dict[str, Any] | None = None, width_px: int = 1600,
                  flag: str = "--plot", window_ms: tuple[float, float] | None = None,
                  microbatches: int | None = None) -> TimelinePlot:
    """Draw the timeline of ``result`` (needs ``record_spans=True``) to ``path`` (.png/.svg/.pdf).

    ``ranks``: a ``--trace-ranks`` value or a sequence of ranks (default: one per stage);
    ``window_ms`` / ``microbatches``: draw only a window (:func:`plot_window`).
    """
    if not result.spans:
        raise ValueError("the result has no spans: simulate with record_spans=True")
    chosen = select_ranks(result, ranks if ranks is None or isinstance(ranks, str)
                          else tuple(ranks))
    boxes = timeline_boxes(result, chosen)
    lo, hi = plot_window(boxes, result.iteration_ns, window_ms, microbatches)
    if (lo, hi) != (0, result.iteration_ns):
        boxes = clip_boxes(boxes, lo, hi)
    w, h = figure_size(len(chosen), width_px)
    prog = result.program
    with_chunk = prog.vpp > 1
    labels = label_plan(boxes, hi - lo, w - LEFT_PX - RIGHT_PX, with_chunk)
    stage_of = {r.rank: r.stage for r in result.ranks}

    def draw(fig):
        # matplotlib is heavy: loaded only when a figure is drawn
        from matplotlib.collections import PolyCollection
        from matplotlib.patches import Patch

        ax = fig.add_axes((LEFT_PX / w, BOTTOM_PX / h, (w - LEFT_PX - RIGHT_PX) / w,
                           (h - TOP_PX - BOTTOM_PX) / h))
        unit, scale = time_unit(result.iteration_ns)
        n = len(chosen)
        groups: dict[tuple[str, bool], tuple[list, list]] = {}
        present = set()
        for b in boxes:
            y0 = b.row + (0.08 if b.lane == "compute" else 0.08 + COMPUTE_FRAC + 0.04)
            y1 = y0 + (COMPUTE_FRAC if b.lane == "compute" else COMM_FRAC)
            x0, x1 = b.start_ns * scale, b.end_ns * scale
            style = ("bubble" if b.kind == "bubble" else
                     "op" if b.kind in OP_KINDS else "flat", b.lane == "comm")
            verts, cols = groups.setdefault(style, ([], []))
            verts.append(((x0, y0), (x0, y1), (x1, y1), (x1, y0)))
            cols.append(_color(b, prog.vpp))
            present.add(b.kind[len("exposed_"):] if b.kind.startswith("exposed_") else b.kind)
        for (style, _comm), (verts, cols) in sorted(groups.items()):
            kw: dict[str, Any] = {"facecolors": cols, "linewidths": 0, "antialiased": True}
            if style == "op":
                kw.update(edgecolors="white", linewidths=0.4)
            elif style == "bubble":
                kw.update(edgecolors="#a0a0a0", hatch="///", linewidths=0)
            ax.add_collection(PolyCollection(verts, **kw))
        for lab in labels:
            face = _color(Box(0, "compute", 0, 1, lab.kind, 0, lab.chunk), prog.vpp)
            b_color = "white" if luminance(face) < 0.45 else "black"
            y = lab.row + 0.08 + COMPUTE_FRAC / 2
            ax.text(lab.x_ns * scale, y, lab.text, ha="center", va="center",
                    fontsize=lab.size_pt, rotation=90 if lab.rotated else 0, color=b_color,
                    clip_on=True)
        ax.set_xlim(lo * scale, hi * scale)
        ax.set_ylim(n, 0)
        ax.set_yticks([i + 0.08 + COMPUTE_FRAC / 2 for i in range(n)])
        ax.set_yticklabels([f"stage {stage_of[r]} · rank {r}" for r in chosen])
        ax.tick_params(axis="y", length=0)
        ax.set_xlabel(f"time ({unit})")
        ax.grid(axis="x", color="#dddddd", linewidth=0.5)
        ax.set_axisbelow(True)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        split = prog.schedule_type.splits_backward
        handles = [Patch(facecolor=COLORS[k], edgecolor="#a0a0a0" if k == "bubble" else "none",
                         hatch="///" if k == "bubble" else None,
                         label=SPLIT_LEGEND.get(k, text) if split else text)
                   for k, text in LEGEND if k in present]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -46 / (h - TOP_PX
                  - BOTTOM_PX)), ncol=min(len(handles), 6), frameon=False)
        window = ("" if (lo, hi) == (0, result.iteration_ns) else
                  f" · shown {lo * scale:,.3f}–{hi * scale:,.3f} {unit}")
        fig.text(LEFT_PX / w, 1 - 18 / h, _title(result, report) + window, ha="left", va="top",
                 fontsize=10)
        fig.text(LEFT_PX / w, 1 - 38 / h, _subtitle(result, report), ha="left", va="top",
                 fontsize=8, color="#444444")
        fig.text(LEFT_PX / w, 8 / h, _lanes_note(result), ha="left", va="bottom",
                 fontsize=7.5, color="#444444")
        return None

    render(draw, path, width_px=w, height_px=h, flag=flag)
    return TimelinePlot(chosen, boxes, labels, w, h)


def _title(result: SimResult, report: dict[str, Any] | None) -> str:
    prog = result.program
    name = Path(str((report or {}).get("workload") or prog.source or "simulated iteration")).name
    sched = f"{prog.schedule}, p = {prog.pp}, M = {prog.microbatches}"
    if prog.vpp > 1:
        sched += f", v = {prog.vpp} chunks"
    unit, scale = time_unit(result.iteration_ns)
    return f"{name} — {sched}; iteration {result.iteration_ns * scale:,.3f} {unit}"


def _subtitle(result: SimResult, report: dict[str, Any] | None) -> str:
    prog = result.program
    lay = prog.layout  # the real DP and CP (prog.dp is DP×CP)
    cp = f" × CP {lay.cp}" if lay.cp > 1 else ""
    parts = [f"TP {lay.tp} × PP {lay.pp} × DP {lay.dp}{cp} = {prog.world_size} GPUs"]
    if report:
        if report.get("topology"):
            parts.append(Path(str(report["topology"])).name)
        parts.append(f"bubble fraction {report['bubble_fraction']:.3f} (ideal "
                     f"{report['ideal_bubble_formula']} = {report['ideal_bubble_fraction']:.3f})")
    return " · ".join(parts)


def _lanes_note(result: SimResult) -> str:
    note = "upper lane: compute stream — op boxes labelled with the microbatch"
    note += (".chunk (later chunks lighter)" if result.program.vpp > 1 else "")
    typ = result.program.schedule_type
    if typ.splits_backward:
        note += ", weight-grad passes W<microbatch> in their own colour"
    elif typ.bidirectional:
        note += (", chunk = direction; an overlapped F&B op is its F box then its B box; "
                 "deferred weight-grad passes W in their own colour")
    note += "; a communication colour there = the stream waits for it (exposed). "
    return note + "Thin lane: communication on the wire (blocking TP/EP, pipeline sends, " \
                  "asynchronous DP reductions)."

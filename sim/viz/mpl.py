"""Shared matplotlib plumbing: lazy import, fixed style, deterministic atomic saving.

matplotlib is imported only inside these functions (never at ``simrun`` start-up). Figures are
plain :class:`matplotlib.figure.Figure` objects on the Agg canvas — no pyplot, no global
backend switch, works headless. Saved files are byte-identical across runs: PNG without the
``Software`` tag, SVG without a date and with a fixed ``svg.hashsalt``, PDF without creation
date / producer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.errors import UsageError
from sim.files.outputs import atomic_write

FORMATS = ("png", "svg", "pdf")
DPI = 100

# Style fixed here so a user's matplotlibrc cannot change the output.
RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "svg.hashsalt": "simrun",
    "svg.fonttype": "path",
    "pdf.fonttype": 42,
    "hatch.linewidth": 0.6,
    "path.simplify": True,
}

METADATA = {"png": {"Software": None}, "svg": {"Date": None},
            "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}}


def figure_format(path: str | Path, flag: str) -> str:
    """``png``/``svg``/``pdf`` from the file suffix, else a :class:`UsageError` naming ``flag``."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise UsageError(f"cannot tell the image format of {str(path)!r}: use a .png, .svg or "
                         ".pdf file name", field=flag)
    return fmt


def render(draw: Callable[[Any], Any], path: str | Path, *, width_px: int, height_px: int,
           flag: str, dpi: int = DPI) -> Any:
    """Create a ``width_px × height_px`` figure, call ``draw(fig)``, save it atomically.

    Returns what ``draw`` returned (the data it plotted, for tests).
    """
    fmt = figure_format(path, flag)
    # matplotlib is heavy: loaded only when a figure is drawn
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(RC)
        fig = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
        FigureCanvasAgg(fig)
        out = draw(fig)
        atomic_write(path, lambda f: fig.savefig(f, format=fmt, dpi=dpi,
                                                 metadata=METADATA[fmt]),
                     binary=True, flag=flag)
    return out


def luminance(rgb: tuple[float, float, float]) -> float:
    r, g, b = rgb[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def hex_rgb(color: str) -> tuple[float, float, float]:
    c = color.lstrip("#")
    return tuple(int(c[i:i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


def lighten(color: str, amount: float) -> tuple[float, float, float]:
    """Blend ``color`` (hex) towards white by ``amount`` in [0, 1]."""
    r, g, b = hex_rgb(color)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)

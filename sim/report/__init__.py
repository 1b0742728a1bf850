"""Reports: the JSON document (fixed schema, units in keys) and the terminal table."""

from sim.report.build import build_report

__all__ = ["build_report", "format_report"]


def __getattr__(name: str):
    """``format_report`` (:mod:`sim.report.text`), loaded when a run prints its table."""
    if name == "format_report":
        from sim.report.text import format_report

        return format_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

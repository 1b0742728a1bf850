"""Reports: the JSON document (fixed schema, units in keys) and the terminal table."""

from sim.report.build import build_report
from sim.report.text import format_report

__all__ = ["build_report", "format_report"]

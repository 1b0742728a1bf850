"""Typed reading of one YAML mapping of a topology file: every getter checks type and range
and names the file, line and dotted key of a bad value (:class:`~sim.errors.InputError`), and
:meth:`Section.done` refuses keys it did not read.
"""

from __future__ import annotations

import math
from typing import Any

from sim.errors import InputError
from sim.files.inputs import INT64_MAX, show

# Bounds that keep transfer times finite (far beyond any real machine).
MIN_RATE = 1e-6  # GB/s or Gb/s: slower links would make transfer times overflow
MAX_RATE = 1e6  # GB/s or Gb/s (1 PB/s): faster links would make 1 GiB take under 1 ns
MIN_EFFICIENCY = 1e-3


class Section:
    """A mapping being read: typed getters, and a check that no unknown key is left."""

    def __init__(self, reader: Reader, data: Any, path: tuple):
        self.r = reader
        self.path = path
        if not isinstance(data, dict):
            self.r.fail(path, f"expected a mapping, got {kind(data)}")
        self.data = data
        self.used: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, required: bool = True, default: Any = None) -> Any:
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                self.r.fail(self.path + (key,), "missing required key", at=self.path)
            return default
        return self.data[key]

    def str(self, key: str, default: str | None = None) -> str:
        v = self.raw(key, default is None, default)
        if not isinstance(v, str):
            self.r.fail(self.path + (key,), f"expected a string, got {kind(v)}")
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.raw(key, False, default)
        if not isinstance(v, bool):
            self.r.fail(self.path + (key,), f"expected true or false, got {show(v)}")
        return v

    def int(self, key: str, default: int | None = None, minimum: int = 1,
            maximum: int = INT64_MAX) -> int:
        v = self.raw(key, default is None, default)
        if isinstance(v, bool) or not isinstance(v, int):
            self.r.fail(self.path + (key,), f"expected an integer, got {show(v)}")
        if v < minimum:
            self.r.fail(self.path + (key,), f"must be ≥ {minimum}, got {show(v)}")
        if v > maximum:
            self.r.fail(self.path + (key,), f"must be ≤ {maximum}, got {show(v)}")
        return v

    def num(self, key: str, default: float | None = None, positive: bool = True,
            maximum: float | None = None, minimum: float | None = None) -> float:
        v = self.raw(key, default is None, default)
        try:
            f = float(v) if not isinstance(v, bool) and isinstance(v, (int, float)) else None
        except OverflowError:  # an integer beyond the float range
            f = None
        if f is None or not math.isfinite(f):
            self.r.fail(self.path + (key,), f"expected a finite number, got {show(v)}")
        if positive and f <= 0:
            self.r.fail(self.path + (key,), f"must be > 0, got {show(v)}")
        if not positive and f < 0:
            self.r.fail(self.path + (key,), f"must be ≥ 0, got {show(v)}")
        if minimum is not None and f < minimum:
            self.r.fail(self.path + (key,), f"must be ≥ {minimum:g}, got {show(v)}")
        if maximum is not None and f > maximum:
            self.r.fail(self.path + (key,), f"must be ≤ {maximum:g}, got {show(v)}")
        return f

    def rate(self, key: str, default: float | None = None) -> float:
        """A bandwidth (GB/s or Gb/s) or peak rate in [:data:`MIN_RATE`, :data:`MAX_RATE`]."""
        return self.num(key, default, minimum=MIN_RATE, maximum=MAX_RATE)

    def ns(self, key: str) -> int:
        """A latency in ns (≥ 0, integer), default 0."""
        return self.int(key, 0, minimum=0)

    def eff(self, key: str = "efficiency") -> float:
        return self.num(key, 1.0, maximum=1.0, minimum=MIN_EFFICIENCY)

    def int_list(self, key: str, length: int, upper: int, default: tuple[int, ...]) -> tuple:
        v = self.raw(key, False, None)
        if v is None:
            return default
        p = self.path + (key,)
        if not isinstance(v, list) or len(v) != length:
            self.r.fail(p, f"expected a list of {length} integers, got {show(v)}")
        for x in v:
            if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < upper:
                self.r.fail(p, f"entries must be integers in [0, {upper}), got {show(x)}")
        return tuple(v)

    def sub(self, key: str, required: bool = True) -> Section | None:
        v = self.raw(key, required, None)
        return None if v is None else Section(self.r, v, self.path + (key,))

    def done(self) -> None:
        for k in self.data:
            if k not in self.used:
                known = ", ".join(sorted(map(str, self.used)))
                self.r.fail(self.path + (k,), f"unknown key (known keys here: {known})")


class Reader:
    """The file being read and the line of every key path; raises the errors."""

    def __init__(self, path: str, lines: dict[tuple, int], overrides: tuple = ()):
        self.file = path
        self.lines = lines
        self.overrides = overrides  # sim.topology.overrides.Override: values from --set

    def fail(self, path: tuple, message: str, at: tuple | None = None) -> None:
        dotted = ".".join(str(p)[:60] if not isinstance(p, int) else f"[{p}]" for p in path)
        dotted = dotted.replace(".[", "[")
        if any(path[:len(ov.path)] == ov.path for ov in self.overrides):
            raise InputError(message, field=f"--set {dotted}")  # the value came from --set
        if self.overrides:
            message += f" (with --set {', '.join(ov.text for ov in self.overrides)})"
        line = self._line(path) or self._line(at if at is not None else path[:-1])
        raise InputError(message, file=self.file, line=line, field=dotted)

    def _line(self, path: tuple) -> int | None:
        try:
            return self.lines.get(path)
        except TypeError:  # an unhashable key in the path
            return None


def kind(v: Any) -> str:
    """How a value is named in an error message."""
    return "nothing" if v is None else type(v).__name__

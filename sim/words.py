"""Small helpers for text meant for people."""

from __future__ import annotations


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 microbatch``, ``2 microbatches``, ``1 layout``, ``3 layouts`` (``many``: the plural
    when it is not ``one + "s"``)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"

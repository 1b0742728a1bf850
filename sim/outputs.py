"""Writing output files atomically: a temp file in the same directory, then ``os.replace``.

An interrupted run never leaves a half-written JSON, CSV, trace or image behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[Any], None], *, binary: bool = False,
                 flag: str = "") -> None:
    """Call ``write(fileobj)`` on a temp file next to ``path`` and rename it into place."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"directory {str(parent)!r} does not exist", file=str(path),
                         field=flag or None)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    try:
        kwargs = {} if binary else {"encoding": "utf-8"}
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; use the usual mode
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: str | Path, data: Any, *, flag: str = "--json") -> None:
    """Write ``data`` as indented JSON (deterministic: insertion key order, repr floats)."""
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    atomic_write(path, lambda f: f.write(text), flag=flag)

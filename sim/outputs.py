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


def check_output_path(path: str | Path, flag: str = "") -> Path:
    """Fail early (before a long simulation) if ``path`` cannot be written: its directory is
    missing or not writable, or ``path`` is a directory. Returns the directory."""
    if not str(path):
        raise InputError("empty file name", field=flag or None)
    p = Path(path)
    where = {"file": str(path), "field": flag or None}
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"directory {str(parent)!r} does not exist", **where)
    if p.is_dir() or not p.name:
        raise InputError("is a directory; give a file name", **where)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"directory {str(parent)!r} is not writable", **where)
    return parent


def atomic_write(path: str | Path, write: Callable[[Any], None], *, binary: bool = False,
                 flag: str = "") -> None:
    """Call ``write(fileobj)`` on a temp file next to ``path`` and rename it into place.

    If anything fails (an exception in ``write``, a full disk, Ctrl-C) the temp file is
    removed and ``path`` is left as it was. Problems with the path itself (missing directory,
    a directory in its place, no permission, full disk) are :class:`InputError`s naming it.
    """
    p = Path(path)
    where = {"file": str(path), "field": flag or None}
    parent = check_output_path(path, flag)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise InputError(f"cannot write here: {e.strerror or e}", **where) from None
    try:
        kwargs = {} if binary else {"encoding": "utf-8"}
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; use the usual mode
        os.replace(tmp, p)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and e.errno is not None:  # disk full, I/O error, permission
            raise InputError(f"cannot write: {e.strerror or e}", **where) from None
        raise


def write_json(path: str | Path, data: Any, *, flag: str = "--json") -> None:
    """Write ``data`` as indented JSON (deterministic: insertion key order, repr floats)."""
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    atomic_write(path, lambda f: f.write(text), flag=flag)

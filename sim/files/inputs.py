"""Reading input files safely: bytes → text → lines (YAML: :mod:`sim.files.yaml_load`).

Every reader of a user file goes through here, so every file gets the same treatment:

- I/O problems (missing file, directory, permissions) become :class:`~sim.errors.InputError`;
- encodings: UTF-8 (with or without BOM) and UTF-16 / UTF-32 *with* a BOM (what Windows tools
  such as PowerShell's ``>`` write) are decoded; anything else that is not valid UTF-8 (e.g.
  Latin-1) is an error naming the line and the byte; NUL bytes without a UTF-16/32 BOM mean
  binary data and are an error;
- lines are split at ``\\n``, ``\\r\\n`` and ``\\r`` only, so line numbers in messages are the ones
  an editor shows (``str.splitlines`` would also split at form feeds, ``\\x85``, U+2028 …);
"""

from __future__ import annotations

import codecs
import os
import reprlib
import selectors
import stat
from pathlib import Path
from typing import Any

from sim.errors import InputError

INT64_MAX = 2**63 - 1
"""Largest size (bytes) or time (ns) a workload may give: the int64 range of the tools that
write these files. Anything above is a corrupt or mistyped value, not a real workload."""

_BOMS = (  # longest first: the UTF-32-LE BOM starts with the UTF-16-LE one
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
)

_short = reprlib.Repr()
_short.maxstring = 40
_short.maxother = 40
_short.maxlist = _short.maxdict = _short.maxtuple = 4
_short.maxlevel = 2


def show(value: Any) -> str:
    """A short ``repr`` of a user value for messages (bounded, even for huge or cyclic data)."""
    return _short.repr(value)


def decode_text(data: bytes, file: str) -> str:
    """Decode file bytes as described in the module docstring; the BOM is removed."""
    for bom, codec, label in _BOMS:
        if data.startswith(bom):
            body = data[len(bom):]
            try:
                return body.decode(codec)
            except UnicodeDecodeError as e:
                raise InputError(f"starts with a {label} byte-order mark but is not valid "
                                 f"{label} (at byte {e.start + len(bom)}); save it as UTF-8",
                                 file=file, field="encoding") from None
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data[:nul].count(b"\n") + 1
        raise InputError(f"binary data (NUL byte at offset {nul}), expected a text file",
                         file=file, line=line, field="encoding")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                         "save the file as UTF-8", file=file, line=line,
                         field="encoding") from None


MAX_INPUT_BYTES = 64 * 2**20
"""Largest input file simrun reads (64 MiB; the shipped workloads are ≤ 50 KB). Raised or
lowered with the environment variable :data:`MAX_INPUT_ENV` (a whole number of bytes)."""

MAX_INPUT_ENV = "SIMRUN_MAX_INPUT_BYTES"

PIPE_IDLE_TIMEOUT_S = 5.0
"""A pipe or FIFO given as an input that sends nothing for this long is an error, not a hang."""

_KINDS = ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISSOCK, "socket"))


def max_input_bytes() -> int:
    """The input size cap: :data:`MAX_INPUT_BYTES`, or ``$SIMRUN_MAX_INPUT_BYTES``."""
    text = os.environ.get(MAX_INPUT_ENV)
    if text is None:
        return MAX_INPUT_BYTES
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InputError(f"expected a whole number of bytes ≥ 1, got {show(text)}",
                         field=MAX_INPUT_ENV)
    return int(text)


_READ: dict[tuple[int, int], str] = {}
"""Regular files the running command has read (device, inode → the name it was read by): every
input, given directly or named inside another file, so that no output can replace one
(:func:`sim.files.outputs.atomic_write` refuses). Kept only while :func:`track_inputs` is on:
for one ``simrun`` command (a Python caller may read a file and write it back later)."""
_TRACKING = [False]


def track_inputs(on: bool) -> None:
    """Start (``True``) or end (``False``) recording the files read; both forget earlier ones."""
    _READ.clear()
    _TRACKING[0] = on


def input_read_as(dev: int, ino: int) -> str | None:
    """The name under which the running command read the file ``(dev, ino)``, or None."""
    return _READ.get((dev, ino)) if _TRACKING[0] else None


def read_bytes(path: str | Path, *, what: str = "file", flag: str | None = None) -> bytes:
    """The bytes of ``path``, at most :func:`max_input_bytes` of them. Regular files and
    pipes/FIFOs (read without blocking, :data:`PIPE_IDLE_TIMEOUT_S`) only: devices such as
    ``/dev/zero`` and sockets are refused. Every problem is an :class:`InputError` (naming
    ``flag``)."""
    prefix = "" if what == "file" else f"cannot read {what}: "
    where = {"file": str(path), "field": flag}
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(f"{prefix}no such file", **where) from None
    except IsADirectoryError:
        raise InputError(f"{prefix}is a directory, expected a file", **where) from None
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror or e}", **where) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{prefix}is a directory, expected a file", **where)
        kind = next((name for test, name in _KINDS if test(mode)), None)
        if kind is not None:
            raise InputError(f"{prefix}is a {kind}, not a file", **where)
        limit = max_input_bytes()
        if stat.S_ISFIFO(mode):
            data = _read_pipe(fd, limit, where, what)
        else:
            st = os.fstat(fd)
            if st.st_size > limit:
                raise _too_big(st.st_size, limit, where, what)
            data = _read_upto(fd, limit, where, what)
            if _TRACKING[0] and len(_READ) < 65536:  # bounded: a run reads a handful
                _READ.setdefault((st.st_dev, st.st_ino), str(path))
        return data
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror or e}", **where) from None
    finally:
        os.close(fd)


def _too_big(size: int | str, limit: int, where: dict, what: str) -> InputError:
    shown = f"{size:,} bytes" if isinstance(size, int) else size
    return InputError(f"{what} is {shown}; simrun reads at most {limit:,} bytes (set "
                      f"{MAX_INPUT_ENV} to change the limit)", **where)


def _read_upto(fd: int, limit: int, where: dict, what: str) -> bytes:
    chunks, total = [], 0
    while True:
        block = os.read(fd, min(1 << 20, limit + 1 - total))
        if not block:
            return b"".join(chunks)
        chunks.append(block)
        total += len(block)
        if total > limit:
            raise _too_big("larger than that", limit, where, what)


def _read_pipe(fd: int, limit: int, where: dict, what: str) -> bytes:
    """Read a pipe or FIFO to its end without blocking forever: a FIFO nobody writes to reads
    as empty at once; a writer silent for :data:`PIPE_IDLE_TIMEOUT_S` is an error."""
    chunks, total = [], 0
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            try:
                block = os.read(fd, min(1 << 16, limit + 1 - total))
            except BlockingIOError:
                if not sel.select(PIPE_IDLE_TIMEOUT_S):
                    raise InputError(f"a pipe that sent no data for {PIPE_IDLE_TIMEOUT_S:g} s",
                                     **where) from None
                continue
            if not block:
                break
            chunks.append(block)
            total += len(block)
            if total > limit:
                raise _too_big("larger than that", limit, where, what)
    if not total:
        raise InputError("a pipe or FIFO with no data (nothing is writing to it)", **where)
    return b"".join(chunks)


def read_text(path: str | Path, *, what: str = "file", flag: str | None = None) -> str:
    """Read a text file (see the module docstring); every problem is an :class:`InputError`."""
    return decode_text(read_bytes(path, what=what, flag=flag), str(path))


def split_lines(text: str) -> list[str]:
    """Lines of ``text`` split at ``\\n``, ``\\r\\n`` or ``\\r`` (not at other Unicode breaks),
    without their terminators; ``lines[i]`` is line ``i + 1`` as an editor numbers it."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def positive_field(row: dict, key: str, *, file: str, line: int, kind=float):
    """``row[key]`` of a data file's CSV row as a positive ``kind`` (float or int); a value that
    is not one is refused naming ``file``, ``line`` and the field."""
    try:
        v = kind(row[key])
    except (TypeError, ValueError):
        raise InputError(f"not a number: {row[key]!r}", file=file, line=line,
                         field=key) from None
    if not v > 0:
        raise InputError(f"must be > 0, got {v:g}", file=file, line=line, field=key)
    return v

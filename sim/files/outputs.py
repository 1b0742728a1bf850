"""Writing output files safely: checked paths, then a temp file beside the target, renamed.

- :func:`check_output_paths` refuses, before any work, an output that is the same file as an
  input or as another output, that exists and is not a regular file (``/dev/null``, a FIFO, a
  directory), or that is read-only; ``-`` and ``/dev/stdout`` mean standard output where the
  caller allows it (JSON reports), and ``/dev/null`` discards any output.
- :func:`atomic_write` writes a temp file ``.<name>.simrun-<pid>-<random>.tmp`` in the target's
  directory, flushes and fsyncs it, and renames it over the target: an interrupted run never
  leaves a half-written file. A symlinked target is written *through* (the file it points to is
  replaced, the link stays); an existing target keeps its permission bits. Temp files that a
  killed simrun left beside the same target (their pid no longer runs) are removed.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sim.errors import InputError, UsageError
from sim.files.inputs import input_read_as

NAME_MAX = 255
"""Longest file name, in bytes, of the file systems simrun writes to (Linux ext4, XFS, btrfs,
tmpfs; macOS APFS counts UTF-8 bytes alike)."""

PATH_MAX = 4096
"""Longest path, in bytes with its terminating NUL, that Linux system calls take."""

_TMP_EXTRA = len(".simrun-4194304-0123abcd.tmp") + 1
"""Bytes a temp file's name adds to its output's name at most: a leading dot, then
``.simrun-PID-RANDOM.tmp`` (Linux pids stay ≤ 4,194,304, ``/proc/sys/kernel/pid_max``)."""


STDOUT = ("-", "/dev/stdout")
"""Output names meaning standard output (for outputs that allow it)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_stdout(path: str | Path | None) -> bool:
    """True for ``-`` and ``/dev/stdout``."""
    return path is not None and str(path) in STDOUT


def is_devnull(path: str | Path) -> bool:
    """True if ``path`` is the null device (``/dev/null``): output to it is discarded."""
    try:
        return os.path.samefile(path, os.devnull) and not os.path.isfile(os.devnull)
    except OSError:
        return False


def _kind(mode: int) -> str | None:
    """What a non-regular file is, or None for a regular file."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _target(path: str | Path) -> Path:
    """The file a write to ``path`` replaces: ``path`` itself, or where its symlinks lead."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def _check_name_lengths(path: str | Path, where: dict) -> None:
    """Refuse a name the file system cannot hold: a component over :data:`NAME_MAX` bytes or a
    path over :data:`PATH_MAX` bytes (the kernel's ENAMETOOLONG, said in one line)."""
    raw = os.fsencode(str(path))
    if len(raw) >= PATH_MAX:
        raise InputError(f"path is {len(raw)} bytes long; the file system takes at most "
                         f"{PATH_MAX - 1}", file=_shorten_path(raw), field=where["field"])
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX:
            raise InputError(f"a file name of {len(part)} bytes; the file system takes at most "
                             f"{NAME_MAX} bytes per name", file=_shorten_path(raw),
                             field=where["field"])


def _shorten_path(raw: bytes) -> str:
    text = os.fsdecode(raw)
    return text if len(text) <= 80 else f"{text[:40]}…{text[-36:]}"


def check_output_path(path: str | Path, flag: str = "") -> Path:
    """Fail early (before a long simulation) if ``path`` cannot be written: its directory is
    missing or not writable, it exists and is not a regular file (a directory, a device other
    than ``/dev/null``, a FIFO), or it is read-only (no write bit: simrun never replaces such a
    file). Returns the directory the temp file goes to."""
    if not str(path):
        raise InputError("empty file name", field=flag or None)
    where = {"file": str(path), "field": flag or None}
    _check_name_lengths(path, where)
    p = _target(path)
    if is_devnull(p):
        return p.parent
    if Path(path).is_symlink():
        try:
            os.stat(path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise InputError("is a symbolic link that loops; give a file name", **where) \
                    from None
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"directory {str(parent)!r} does not exist", **where)
    if not p.name:
        raise InputError("is a directory; give a file name", **where)
    try:
        st = os.stat(p)
    except OSError:
        st = None
    if st is not None:
        kind = _kind(st.st_mode)
        if kind == "a directory":
            raise InputError("is a directory; give a file name", **where)
        if kind is not None:
            raise InputError(f"exists and is {kind}, not a regular file; simrun writes only "
                             "regular files, /dev/null, and '-' (standard output) for JSON",
                             **where)
        if not st.st_mode & 0o222:
            raise InputError(f"is read-only (mode {stat.S_IMODE(st.st_mode):04o}); simrun does "
                             "not replace it", **where)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"directory {str(parent)!r} is not writable", **where)
    return parent


def _identity(path: str | Path) -> tuple:
    """What makes two paths the same file: device and inode if it exists, else the real path."""
    try:
        st = os.stat(path)
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", os.path.realpath(path))


def check_output_dir(path: str | Path, flag: str) -> Path:
    """Fail early if the folder ``path`` (for one file per rank) cannot be used: it exists and
    is not a folder, or neither it nor its parent exists."""
    p = Path(path)
    if not str(path):
        raise InputError("empty folder name", field=flag)
    if p.exists() and not p.is_dir():
        raise InputError("exists and is not a folder (one file per rank goes there)",
                         file=str(path), field=flag)
    if not p.exists() and not (p.parent if str(p.parent) else Path(".")).is_dir():
        raise InputError(f"directory {str(p.parent)!r} does not exist", file=str(path),
                         field=flag)
    return p


def check_output_paths(outputs: Mapping[str, str | Path | None],
                       inputs: Mapping[str, str | Path | Iterable[str | Path] | None] | None = None,
                       *, stdout_ok: Iterable[str] = ()) -> None:
    """Check every output (``{flag: path}``, None = not given) before any work: each must be
    writable (:func:`check_output_path`), none may be the same file as an input (``{flag:
    path or paths}``) or as another output. ``-`` / ``/dev/stdout`` is standard output, allowed
    for the flags in ``stdout_ok`` and for one output at most. Raises :class:`UsageError` (or
    :class:`InputError`) naming the flag."""
    seen: dict[tuple, str] = {}
    for flag, given in (inputs or {}).items():
        paths = [given] if isinstance(given, (str, Path)) else list(given or ())
        for path in paths:
            seen.setdefault(_identity(path), f"the input of {flag} ({path})")
    allowed = set(stdout_ok)
    for flag, path in outputs.items():
        if path is None:
            continue
        if is_stdout(path):
            if flag not in allowed:
                raise UsageError(f"cannot write {path!r} (standard output) here; give a file "
                                 "name", field=flag)
            key: tuple = ("stdout",)
        elif is_devnull(path):
            continue
        else:
            check_output_path(path, flag)
            key = _identity(path)
        if key in seen:
            raise UsageError(f"{str(path)!r} is the same file as {seen[key]}; simrun would "
                             "overwrite it", field=flag)
        seen[key] = f"the output of {flag} ({path})"


def _tmp_stem(name: str) -> str:
    """The part of a temp file's name that stands for the output ``name``: the name itself, or,
    when the temp name would pass :data:`NAME_MAX` (an output name of 230–255 bytes), its first
    bytes and a hash of the whole, so that the temp file can be created beside it."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) + _TMP_EXTRA <= NAME_MAX:
        return name
    import hashlib  # only for an output name this long

    digest = hashlib.sha256(raw).hexdigest()[:16]
    keep = raw[:NAME_MAX - _TMP_EXTRA - len(digest) - 1].decode("utf-8", "ignore")
    return f"{keep}~{digest}"


def _clean_stale(parent: Path, name: str) -> None:
    """Remove temp files of ``name`` left by simrun processes that no longer run (killed with
    SIGKILL or by a power cut mid-write). Files of running processes are left alone."""
    prefix = f".{_tmp_stem(name)}.simrun-"
    try:
        entries = [e for e in os.listdir(parent) if e.startswith(prefix) and e.endswith(".tmp")]
    except OSError:
        return
    for entry in entries:
        pid_text = entry[len(prefix):].split("-", 1)[0]
        if not (pid_text.isascii() and pid_text.isdigit()) or int(pid_text) == os.getpid():
            continue
        try:
            os.kill(int(pid_text), 0)
            continue  # still running (or a pid reused: leave it)
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, ValueError):
            continue
        try:
            os.unlink(parent / entry)
        except OSError:
            pass


def atomic_write(path: str | Path, write: Callable[[Any], None], *, binary: bool = False,
                 flag: str = "") -> None:
    """Call ``write(fileobj)`` on a temp file beside ``path`` (beside the file a symlink
    leads to) and rename it into place, keeping an existing file's permission bits.

    If anything fails (an exception in ``write``, a full disk, Ctrl-C, SIGTERM) the temp file is
    removed and ``path`` is left as it was. Problems with the path itself (missing directory,
    a directory or device in its place, no permission, full disk) are :class:`InputError`\\ s
    naming it.
    """
    where = {"file": str(path), "field": flag or None}
    parent = check_output_path(path, flag)
    p = _target(path)
    if is_devnull(p):  # discarded: written to the device, which is never replaced
        with open(os.devnull, "wb" if binary else "w") as f:
            write(f)
        return
    try:
        st = os.stat(p)
        mode = stat.S_IMODE(st.st_mode)
    except OSError:
        st, mode = None, 0o666 & ~_umask()
    read_as = st and input_read_as(st.st_dev, st.st_ino)
    if read_as:  # named inside another input (a validation file's model, ...): never replaced
        raise InputError(f"is an input of this run (read as {read_as}); simrun never "
                         "overwrites its inputs: give another name", **where)
    _clean_stale(parent, p.name)
    tmp = parent / f".{_tmp_stem(p.name)}.simrun-{os.getpid()}-{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o600)
    except OSError as e:
        raise InputError(f"cannot write here: {e.strerror or e}", **where) from None
    try:
        kwargs = {} if binary else {"encoding": "utf-8"}
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
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
    """Write ``data`` as indented JSON (deterministic: insertion key order, repr floats), to
    standard output for ``-`` or ``/dev/stdout``."""
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    atomic_write(path, lambda f: f.write(text), flag=flag)

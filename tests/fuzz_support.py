"""Shared pieces of the parser fuzz tests (tests/test_fuzz_*.py).

- :func:`mutated_lines`: line- and column-level mutations of seed texts (truncated files and
  lines, dropped/duplicated/swapped lines, wrong column counts, bad tokens, garbage);
- :func:`encoded`: the mutated text as bytes in a random encoding (UTF-8 with/without BOM,
  UTF-16/32 with BOM, UTF-16 without BOM, Latin-1, cp1252), sometimes cut mid-character or
  with random bytes spliced in;
- :func:`check_reader`: call a reader on a file and require that it either returns or raises
  :class:`~sim.errors.InputError` with a one-line message naming the file and a line or a
  field — any other exception (or a hang, caught by an alarm) fails with the input shown.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from sim.errors import InputError

# Tokens that break numeric / enum / structural fields in every text format here.
BAD_TOKENS = [
    "", " ", "\t", "-1", "-0", "0", "1.5", "1e400", "-1e400", "nan", "inf", "-inf", "1e-400",
    "0x10", "1_000", "²", "١٢", "9" * 5000, str(2**63), str(2**64), str(2**31), "+7",
    "99999999999999999999999", "12802064384", "ALLREDUCE", "ALLREDUCE_DP_EP", "ALLTOALL_EP",
    "ALLREDUCE_ASYNC", "SENDRECV", "FOO", "NONE", "None", "-", "ga:", "pp:", "pp_comm",
    "é", "\u2028", "\x85", "\x0c", "\ufeff", ";", ":", "(", ")", "(1024,)", "(0,)", "(0, 0)",
    "torch.Size([0, 0])", "Module:", "Submodule: x (Y)", "[", "{", "&a", "*a", "!!python/object",
]

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                database=None)


def fuzz_settings(n: int) -> settings:
    """Reproducible settings with ``n`` examples (no deadline: CI machines vary)."""
    return settings(max_examples=n, **SETTINGS)


def _split_cols(line: str, sep: str | None) -> list[str]:
    return line.split(sep) if sep else line.split(" ")


@st.composite
def mutated_lines(draw, seeds: list[str], sep: str | None = None, extra_tokens=()) -> str:
    """A seed text with 1–4 random line / column mutations (``sep``: column separator)."""
    text = draw(st.sampled_from(seeds))
    lines = text.split("\n")
    tokens = BAD_TOKENS + list(extra_tokens)
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        op = draw(st.sampled_from(["truncate", "drop", "dup", "cut", "swap", "garbage", "token",
                                   "token", "token", "dropcol", "addcol", "indent"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "truncate":
            lines = lines[: i + 1]
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines[i] = lines[i][: draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "garbage":
            lines[i] = draw(st.text(max_size=60))
        elif op == "indent":
            lines[i] = draw(st.sampled_from(["", " ", "  ", "\t", "      "])) + lines[i].lstrip()
        else:
            s = sep if (sep and sep in lines[i]) else None
            cols = _split_cols(lines[i], s)
            k = draw(st.integers(0, len(cols) - 1))
            if op == "token":
                cols[k] = draw(st.sampled_from(tokens))
            elif op == "dropcol":
                del cols[k]
            else:
                cols.insert(k, draw(st.sampled_from(tokens)))
            lines[i] = (s or " ").join(cols)
    return "\n".join(lines)


ENCODINGS = ["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32", "latin-1",
             "cp1252"]


@st.composite
def encoded(draw, texts) -> bytes:
    """Bytes of a drawn text in a random encoding, sometimes damaged at the byte level."""
    text = draw(texts)
    enc = draw(st.sampled_from(ENCODINGS))
    if enc in ("latin-1", "cp1252") and draw(st.booleans()):
        text = text.replace("a", "é", 1)  # make the encoding matter
    data = text.encode(enc, errors="replace")
    damage = draw(st.sampled_from(["none", "none", "none", "cut", "splice", "crlf"]))
    if damage == "cut" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "splice":
        k = draw(st.integers(0, len(data)))
        data = data[:k] + draw(st.binary(min_size=1, max_size=8)) + data[k:]
    elif damage == "crlf":
        data = data.replace(b"\n", b"\r\n")
    return data


class Hang(Exception):
    """A reader ran longer than the alarm allowed (a hang, not a slow test)."""


@contextmanager
def alarm(seconds: int):
    """Turn a hang into a :class:`Hang` exception (main thread, POSIX only)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum, frame):
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check_error(e: InputError, file: str, *, need_location: bool = True) -> None:
    """One line, names ``file``, and a line or a field (``file:line:`` when there is a line)."""
    msg = str(e)
    assert msg and "\n" not in msg and "\r" not in msg, repr(msg)
    assert msg.startswith(file), f"message does not name the file: {msg!r}"
    assert e.file == file, msg
    if e.line is not None:
        assert msg.startswith(f"{file}:{e.line}: "), msg
        assert e.line >= 1, msg
    if need_location:
        assert e.line is not None or e.field, f"neither line nor field: {msg!r}"
    assert len(msg) < 2000, f"message too long ({len(msg)} chars)"


def check_reader(read: Callable[[Path], object], path: Path, data: bytes, *,
                 need_location: bool = True, timeout_s: int = 20) -> InputError | None:
    """Write ``data`` to ``path`` and run ``read(path)``: it returns or raises InputError."""
    path.write_bytes(data)
    try:
        with alarm(timeout_s):
            read(path)
    except InputError as e:
        check_error(e, str(path), need_location=need_location)
        if e.line is not None:
            n_lines = data.count(b"\n") + data.count(b"\r") + 2
            assert e.line <= max(n_lines, 2), f"line {e.line} beyond the file: {e}"
        return e
    return None

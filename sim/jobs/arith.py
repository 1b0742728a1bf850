"""Shell arithmetic ``$((...))`` as POSIX sh evaluates it, on a bounded subset, without eval.

Evaluated: integer literals (decimal, ``0x`` hexadecimal, ``0`` octal, as C and POSIX sh
read them), variable names with or without ``$`` (``PP``, ``$PP``, ``${PP}``) whose values are
integer literals, ``+ - * / %``, unary ``-`` and ``+``, parentheses; ``*`` ``/`` ``%`` bind
tighter than ``+`` ``-``, both left to right; ``/`` truncates toward zero and ``%`` takes the
dividend's sign (C's rules, which sh uses). Refused with the expression named: any other
operator (``**``, ``++``/``--``, ``<<``, comparisons, ``?:``, assignments), division by zero,
a result or step outside signed 64 bits (where bash would silently wrap), a variable whose
value is not an integer, more than :data:`MAX_CHARS` characters or :data:`MAX_DEPTH`
nested parentheses.

A variable the script never sets, or one whose value is unknown (a command substitution), makes
the result unknown rather than 0 (bash's reading of an unset name): the reader then refuses it
only where the value matters, as for any unknown value.
"""

from __future__ import annotations

import re

MAX_CHARS = 1000
MAX_DEPTH = 32
#: bash's power and increment/decrement operators, refused whole (not read as two operators)
_TWO = ("**", "++", "--")
_LO, _HI = -(1 << 63), (1 << 63) - 1
_NAME = r"\$\{(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+)\}|\$[0-9]|\$?[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(rf"\s*(?:({_NAME})|([0-9][0-9A-Za-z]*)|([-+*/%()]))")


class ArithError(ValueError):
    """The expression cannot be evaluated (the message says why)."""


class Unknown(Exception):  # noqa: N818 - a result, not a failure
    """The value depends on a variable that is unset or unknown (``why``)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def literal(text: str) -> int:
    """An integer constant as sh reads it (``12``, ``0x1f``, ``017``)."""
    try:
        if re.fullmatch(r"0[xX][0-9A-Fa-f]+", text):
            return int(text, 16)
        if re.fullmatch(r"0[0-7]+", text):
            return int(text, 8)
        if re.fullmatch(r"[1-9][0-9]*|0", text):
            return int(text)
    except ValueError:  # pragma: no cover - the patterns admit only digits
        pass
    raise ArithError(f"{text!r} is not an integer constant")


def _check(v: int) -> int:
    if not _LO <= v <= _HI:
        raise ArithError("the value leaves the signed 64-bit range")
    return v


def _tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(expr):
        if expr[i:].strip() == "":
            break
        m = _TOKEN.match(expr, i)
        if m is None or m.group(3) and expr.startswith(_TWO, m.start(3)):
            rest = expr[i:].lstrip()
            ch = (re.match(r"[^\sA-Za-z0-9_()$]+|\$", rest) or re.match(".", rest)).group()
            raise ArithError(f"the operator or character {ch!r} is not evaluated")
        name, num, op = m.groups()
        out.append(("name", name.strip("${}")) if name else ("num", num) if num else ("op", op))
        i = m.end()
    return out


def evaluate(expr: str, lookup) -> int:
    """The value of ``expr``; ``lookup(name)`` gives a variable's text, or raises
    :class:`Unknown`. Raises :class:`ArithError` (not evaluated) or :class:`Unknown`."""
    if len(expr) > MAX_CHARS:
        raise ArithError(f"more than {MAX_CHARS} characters")
    toks = _tokens(expr)
    if not toks:
        raise ArithError("an empty expression")
    p = _Parser(toks, lookup)
    v = p.sum(0)
    if p.i != len(toks):
        raise ArithError(f"unexpected {toks[p.i][1]!r}")
    return v


class _Parser:
    def __init__(self, toks, lookup):
        self.toks, self.lookup, self.i = toks, lookup, 0

    def _peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def sum(self, depth: int) -> int:
        v = self.product(depth)
        while (t := self._peek()) is not None and t in (("op", "+"), ("op", "-")):
            self.i += 1
            r = self.product(depth)
            v = _check(v + r if t[1] == "+" else v - r)
        return v

    def product(self, depth: int) -> int:
        v = self.unary(depth)
        while (t := self._peek()) is not None and t[0] == "op" and t[1] in "*/%":
            self.i += 1
            r = self.unary(depth)
            if t[1] == "*":
                v = _check(v * r)
            elif r == 0:
                raise ArithError("division by zero")
            else:
                q = _check(abs(v) // abs(r) * (1 if (v < 0) == (r < 0) else -1))
                v = q if t[1] == "/" else v - q * r
        return v

    def unary(self, depth: int) -> int:
        t = self._peek()
        if t in (("op", "-"), ("op", "+")):
            self.i += 1
            v = self.unary(depth)
            return _check(-v) if t[1] == "-" else v
        return self.primary(depth)

    def primary(self, depth: int) -> int:
        t = self._peek()
        if t is None:
            raise ArithError("the expression ends where a value is expected")
        self.i += 1
        kind, text = t
        if kind == "num":
            return _check(literal(text))
        if kind == "name":
            value = self.lookup(text).strip()
            try:
                return _check(literal(value.lstrip("-")) * (-1 if value.startswith("-") else 1))
            except ArithError:
                raise ArithError(f"the value {value!r} of {text} is not an integer") from None
        if text == "(":
            if depth >= MAX_DEPTH:
                raise ArithError(f"more than {MAX_DEPTH} nested parentheses")
            v = self.sum(depth + 1)
            if self._peek() != ("op", ")"):
                raise ArithError("a '(' is not closed")
            self.i += 1
            return v
        raise ArithError(f"unexpected {text!r}")

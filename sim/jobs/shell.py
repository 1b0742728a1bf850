"""A safe subset of bash, enough to read the arguments of a launch script (Megatron-LM's
``examples/*/train_*.sh``) without running it.

Evaluated: variable assignments (``X=v``, ``export X=v``, ``X+=v``), arrays (``A=( ... )``,
``A+=( ... )``, over several lines), ``$X`` / ``${X}`` / ``${X:-default}`` / ``${X-default}`` /
``${A[@]}`` / ``"${A[@]}"`` with bash's word splitting, single and double quotes, backslash
escapes and continuation lines, comments, and ``if``/``elif``/``else``/``fi`` whose conditions
are string tests (``[[ a == b ]]``, ``[ a != b ]``, ``-z``, ``-n`` joined by ``&&``/``||``).
The script runs with no arguments: ``$1`` … are unset, as are variables it never assigns.

``pwd`` in a command substitution (`` `pwd` ``, ``$(pwd)``) is the script's folder (launch
scripts are run from beside the files they source). Arithmetic ``$((...))`` is evaluated by
:mod:`sim.jobs.arith` (integers, ``+ - * / %``, parentheses; anything else refused). Not
evaluated (the construct is named, with its line): other command substitutions, other
conditions, loops, ``case``, functions.
A value depending on one is *unknown*: a :class:`Word` carries why; the reader decides whether
an unknown word matters (an argument that is irrelevant to timing may keep a placeholder path).
Bounded: :data:`MAX_WORDS` words, :data:`MAX_VALUE` characters per value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.errors import InputError
from sim.jobs import arith

MAX_WORDS = 100_000
MAX_VALUE = 1 << 20
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_OPS = ("&&", "||", ";", "|", "(", ")")
_BLOCK_OPEN = {"for": "loop", "while": "loop", "until": "loop", "case": "case"}
_BLOCK_CLOSE = {"done": "loop", "esac": "case"}


@dataclass(frozen=True)
class Word:
    """One word after expansion: its ``text``, ``line`` (1-based) and, when a construct the
    subset does not evaluate fed it, ``unknown`` (the construct and its line)."""

    text: str
    line: int
    unknown: str | None = None
    #: the file the word was written in, when not the script itself (a sourced file)
    file: str | None = None


@dataclass(frozen=True)
class Token:
    """A raw word (quotes and ``$`` forms as written) or an operator (``op``)."""

    text: str
    line: int
    op: bool = False


@dataclass(frozen=True)
class Command:
    """One executed command: its expanded words (``line``: where it starts)."""

    words: list[Word]
    line: int


def tokenize(text: str, file: str) -> list[Token]:
    """Raw words and operators; newlines are ``"\\n"`` operators. Continuation lines are
    joined; ``#`` at a word's start begins a comment."""
    toks: list[Token] = []
    i, line, n = 0, 1, len(text)
    cur: list[str] = []
    start = 1

    def flush():
        if cur:
            toks.append(Token("".join(cur), start))
            cur.clear()
            if len(toks) > MAX_WORDS:
                raise InputError(f"more than {MAX_WORDS} words", file=file, line=line,
                                 field="script")

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i, line = i + 2, line + 1
            continue
        if not cur:
            start = line
        if c in " \t":
            flush()
            i += 1
        elif c == "\n":
            flush()
            toks.append(Token("\n", line, op=True))
            i, line = i + 1, line + 1
        elif c == "#" and not cur:
            while i < n and text[i] != "\n":
                i += 1
        elif (j := _piece_end(text, i, file, line)) is not None:
            cur.append(text[i:j + 1])
            line += text.count("\n", i, j)
            i = j + 1
        elif text.startswith(("&&", "||"), i):
            flush()
            toks.append(Token(text[i:i + 2], line, op=True))
            i += 2
        elif c in ";|()":
            if c == "(" and cur and not _ASSIGN.fullmatch("".join(cur)):
                cur.append(c)  # a literal '(' inside a word
            else:
                flush()
                toks.append(Token(c, line, op=True))
            i += 1
        else:
            cur.append(c)
            i += 1
    flush()
    return toks


def _piece_end(text: str, i: int, file: str, line: int) -> int | None:
    """The last index of the quoted string, ``$(...)`` / ``${...}`` or escape at ``i``, or
    None when ``text[i]`` starts none."""
    c = text[i]
    if c in "'\"`":
        return _closing(text, i, c, file, line)
    if c == "$" and text[i + 1:i + 2] in ("(", "{"):
        return _balanced(text, i + 1, file, line)
    if c == "\\" and i + 1 < len(text):
        return i + 1
    return None


def _closing(text: str, i: int, q: str, file: str, line: int) -> int:
    j = i + 1
    while j < len(text):
        if text[j] == "\\" and q != "'":
            j += 2
            continue
        if q == '"' and text[j] == "$" and text[j + 1:j + 2] in ("(", "{"):
            j = _balanced(text, j + 1, file, line) + 1
            continue
        if text[j] == q:
            return j
        j += 1
    raise InputError(f"unterminated {q} quote", file=file, line=line, field="script")


def _balanced(text: str, i: int, file: str, line: int) -> int:
    """The index of the bracket closing the one at ``i`` (``(`` or ``{``)."""
    pairs = {"(": ")", "{": "}"}
    stack = [pairs[text[i]]]
    j = i + 1
    while j < len(text) and stack:
        c = text[j]
        if c in "'\"" and stack[-1] == ")":
            j = _closing(text, j, c, file, line)
        elif c == "\\":
            j += 1
        elif c in pairs:
            stack.append(pairs[c])
        elif c == stack[-1]:
            stack.pop()
        j += 1
    if stack:
        raise InputError(f"unterminated ${text[i]}", file=file, line=line, field="script")
    return j - 1


class Shell:
    """Variables and the expansion of raw words (arrays are lists of :class:`Word`)."""

    def __init__(self, file: str, cwd: str | None = None):
        self.file = file
        self.vars: dict[str, list[Word] | Word] = {}
        #: what ``pwd`` prints: the script's folder (scripts are run from beside their files)
        self.cwd = cwd

    def assign(self, name: str, value: list[Word] | Word, append: bool) -> None:
        old = self.vars.get(name)
        if append and old is not None:
            if isinstance(value, list):
                value = (old if isinstance(old, list) else [old]) + value
            elif isinstance(old, Word):
                value = Word(old.text + value.text, value.line, old.unknown or value.unknown)
        size = sum(len(w.text) for w in value) if isinstance(value, list) else len(value.text)
        if size > MAX_VALUE:
            raise InputError(f"a value over {MAX_VALUE} characters", file=self.file,
                             field=name)
        self.vars[name] = value

    def unknown(self, name: str, why: str, line: int) -> None:
        """``name`` takes a value the subset cannot know (``why``, at ``line``)."""
        self.vars[name] = Word(f"${{{name}}}", line, f"{why} at line {line}")

    def fields(self, tok: Token, *, split: bool = True) -> list[Word]:
        """The words ``tok`` expands to (unquoted expansions split at blanks when ``split``)."""
        out: list[Word] = []
        cur: list[str] = []
        state: dict = {"has": False, "unknown": None, "line": None, "file": None}

        def add(text, unknown, quoted, origin=None, origin_file=None):
            if origin is not None and not state["has"]:
                state["line"] = origin  # a field that starts with an array item: its line
                state["file"] = origin_file
            if quoted or not split:
                cur.append(text)
                state["has"] = True
                state["unknown"] = state["unknown"] or unknown
                return
            parts = text.split(None) if text.strip() else []
            lead, trail = text[:1].isspace(), text[-1:].isspace()
            # a split value's unknown goes to the pieces that show the placeholder
            marked = [p for p in parts if "$" in p or "`" in p] or parts
            if lead and state["has"]:
                end()
            for k, p in enumerate(parts):
                if k:
                    end()
                cur.append(p)
                state["has"] = True
                if unknown and p in marked:
                    state["unknown"] = state["unknown"] or unknown
            if trail and parts:
                end()

        def end():
            if state["has"]:
                out.append(Word("".join(cur), state["line"] or tok.line, state["unknown"],
                                state["file"] if state["line"] else self.file))
            cur.clear()
            state["has"], state["unknown"], state["line"] = False, None, None
            state["file"] = None

        self._expand(tok.text, tok.line, add, end)
        end()
        return out

    def _expand(self, s: str, line: int, add, end, quoted: bool = False) -> None:
        i = 0
        while i < len(s):
            c = s[i]
            if c == "'" and not quoted:
                j = s.index("'", i + 1)
                add(s[i + 1:j], None, True)
                i = j + 1
            elif c == '"' and not quoted:
                j = _closing(s, i, '"', self.file, line)
                add("", None, True)
                self._expand(s[i + 1:j], line, add, end, quoted=True)
                i = j + 1
            elif c == "`":
                j = _closing(s, i, "`", self.file, line)
                if s[i + 1:j].strip() == "pwd" and self.cwd is not None:
                    add(self.cwd, None, True)
                else:
                    add("`...`", f"command substitution `...` at line {line}", quoted)
                i = j + 1
            elif c == "\\" and i + 1 < len(s):
                nxt = s[i + 1]
                keep = quoted and nxt not in '$`"\\'
                add(("\\" if keep else "") + nxt, None, True)
                i += 2
            elif c == "$":
                i = self._dollar(s, i, line, add, end, quoted)
            else:
                add(c, None, quoted)
                i += 1

    def _dollar(self, s: str, i: int, line: int, add, end, quoted: bool) -> int:
        rest = s[i + 1:]
        if rest.startswith("((") and (j := _balanced(s, i + 1, self.file, line)) \
                and s[j - 1] == ")":
            self._arith(s[i + 3:j - 1], line, add, quoted)
            return j + 1
        if rest.startswith("("):
            j = _balanced(s, i + 1, self.file, line)
            if s[i + 2:j].strip() == "pwd" and self.cwd is not None:
                add(self.cwd, None, True)
            else:
                add("$(...)", f"command substitution $(...) at line {line}", quoted)
            return j + 1
        if rest.startswith("{"):
            j = _balanced(s, i + 1, self.file, line)
            self._braced(s[i + 2:j], line, add, end, quoted)
            return j + 1
        m = _NAME.match(rest) or re.match(r"[0-9@*#?$!-]", rest)
        if m is None:
            add("$", None, quoted)
            return i + 1
        self._value(m.group(), None, line, add, end, quoted, array=False)
        return i + 1 + m.end()

    def _arith(self, expr: str, line: int, add, quoted: bool) -> None:
        """``$((expr))``: its value, or unknown (sim.jobs.arith); not evaluable: refused."""
        def lookup(name: str) -> str:
            v = self.vars.get(name)
            w = v[0] if isinstance(v, list) and v else v
            if not isinstance(w, Word):
                raise arith.Unknown(f"${name} is unset in arithmetic $((...)) at line {line}")
            if w.unknown:
                raise arith.Unknown(w.unknown)
            return w.text

        try:
            add(str(arith.evaluate(expr, lookup)), None, quoted)
        except arith.Unknown as u:
            add("$((...))", u.why, quoted)  # no blanks: one word
        except arith.ArithError as e:
            shown = expr if len(expr) <= 80 else expr[:77] + "..."
            raise InputError(str(e), file=self.file, line=line,
                             field=f"arithmetic $(({shown}))") from None

    def _braced(self, body: str, line: int, add, end, quoted: bool) -> None:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(\[[@*]\])?(?:(:?-)(.*))?", body,
                         re.S)
        if m is None:
            add("${...}", f"parameter expansion ${{{body}}} at line {line}", quoted)
            return
        name, index, _, default = m.groups()
        self._value(name, default, line, add, end, quoted, array=bool(index))

    def _value(self, name, default, line, add, end, quoted, *, array) -> None:
        v = self.vars.get(name)
        if v is None or (isinstance(v, Word) and v.text == "" and default is not None):
            if default is not None:
                self._expand(default, line, add, end, quoted)
                return
            kind = "positional parameter" if name[0].isdigit() or name in "@*#" else "variable"
            add(f"${name}", f"{kind} ${name} is unset (the script runs with no arguments) "
                            f"at line {line}", quoted)
            return
        if isinstance(v, Word):
            add(v.text, v.unknown, quoted, v.line, v.file)
            return
        items = v if array else v[:1]
        for k, w in enumerate(items):
            if k and quoted:
                end()
            elif k:
                add(" ", None, False)
            add(w.text, w.unknown, quoted, w.line, w.file)

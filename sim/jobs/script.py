"""Run a launch script in the shell subset of :mod:`sim.jobs.shell` and find its training
command: the command with a ``*.py`` word (``torchrun ... pretrain_gpt.py $ARGS``, ``python
pretrain_gpt.py ...``); its words after the ``.py`` are the framework's arguments.

A file of arguments (its first word starts with ``--``) is those words. ``. FILE`` /
``source FILE`` and ``sbatch [options] FILE`` run FILE when it lies beside the script (at most
:data:`MAX_SOURCED`), in the same shell; a command string given to ``sh -c`` / ``bash -c``
(``srun ... sh -c "$CMD"``) is read as a command. Errors name the file, the line and the
construct (:class:`~sim.errors.InputError`)."""

from __future__ import annotations

from pathlib import Path

from sim.errors import InputError
from sim.files.inputs import read_text
from sim.jobs.shell import _ASSIGN, _BLOCK_CLOSE, _BLOCK_OPEN, _NAME, Shell, Token, Word, tokenize

#: the most files one launch may source or submit (``.``, ``source``, ``sbatch``)
MAX_SOURCED = 16


def launch_arguments(text: str, file: str) -> list[Word]:
    """The arguments of the script's one training command, or the words of an argument file."""
    try:
        toks = tokenize(text, file)
        words = [t for t in toks if not t.op]
        if words and words[0].text.startswith("--"):
            sh = Shell(file)
            return [w for t in toks if not t.op for w in sh.fields(t)]
        return _Runner(file).run(toks)
    except RecursionError:  # ${X:-${X:-...}} nested thousands deep
        raise InputError("expansions nested too deep", file=file, field="script") from None

#: commands that print or test a script's name rather than run it
_NOT_LAUNCHERS = ("echo", "printf", "test", "[", "[[", "ls", "cat", "mkdir", "cp", "cd")


class _Runner:
    def __init__(self, file: str):
        self.file = file
        self.folder = Path(file).resolve().parent
        self.sh = Shell(file, str(self.folder))
        self.sourced: list[str] = []
        # block frames: [kind, line, state]; state True (running), False (skipped), or the
        # reason it cannot be evaluated; for if: [.., taken-branch]
        self.blocks: list[list] = []
        self.launches: list[tuple[int, list[Word]]] = []

    def run(self, toks: list[Token]) -> list[Word]:
        for cmd in _commands(toks):
            self._command(cmd)
        if self.blocks:
            kind, line = self.blocks[-1][0], self.blocks[-1][1]
            raise InputError(f"'{kind}' opened here is never closed", file=self.file,
                             line=line, field="script")
        if not self.launches:
            raise InputError("no training command (a command with a '*.py' script, e.g. "
                             "'torchrun ... pretrain_gpt.py ...') and no '--' arguments",
                             file=self.file, field="script")
        if len(self.launches) > 1:
            a, b = self.launches[0][0], self.launches[1][0]
            raise InputError(f"two training commands (lines {a} and {b}); give a script with "
                             "one", file=self.file, line=b, field="script")
        return self.launches[0][1]

    def _state(self):
        """True (running), False (skipped) or why the current block cannot be evaluated."""
        why = True
        for frame in self.blocks:
            if frame[2] is False:
                return False
            if frame[2] is not True and why is True:
                why = frame[2]
        return why

    def _command(self, cmd: list[Token]) -> None:
        head = cmd[0].text if not cmd[0].op else ""
        line = cmd[0].line
        if head in ("if", "elif", "else", "fi", "then"):
            self._if(head, cmd)
            return
        if head in _BLOCK_OPEN or _is_function(cmd):
            kind = _BLOCK_OPEN.get(head, "function")
            self.blocks.append([kind, line, f"{kind} at line {line}"])
            return
        if head in _BLOCK_CLOSE or head == "}":
            if self.blocks and self.blocks[-1][0] in (_BLOCK_CLOSE.get(head), "function"):
                self.blocks.pop()
            return
        state = self._state()
        if state is False:
            return
        if head == "export":
            cmd = cmd[1:]
        if cmd and _ASSIGN.match(cmd[0].text) and not cmd[0].op:
            self._assign(cmd, state)
            return
        if state is not True:
            self._maybe_launch(cmd, state)
            return
        self._maybe_launch(cmd, None)

    def _assign(self, cmd: list[Token], state) -> None:
        m = _ASSIGN.match(cmd[0].text)
        name, append = m.group(1), bool(m.group(2))
        line = cmd[0].line
        if state is not True:
            self.sh.unknown(name, f"assigned inside a {state}", line)
            return
        rest = cmd[0].text[m.end():]
        if not rest and len(cmd) > 1 and cmd[1].op and cmd[1].text == "(":
            items = [t for t in cmd[2:] if not t.op]
            value = [w for t in items for w in self.sh.fields(t)]
            self.sh.assign(name, value, append)
            return
        words = self.sh.fields(Token(rest, line), split=False) if rest else []
        self.sh.assign(name, words[0] if words else Word("", line), append)

    def _maybe_launch(self, cmd: list[Token], unknown_block) -> None:
        words = [w for t in cmd if not t.op for w in self.sh.fields(t)]
        if not words or words[0].text in _NOT_LAUNCHERS:
            return
        if words[0].text in (".", "source", "sbatch") and not unknown_block:
            self._source(words)
            return
        for k, w in enumerate(words[:-2]):  # srun ... sh -c "python ... pretrain_gpt.py ..."
            if w.text in ("sh", "bash") and words[k + 1].text == "-c":
                inner = [t for t in tokenize(words[k + 2].text, self.file) if not t.op]
                self._maybe_launch([Token(t.text, words[k + 2].line) for t in inner],
                                   unknown_block)
                return
        for k, w in enumerate(words):
            if w.text.endswith(".py") and not w.text.startswith("-") and " " not in w.text:
                if unknown_block:
                    raise InputError(f"the training command runs inside a {unknown_block}, "
                                     "which is not evaluated", file=self.file, line=w.line,
                                     field="script")
                self.launches.append((cmd[0].line, words[k + 1:]))
                return

    def _source(self, words: list[Word]) -> None:
        """``. FILE``, ``source FILE``, ``sbatch [options] FILE``: run FILE, a file beside
        the script, in this shell (sbatch's job sees the variables as the script left them:
        simrun does not track which were exported)."""
        path = next((w for w in words[1:] if not w.text.startswith("-")), None)
        if words[0].text == "sbatch":  # the job script: the first argument naming a file here
            path = next((w for w in words[1:] if not w.unknown and not w.text.startswith("-")
                         and (self.folder / w.text).resolve().parent == self.folder
                         and (self.folder / w.text).is_file()), path)
        if path is None:
            return
        if path.unknown:
            raise InputError(f"the file cannot be evaluated: {path.unknown}", file=self.file,
                             line=path.line, field=words[0].text)
        target = (self.folder / path.text).resolve()
        if target.parent != self.folder or not target.is_file():
            raise InputError(f"{path.text!r} is not a file beside the script (simrun reads "
                             "only those)", file=self.file, line=path.line, field=words[0].text)
        if len(self.sourced) >= MAX_SOURCED:
            raise InputError(f"more than {MAX_SOURCED} sourced files", file=self.file,
                             line=path.line, field=words[0].text)
        self.sourced.append(target.name)
        text = read_text(target, what="sourced script")
        outer, self.file = self.file, str(target)
        self.sh.file = self.file
        try:
            for cmd in _commands(tokenize(text, self.file)):
                self._command(cmd)
        finally:
            self.file, self.sh.file = outer, outer

    def _if(self, head: str, cmd: list[Token]) -> None:
        line = cmd[0].line
        if head == "if":
            self.blocks.append(["if", line, False, False])
        if not self.blocks or self.blocks[-1][0] != "if":
            raise InputError(f"'{head}' without 'if'", file=self.file, line=line,
                             field="script")
        frame = self.blocks[-1]
        if head == "fi":
            self.blocks.pop()
            return
        if head == "else":
            frame[2] = (not frame[3]) if frame[3] in (True, False) else frame[3]
            return
        if head == "then":
            return
        cond = _condition(cmd[1:], self.sh)
        if isinstance(cond, str):
            frame[2] = frame[3] = f"condition ({cond}) at line {line}"
        elif frame[3] is True:
            frame[2] = False
        elif frame[3] is False:
            frame[2] = cond
            frame[3] = cond
        # an unknown earlier branch keeps the block unknown


def _is_function(cmd: list[Token]) -> bool:
    """``name() {`` or ``function name``."""
    if cmd[0].text == "function" and not cmd[0].op:
        return True
    return (len(cmd) > 2 and _NAME.fullmatch(cmd[0].text) is not None
            and cmd[1].text == "(" and cmd[2].text == ")")


def _commands(toks: list[Token]):
    """Split tokens into commands at newlines, ';', '&&', '||', '|' (outside array
    parentheses); ``if``'s condition stays with its ``if`` up to ``then``."""
    cmd: list[Token] = []
    depth = 0
    for t in toks:
        if t.op and t.text == "(":
            depth += 1
        elif t.op and t.text == ")":
            depth = max(0, depth - 1)
        in_cond = cmd and cmd[0].text in ("if", "elif") and not cmd[0].op
        if t.op and t.text in ("\n", ";", "&&", "||", "|") and depth == 0:
            if in_cond and t.text != "\n" or (in_cond and not any(
                    c.text == "then" for c in cmd)):
                cmd.append(t)
                continue
            if cmd:
                yield _drop_then(cmd)
            cmd = []
            continue
        if not t.op and t.text == "then" and in_cond:
            yield _drop_then(cmd)
            cmd = []
            continue
        cmd.append(t)
    if cmd:
        yield cmd


def _drop_then(cmd: list[Token]) -> list[Token]:
    while cmd and cmd[-1].op and cmd[-1].text in (";", "\n"):
        cmd = cmd[:-1]
    return cmd


def _condition(toks: list[Token], sh: Shell):
    """True / False, or the text of a condition the subset does not evaluate."""
    result = None
    join = None
    test: list[Token] = []
    for t in [*toks, Token("&&", 0, op=True)]:
        if t.op and t.text in ("&&", "||", ";", "\n"):
            if not test:
                continue
            value = _test(test, sh)
            if isinstance(value, str):
                return value
            result = value if join is None else (
                (result and value) if join == "&&" else (result or value))
            join = t.text if t.text in ("&&", "||") else join
            test = []
        else:
            test.append(t)
    return bool(result)


def _test(test: list[Token], sh: Shell):
    raw = " ".join(t.text for t in test)
    if len(test) < 2 or (test[0].text, test[-1].text) not in (("[[", "]]"), ("[", "]")):
        return raw
    inner = test[1:-1]
    words = [sh.fields(t, split=False) for t in inner]
    texts = [w[0].text if w else "" for w in words]
    if any(x and x[0].unknown for x in words):
        return raw
    if len(texts) == 3 and texts[1] in ("==", "=", "!="):
        return (texts[0] == texts[2]) == (texts[1] != "!=")
    if len(texts) == 2 and texts[0] in ("-z", "-n"):
        return (texts[1] == "") == (texts[0] == "-z")
    return raw

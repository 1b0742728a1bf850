"""Reading input files safely: bytes → text → lines, and YAML (safe loading only).

Every reader of a user file goes through here, so every file gets the same treatment:

- I/O problems (missing file, directory, permissions) become :class:`~sim.errors.InputError`;
- encodings: UTF-8 (with or without BOM) and UTF-16 / UTF-32 *with* a BOM (what Windows tools
  such as PowerShell's ``>`` write) are decoded; anything else that is not valid UTF-8 (e.g.
  Latin-1) is an error naming the line and the byte; NUL bytes without a UTF-16/32 BOM mean
  binary data and are an error;
- lines are split at ``\\n``, ``\\r\\n`` and ``\\r`` only, so line numbers in messages are the ones
  an editor shows (``str.splitlines`` would also split at form feeds, ``\\x85``, U+2028 …);
- YAML is read with PyYAML's *safe* loader (no ``!!python/*`` tags), duplicate keys are
  rejected (PyYAML silently keeps the last one), and every exception PyYAML can raise for bad
  text (``ValueError`` from ``!!int x`` or ``2001-13-45``, ``KeyError`` from ``!!bool x``,
  ``RecursionError`` from deep nesting) becomes one :class:`InputError` with the line.
"""

from __future__ import annotations

import codecs
import re
import reprlib
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


def read_bytes(path: str | Path, *, what: str = "file", flag: str | None = None) -> bytes:
    """The bytes of ``path``; I/O problems become :class:`InputError` (naming ``flag``)."""
    p = Path(path)
    prefix = "" if what == "file" else f"cannot read {what}: "
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{prefix}no such file", file=str(path), field=flag) from None
    except IsADirectoryError:
        raise InputError(f"{prefix}is a directory, expected a file", file=str(path),
                         field=flag) from None
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror or e}", file=str(path),
                         field=flag) from None


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


# Characters YAML allows in a stream (YAML 1.1 §5.1); anything else is rejected up front so
# the message can name the line (libyaml reports byte offsets).
_YAML_BAD_CHAR = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _yaml_loader():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed: ~7× faster

    class UniqueKeySafeLoader(base):
        """PyYAML's safe loader that rejects a key given twice in one mapping and remembers
        the node it constructs last (for errors PyYAML raises without a position)."""

        last_mark = None

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == (
                            "tag:yaml.org,2002:merge"):
                        continue
                    key = self.construct_object(key_node)
                    try:
                        first = seen.get(key)
                    except TypeError:  # unhashable: PyYAML reports it below
                        continue
                    if first is not None:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {show(key)} (first given on line "
                            f"{first})", key_node.start_mark)
                    seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep)

        def construct_object(self, node, deep=False):
            self.last_mark = node.start_mark
            return super().construct_object(node, deep)

    return UniqueKeySafeLoader


_LOADER = None


def load_yaml(text: str, file: str) -> Any:
    """Parse one YAML document with the safe loader (see the module docstring)."""
    return load_yaml_with_lines(text, file)[0]


def load_yaml_with_lines(text: str, file: str) -> tuple[Any, dict[tuple, int]]:
    """:func:`load_yaml` and the 1-based line of every key path (:func:`node_lines`)."""
    import yaml

    global _LOADER
    if _LOADER is None:
        _LOADER = _yaml_loader()
    bad = _YAML_BAD_CHAR.search(text)
    if bad:
        raise InputError(f"not valid YAML: control character U+{ord(bad.group()):04X} is not "
                         "allowed", file=file, line=text[: bad.start()].count("\n") + 1,
                         field="encoding")
    loader = None
    try:
        loader = _LOADER(text)
        node = loader.get_single_node()
        if node is None:
            return None, {}
        return loader.construct_document(node), node_lines(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(f"not valid YAML: {problem}", file=file,
                         line=mark.line + 1 if mark is not None else None) from None
    except RecursionError:
        raise InputError("not valid YAML: nested too deeply", file=file) from None
    except (ValueError, KeyError, TypeError, OverflowError) as e:
        # PyYAML's scalar constructors raise these for e.g. `!!int x`, `!!bool x`,
        # `2001-13-45` (a timestamp with month 13)
        mark = loader.last_mark if loader is not None else None
        raise InputError(f"not valid YAML: bad scalar value ({type(e).__name__}: {e})",
                         file=file, line=mark.line + 1 if mark is not None else None) from None
    finally:
        if loader is not None:
            loader.dispose()


def node_lines(root: Any) -> dict[tuple, int]:
    """1-based line of every key path below a composed YAML node (``("node", "nics",
    "count")``; list items by index). Each node is visited once, so aliases — even cyclic
    ones — cannot blow it up."""
    import yaml

    out: dict[tuple, int] = {}
    seen: set[int] = set()
    todo: list[tuple[Any, tuple]] = [(root, ())]
    while todo:
        node, path = todo.pop()
        out.setdefault(path, node.start_mark.line + 1)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    continue
                key_path = path + (k.value,)
                out[key_path] = k.start_mark.line + 1
                todo.append((v, key_path))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                todo.append((v, path + (i,)))
    return out


def field_line(lines: dict[tuple, int], field: str | None) -> int | None:
    """Line of a dotted ``field`` (``moe.top_k``) in a :func:`node_lines` map, or of its nearest
    parent."""
    if not field:
        return None
    path = tuple(field.split("."))
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None

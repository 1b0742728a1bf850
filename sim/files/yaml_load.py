"""Bounded, safe YAML loading with line numbers (topology, model spec and validation files).

- PyYAML's *safe* constructor only (no ``!!python/*`` tags); libyaml's parser when installed
  (events only: the nodes are composed here, in Python, so every bound below is enforced);
- a key given twice in one mapping is an error (PyYAML silently keeps the last one);
- **bounds**, each a one-line :class:`~sim.errors.InputError` with the line, checked while
  composing, before anything is constructed:

  - nesting depth ≤ :data:`MAX_DEPTH` (the parser is stopped there, so ``[`` × 25000 neither
    crashes libyaml's recursive composer nor costs its quadratic scan);
  - expanded size ≤ :data:`MAX_NODES` nodes, counting every alias and merge key (``<<: *a``)
    as a full copy of its anchor: a "billion laughs" or merge-key bomb is refused at the alias
    that crosses the bound, and the readers behind this loader, which walk the data as a tree,
    never see more than that many values;
  - an alias inside the node it names (``&a [*a]``) is a cycle: refused;

- every exception PyYAML can raise for bad text (``ValueError`` from ``!!int x`` or
  ``2001-13-45``, ``KeyError`` from ``!!bool x``) becomes one :class:`InputError` with the line;
- line numbers of key paths are looked up on demand in the composed nodes (:class:`LineMap`),
  so they cost no memory beyond the nodes themselves.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from sim.errors import InputError
from sim.files.inputs import show

MAX_DEPTH = 64
"""Deepest nesting of YAML collections (the shipped schemas need 5)."""

MAX_NODES = 100_000
"""Most YAML nodes (scalars, lists, mappings) a file may expand to, counting each alias and
merge-key use as a copy of what it names. The shipped topologies have ~100 and model specs
~30; composing 100,000 takes about a second and 100 MB."""

# Characters YAML allows in a stream (YAML 1.1 §5.1); anything else is rejected up front so
# the message can name the line (libyaml reports byte offsets).
_YAML_BAD_CHAR = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class _Bounded(yaml.composer.Composer):
    """PyYAML's composer with the depth, expansion and cycle bounds of the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.expanded = 0
        self.sizes: dict[str, int] = {}  # finished anchor → its expanded node count
        self.last_mark = None

    def _grow(self, n: int, mark) -> None:
        self.expanded += n
        if self.expanded > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"expands to more than {MAX_NODES:,} values (aliases and merge "
                "keys count as copies); simrun refuses it", mark)

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            size = self.sizes.get(event.anchor)
            if size is None and event.anchor in self.anchors:
                raise yaml.composer.ComposerError(
                    None, None, f"alias *{event.anchor[:40]} is inside the node it names "
                    "(a cycle)", event.start_mark)
            self._grow(size or 0, event.start_mark)
            return super().compose_node(parent, index)  # PyYAML: undefined aliases
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        before = self.expanded
        self._grow(1, event.start_mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if event.anchor is not None:
            self.sizes[event.anchor] = self.expanded - before
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            _check_duplicates(self, node)
        return super().construct_mapping(node, deep)

    def construct_object(self, node, deep=False):
        self.last_mark = node.start_mark
        return super().construct_object(node, deep)


def _check_duplicates(loader, node) -> None:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == (
                "tag:yaml.org,2002:merge"):
            continue
        key = loader.construct_object(key_node)
        try:
            first = seen.get(key)
        except TypeError:  # unhashable: PyYAML reports it
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {show(key)} (first given on line {first})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1


try:  # libyaml's parser when PyYAML was built with it
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - pure-Python PyYAML
    _Parser = None


def _loader_class():
    if _Parser is not None:  # libyaml's parser (events, ~7× faster), composed in Python
        class Loader(_Bounded, _Parser, yaml.constructor.SafeConstructor,
                     yaml.resolver.Resolver):
            def __init__(self, stream):
                _Parser.__init__(self, stream)
                _Bounded.__init__(self)
                yaml.constructor.SafeConstructor.__init__(self)
                yaml.resolver.Resolver.__init__(self)
        return Loader

    class PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _Bounded,
                   yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        def __init__(self, stream):
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            _Bounded.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
    return PyLoader


_LOADER = _loader_class()


def load_yaml(text: str, file: str) -> Any:
    """Parse one YAML document within the bounds of the module docstring."""
    return load_yaml_with_lines(text, file)[0]


def load_yaml_with_lines(text: str, file: str) -> tuple[Any, LineMap]:
    """:func:`load_yaml` and the 1-based line of every key path (:class:`LineMap`)."""
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
            return None, LineMap(None)
        return loader.construct_document(node), LineMap(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        if problem == "exceeded maximum nesting depth":  # the libyaml of PyYAML 6.0.4's wheels
            # stops its scanner at 1000 levels, before the composer's bound: the same finding
            problem = f"nested more than {MAX_DEPTH} levels deep"
        raise InputError(f"not valid YAML: {problem}", file=file,
                         line=mark.line + 1 if mark is not None else None) from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH keeps far below the limit
        raise InputError("not valid YAML: nested too deeply", file=file) from None
    except (ValueError, KeyError, TypeError, OverflowError, IndexError) as e:
        # PyYAML's scalar constructors raise these for e.g. `!!int x`, `!!bool x`,
        # `2001-13-45` (a timestamp with month 13), `!!int` with no value (IndexError)
        mark = loader.last_mark if loader is not None else None
        raise InputError(f"not valid YAML: bad scalar value ({type(e).__name__}: {e})",
                         file=file, line=mark.line + 1 if mark is not None else None) from None
    finally:
        if loader is not None:
            loader.dispose()


class LineMap:
    """1-based line of a key path below a composed YAML node (``("node", "nics", "count")``;
    list items by index): the line of the key for a mapping entry, of the item's start for a
    list item. Found by walking the nodes, so it stores nothing (no per-node path tuples)."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def get(self, path: tuple, default: int | None = None) -> int | None:
        node, line = self.root, None
        if node is None:
            return default
        line = node.start_mark.line + 1
        for part in path:
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                pair = next((p for p in reversed(node.value) if isinstance(
                    p[0], yaml.ScalarNode) and p[0].value == part), None)
                if pair is None:
                    return default
                line, node = pair[0].start_mark.line + 1, pair[1]
            elif (isinstance(node, yaml.SequenceNode) and type(part) is int
                  and 0 <= part < len(node.value)):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return default
        return line

    def __contains__(self, path: tuple) -> bool:
        return self.get(path) is not None

    def __getitem__(self, path: tuple) -> int:
        line = self.get(path)
        if line is None:
            raise KeyError(path)
        return line


def field_line(lines: LineMap, field: str | None) -> int | None:
    """Line of a dotted ``field`` (``moe.top_k``) in a :class:`LineMap`, or of its nearest
    parent."""
    if not field:
        return None
    path = tuple(field.split("."))
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None

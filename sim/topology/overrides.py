"""What-if overrides of a topology file: ``--set KEY=VALUE`` (repeatable).

``KEY`` is the dotted path of any field of the topology schema (docs/topology.md), with list
items by index: ``fabric.link_bandwidth_gbps``, ``node.gpu.hbm_GBps``,
``node.gpu.peak_tflops.bf16``, ``fabric.levels[0].oversubscription`` (or ``levels.0``).
``VALUE`` is read as YAML, like the file (``800``, ``true``, ``[0, 1]``, ``{bf16: 989}``).
The override replaces the value in the parsed file *before* validation, so it is checked by the
same code with the same messages as a value in the file; errors name ``--set KEY`` instead of a
file line. Each override is listed in the report's assumptions with the file's value.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from sim.errors import UsageError
from sim.files.inputs import show
from sim.files.yaml_load import load_yaml_with_lines

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class Override:
    """One ``--set``: the key path, the new value and the file's value (None if absent)."""

    text: str  # the key as given
    path: tuple  # str keys and int list indices
    value: Any
    old: Any = None

    def describe(self) -> str:
        was = "not in the file" if self.old is None else f"file: {show(self.old)}"
        return f"{self.text} = {show(self.value)} ({was})"


def parse_override(text: str) -> Override:
    """``KEY=VALUE`` → :class:`Override` (value read as YAML); :class:`UsageError` if malformed."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"expected KEY=VALUE (e.g. fabric.link_bandwidth_gbps=800), got "
                         f"{show(text)}", field="set")
    path: list = []
    pos = 0
    for m in _PART.finditer(key):
        between = key[pos:m.start()]
        if between not in ("", "."):
            break
        name, index = m.groups()
        path.append(int(index) if index is not None else (int(name) if name.isdigit() else name))
        pos = m.end()
    if pos != len(key) or not path or not isinstance(path[0], str):
        raise UsageError(f"malformed key {show(key)} (expected dotted names such as "
                         "node.gpu.hbm_GBps or fabric.levels[0].radix)", field="set")
    value, _ = load_yaml_with_lines(raw, f"--set {key}")
    return Override(key, tuple(path), value)


def apply_overrides(data: Any, overrides: list[Override]) -> tuple[Any, list[Override]]:
    """Put every override into the parsed file ``data`` (a new structure; ``data`` is not
    changed); returns it and the overrides with the file's old values filled in."""
    data = copy.deepcopy(data) if data is not None else {}
    done = []
    for ov in overrides:
        node = data
        for depth, part in enumerate(ov.path[:-1]):
            node = _child(node, part, ov, depth)
        last = ov.path[-1]
        if isinstance(node, list):
            _check_index(node, last, ov, len(ov.path) - 1)
            old = node[last]
        elif isinstance(node, dict):
            old = node.get(last)
        else:
            raise _not_section(ov, len(ov.path) - 1)
        node[last] = ov.value
        done.append(Override(ov.text, ov.path, ov.value, old))
    return data, done


def _child(node: Any, part: Any, ov: Override, depth: int) -> Any:
    if isinstance(node, dict):
        if not isinstance(node.get(part), (dict, list)):
            if part in node and node[part] is not None:
                raise _not_section(ov, depth + 1)
            node[part] = {}  # a section the file leaves out: created, then validated
        return node[part]
    if isinstance(node, list):
        _check_index(node, part, ov, depth)
        return node[part]
    raise _not_section(ov, depth)


def _check_index(node: list, part: Any, ov: Override, depth: int) -> None:
    where = ".".join(map(str, ov.path[:depth]))
    if not isinstance(part, int) or not 0 <= part < len(node):
        raise UsageError(f"{where} is a list of {len(node)}; index {show(part)} is not in it",
                         field=f"--set {ov.text}")


def _not_section(ov: Override, depth: int) -> UsageError:
    where = ".".join(map(str, ov.path[:depth]))
    return UsageError(f"{where} is a value, not a section with keys", field=f"--set {ov.text}")

"""Every field of a validation file against the numeric edge cases (issue 31): each value either
loads or is refused with an :class:`InputError` naming the file, line and field — never an
internal error (the campaign found ZeroDivisionError on ``measured_tokens_per_s_per_gpu: .inf``,
OverflowError on a 400-digit ``global_batch``, TypeError on ``tp: null``)."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from hostile_support import ROOT

from sim.errors import InputError
from sim.validation.cases import load_cases

SRC = ROOT / "workloads" / "validation" / "torchtitan-a100-fsdp.yaml"
NEVER_VALID = (".nan", ".inf", "-.inf", "1" * 400, "[1]", "{a: 1}")
"""Values no key takes (a combination of valid values may be refused at another key's line)."""
EDGES = ["0", "-0", "-1", ".nan", ".inf", "-.inf", "1e308", "1e-308", "4.9e-324", str(2**64),
         "1" * 400, "1_0", "true", "x", "[1]", "{a: 1}", "null", "''", "2.5"]


def _base() -> dict:
    data = yaml.safe_load(SRC.read_text())
    data["topology"] = str(ROOT / "topologies" / "dgx-a100-1024.yaml")
    data["cases"] = data["cases"][:1]
    data["cases"][0]["model"] = str(ROOT / "workloads" / "models" / "llama2-13b.yaml")
    return data


def _fields() -> list[tuple[str, str]]:
    data = _base()
    return ([("defaults", k) for k in data["defaults"]]
            + [("case", k) for k in data["cases"][0]] + [("case", "measured_s")])


@pytest.mark.parametrize("where,key", _fields())
def test_every_edge_value_loads_or_is_refused_naming_its_line(where, key, tmp_path):
    refused = 0
    for edge in EDGES:
        data = copy.deepcopy(_base())
        target = data["defaults"] if where == "defaults" else data["cases"][0]
        target[key] = "@@"
        if key == "measured_s":  # exactly one measurement
            del target["measured_tokens_per_s_per_gpu"]
        text = yaml.safe_dump(data, sort_keys=False).replace("'@@'", edge)
        path = tmp_path / "v.yaml"
        path.write_text(text)
        rows = text.splitlines()
        start = rows.index("cases:") if where == "case" else rows.index("defaults:")
        line = next(i for i, t in enumerate(rows, 1) if i > start and t.strip().lstrip(
            "- ").startswith(f"{key}:"))
        try:
            load_cases(path)
        except InputError as e:
            refused += 1
            msg = str(e)
            assert "\n" not in msg, msg
            assert re.match(rf"{re.escape(str(path))}:\d+: (cases|defaults)", msg), msg
            if edge in NEVER_VALID:  # the value itself is wrong: its own line and key
                assert msg.startswith(f"{path}:{line}: ") and key in msg, (edge, msg)
        else:
            assert edge not in NEVER_VALID, edge
    assert refused >= len(NEVER_VALID), refused

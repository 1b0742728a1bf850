"""Typed assumption lines (sim/assumption.py): decisions read the key, ``departs`` and
``explains`` of a line, never its text; the report's JSON and text keep the strings."""

from __future__ import annotations

import ast
import json
import pickle

from conftest import ROOT

from sim.assumption import Assumption, departs, explains, key_of
from sim.report.summary import departures, top_assumptions

#: names a collection of assumption lines goes by in sim/
_LINES = ("assumptions", "notes", "network_notes")
_TEXT_TESTS = {"startswith", "endswith", "find", "index", "count", "search", "match",
               "fullmatch", "findall"}


def _reads_prose(tree: ast.AST) -> list[int]:
    """Line numbers where a loop or comprehension over assumption lines tests each line's text
    (a string method or a regex on it, or a substring test)."""
    hits = []
    for node in ast.walk(tree):
        gens = []
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            gens = [(g.target, g.iter, node) for g in node.generators]
        elif isinstance(node, ast.For):
            gens = [(node.target, node.iter, node)]
        for target, it, scope in gens:
            if not (isinstance(target, ast.Name) and any(n in ast.unparse(it) for n in _LINES)):
                continue
            var = target.id
            for sub in ast.walk(scope):
                if isinstance(sub, ast.Call):
                    f = sub.func
                    on_var = (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                              and f.value.id == var and f.attr in _TEXT_TESTS)
                    regex = (isinstance(f, ast.Attribute) and f.attr in _TEXT_TESTS
                             and any(isinstance(a, ast.Name) and a.id == var for a in sub.args))
                    if on_var or regex:
                        hits.append(sub.lineno)
                if isinstance(sub, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn))
                                                        for op in sub.ops):
                    if (isinstance(sub.left, ast.Constant) and isinstance(sub.left.value, str)
                            and any(isinstance(c, ast.Name) and c.id == var
                                    for c in sub.comparators)):
                        hits.append(sub.lineno)
    return hits


def test_no_module_of_sim_chooses_by_the_text_of_an_assumption_line():
    found = {}
    for path in sorted((ROOT / "sim").rglob("*.py")):
        hits = _reads_prose(ast.parse(path.read_text()))
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    assert found == {}
    # the scan finds the patterns it is there for
    for bad in ('x = [a for a in rep["assumptions"] if a.startswith("MoE")]',
                'x = any("--missing" in a for a in wl.assumptions)',
                'x = [a for a in notes if _DEPARTURE.search(a)]'):
        assert _reads_prose(ast.parse(bad)), bad


def test_a_typed_line_is_its_text_in_json_and_survives_pickling():
    a = Assumption("layout: tp=2", "layout", departs=False)
    assert json.dumps([a]) == json.dumps(["layout: tp=2"]) and a == "layout: tp=2"
    b = pickle.loads(pickle.dumps(a))
    assert (b, key_of(b), departs(b), dict(explains(b))) == ("layout: tp=2", "layout", False,
                                                             {"idle": 0})
    assert key_of("plain") == "" and not departs("plain") and explains("plain") == {}


def _report(assumptions: list[str]) -> dict:
    """A one-stage report whose iteration is 60% compute, 30% exposed TP, 10% idle."""
    stage = {"compute_s": 0.6, "optimizer_s": 0.0, "bubble_s": 0.1,
             "exposed_comm_s": {"TP": 0.3}}
    return {"iteration_time_s": 1.0, "stages": [stage], "assumptions": assumptions}


def test_the_summary_chooses_by_the_typed_fields_not_the_words():
    # untyped lines whose words look like the old prefixes are not chosen for a part
    plain = ["compute model (A100): words only", "TP communication: words only"]
    warn = Assumption("the header's vpp is not used", "header-vpp", departs=True)
    tp = Assumption("collectives of the tensor-parallel group ...", "tp-comm")
    comp2 = Assumption("the kernel table timed 20% ...", "compute-time")  # rank 3
    comp0 = Assumption("the roofline ...", "compute-model")  # rank 0: preferred
    idle = Assumption("order of the microbatches ...", "schedule")
    rep = _report([*plain, warn, comp2, tp, idle, comp0])
    assert departures(rep) == [warn]
    # departures first, then by part size: compute (lowest rank first), TP, idle
    assert top_assumptions(rep) == [warn, comp0, tp, idle]
    # fillers skip sub-lines
    detail = Assumption("  a sub-line", detail=True)
    assert top_assumptions(_report([detail, "first", "second", "third"])) == [
        "first", "second", "third"]

"""The schedule type and its registry (sim/pipeline/types.py, kinds.py, registry.py): every
schedule is one object, looked up by name only in the registry; its properties, virtual-stage
mapping, transfer rule and ideal bubble (the closed forms of docs/schedules.md and the README);
and no schedule name is compared outside sim/pipeline/ and sim/cli/."""

import ast
from fractions import Fraction
from pathlib import Path

import pytest

from sim.errors import UsageError
from sim.parallel.layout import Layout
from sim.pipeline.ops import ScheduleOp
from sim.pipeline.registry import (
    SCHEDULES,
    default_schedule,
    find_schedule,
    names_where,
    schedule_type,
    schedules,
)
from sim.pipeline.schedules import schedule_table

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipe")


def test_registry_holds_the_seven_schedules_in_order():
    assert SCHEDULES == NAMES
    assert tuple(s.name for s in schedules()) == NAMES
    for name in NAMES:
        assert schedule_type(name).name == name
        assert schedule_type(name) is schedule_type(name)  # one object per schedule
        assert find_schedule(name) is schedule_type(name)
    assert find_schedule(None) is None and find_schedule("pipedream") is None


def test_unknown_name_is_a_usage_error_naming_the_option():
    with pytest.raises(UsageError, match="unknown schedule 'pipedream'; choose one of gpipe, "
                                         "1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe") as e:
        schedule_type("pipedream")
    assert e.value.field == "schedule"


def test_default_schedule_is_megatrons():
    assert default_schedule(1).name == "1f1b"
    assert default_schedule(2).name == "interleaved"
    assert Layout(pp=4, vpp=3).schedule_type.name == "interleaved"
    assert Layout(pp=4).schedule_type.name == "1f1b"
    assert Layout(pp=4, vpp=2, schedule="zb-v").schedule_type is schedule_type("zb-v")


def test_properties_of_each_schedule():
    assert names_where(lambda s: s.splits_backward) == ("zb-h1", "zb-h2", "zb-v")
    assert names_where(lambda s: s.partly_splits_backward) == ("dualpipe",)
    assert names_where(lambda s: s.v_shape) == ("zb-v",)
    assert names_where(lambda s: s.bidirectional) == ("dualpipe",)
    assert names_where(lambda s: s.interleaves) == ("interleaved",)
    assert names_where(lambda s: s.delays_grad_sync) == ("interleaved",)
    assert names_where(lambda s: s.defers_embedding_wgrad) == ("1f1b", "interleaved")
    assert names_where(lambda s: s.default_vpp == 2) == ("zb-v", "dualpipe")
    # combined 1F1B (--overlap-moe-expert-parallel-comm): interleaved, or 1F1B without PP
    assert names_where(lambda s: s.supports_combined_1f1b(4)) == ("interleaved",)
    assert names_where(lambda s: s.supports_combined_1f1b(1)) == ("1f1b", "interleaved")


def test_combined_1f1b_refused_where_megatron_refuses_it():
    with pytest.raises(UsageError, match="only in the interleaved schedule") as e:
        schedule_type("1f1b").combined_ops(4, 0, 8)
    assert e.value.field == "overlap_moe_expert_parallel_comm"
    # p = 1: F0 alone, then (F1 & B0), (F2 & B1), then B2
    ops = schedule_type("1f1b").combined_ops(1, 0, 3)
    assert [o.label(False) for o in ops] == ["F0", "F1&B0", "F2&B1", "B2"]


def test_virtual_stage_mappings():
    p = 4
    rr = schedule_type("interleaved")
    assert [rr.virtual_stage(p, r, c) for c in range(3) for r in range(p)] == list(range(12))
    assert [rr.stage_chunk(p, vs) for vs in (0, 5, 11)] == [(0, 0), (1, 1), (3, 2)]
    v = schedule_type("zb-v")  # V: chunk 1 of stage r is 2p-1-r
    assert [v.virtual_stage(p, r, 1) for r in range(p)] == [7, 6, 5, 4]
    assert [v.stage_chunk(p, vs) for vs in range(8)] == [
        (0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (2, 1), (1, 1), (0, 1)]
    assert v.last_stage(p, 2) == 0 and rr.last_stage(p, 3) == 3
    d = schedule_type("dualpipe")  # chunk = direction; rank r runs stage r and p-1-r
    assert [(d.virtual_stage(p, r, 0), d.virtual_stage(p, r, 1)) for r in range(p)] == [
        (0, 3), (1, 2), (2, 1), (3, 0)]
    assert d.virtual_stage_count(p, 2) == 4 and rr.virtual_stage_count(p, 3) == 12
    with pytest.raises(ValueError, match="two ranks"):
        d.stage_chunk(p, 0)


def test_transfer_rules():
    p = 4
    rr, v, d = schedule_type("interleaved"), schedule_type("zb-v"), schedule_type("dualpipe")
    f, b, w = ScheduleOp("F", 0, 1), ScheduleOp("B", 0, 1), ScheduleOp("W", 0, 1)
    # interleaved, v = 2: stage 3 chunk 0 (vs 3) sends its forward to stage 0 chunk 1 (vs 4)
    assert rr.transfer(p, 2, 3, ScheduleOp("F", 0, 0), out=True) == (0, 4)
    assert rr.transfer(p, 2, 0, f, out=False) == (3, 4)  # received as vs 4 from stage 3
    assert rr.transfer(p, 2, 0, b, out=True) == (3, 3)  # gradient back to vs 3
    assert rr.transfer(p, 2, 3, f, out=True) is None  # the last virtual stage
    assert rr.transfer(p, 2, 0, w, out=True) is None  # W moves nothing
    # zb-v: the turn of the V (stage 3, chunk 0 → chunk 1) stays on the stage
    assert v.transfer(p, 2, 3, ScheduleOp("F", 0, 0), out=True) is None
    assert v.transfer(p, 2, 3, f, out=True) == (2, 5)
    assert v.transfer(p, 2, 0, f, out=True) is None  # vs 7, the last
    # dualpipe: direction 1 runs from rank p-1 to rank 0
    assert d.transfer(p, 2, 3, f, out=True) == (2, 1)
    assert d.transfer(p, 2, 0, f, out=True) is None
    assert d.transfer(p, 2, 0, ScheduleOp("F", 0, 0), out=True) == (1, 1)


@pytest.mark.parametrize("name, p, m, v, ideal", [
    # docs/schedules.md and the README: GPipe and 1F1B (p-1)/M
    ("gpipe", 4, 8, 1, Fraction(3, 8)),
    ("1f1b", 16, 16, 1, Fraction(15, 16)),  # the README's sample: 0.9375
    # interleaved (p-1)/(vM)
    ("interleaved", 4, 8, 2, Fraction(3, 16)),
    ("interleaved", 8, 16, 4, Fraction(7, 64)),
    # ZB-H1, ZB-H2 with F = B = W: (p-1)/(3M); ZB-V (p-1)/(6M); DualPipe (p-2)/(3M)
    ("zb-h1", 4, 8, 1, Fraction(3, 24)),
    ("zb-h2", 4, 8, 1, Fraction(3, 24)),
    ("zb-v", 4, 8, 2, Fraction(3, 48)),
    ("dualpipe", 8, 16, 2, Fraction(6, 48)),
])
def test_ideal_bubble_closed_forms(name, p, m, v, ideal):
    assert schedule_type(name).ideal_bubble(p, m, v) == pytest.approx(float(ideal), abs=1e-15)


def test_bubble_formulas_for_reports():
    assert {s.name: s.bubble_formula for s in schedules()} == {
        "gpipe": "(p-1)/M", "1f1b": "(p-1)/M", "interleaved": "(p-1)/(v*M)",
        "zb-h1": "(p-1)/(3M) if F=B=W",
        "zb-h2": "(p-1)/(3M) if F=B=W (synchronous optimizer step)",
        "zb-v": "(p-1)/(6M) if F=B=W",
        "dualpipe": "(p-2)/(3M) if F=B=W: (p/2-1)(F&B+B-3W), F&B = F+B"}


def test_op_counts_match_the_tables():
    for name, p, m, v in (("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2), ("zb-h1", 4, 8, 1),
                          ("zb-h2", 4, 8, 1), ("zb-v", 4, 8, 2), ("gpipe", 3, 5, 1)):
        table = schedule_table(name, p, m, v)
        ops = sum(1 + (o.paired is not None) for row in table for o in row)
        assert schedule_type(name).op_count(p, m, v) == ops, name
    # DualPipe: every F and B (2·p·M over both directions) and a W for some backwards only;
    # the budget counts one W per backward
    table = schedule_table("dualpipe", 4, 8, 2)
    kinds = [k.kind for row in table for o in row for k in (o, o.paired) if k is not None]
    assert (kinds.count("F"), kinds.count("B")) == (64 // 2, 64 // 2)
    assert schedule_type("dualpipe").op_count(4, 8, 2) == 3 * 4 * 8 >= len(kinds)


def test_constraints_are_the_schedules_refusals():
    with pytest.raises(UsageError, match="one model chunk per stage") as e:
        schedule_type("zb-h1").check(4, 8, 2, vpp_field="vpp")
    assert e.value.field == "vpp"
    with pytest.raises(UsageError, match="only the interleaved schedule groups") as e:
        schedule_type("1f1b").check(4, 8, 1, 4)
    assert e.value.field == "microbatch_group_size"
    with pytest.raises(UsageError, match="2p−1 = 7"):
        schedule_type("zb-h2").check(4, 6)
    with pytest.raises(UsageError, match="even number of microbatches"):
        schedule_type("dualpipe").check(4, 7, 2)
    with pytest.raises(UsageError, match="M mod N"):
        schedule_type("interleaved").check(4, 6, 2)
    schedule_type("interleaved").check(4, 8, 2)  # fine


SCHEDULE_LITERALS = set(NAMES)
ALLOWED = ("sim/pipeline/", "sim/cli/")


def _schedule_literals(path: Path) -> list[tuple[int, int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted((node.lineno, node.col_offset, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in SCHEDULE_LITERALS)


def test_no_schedule_name_literal_outside_the_schedule_package_and_the_cli():
    """Code outside sim/pipeline/ and sim/cli/ asks the schedule object
    (``layout.schedule_type.v_shape``...), never compares its name: no string constant equal
    to a schedule name (``"dualpipe"``, ``in ("zb-v", "dualpipe")``...) may appear there."""
    found = []
    for path in sorted((ROOT / "sim").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(ALLOWED):
            continue
        found += [f"{rel}:{line}: {value!r}" for line, _, value in _schedule_literals(path)]
    assert found == []


def test_the_literal_scan_finds_what_it_looks_for(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('x = s in ("zb-v", "dualpipe")\ny = s == "interleaved"\n'
                     'z = f"the {s} schedule"  # prose is fine\n')
    assert [(line, value) for line, _, value in _schedule_literals(probe)] == [
        (1, "zb-v"), (1, "dualpipe"), (2, "interleaved")]


def test_no_schedule_set_constants_outside_the_schedule_package():
    """The old name sets (V_SHAPE, SPLIT_BACKWARD) are properties of the schedule now."""
    for path in sorted((ROOT / "sim").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for name in ("V_SHAPE", "SPLIT_BACKWARD"):
            assert name not in text, f"{path.relative_to(ROOT)} uses {name}"


def test_no_pipeline_module_over_300_lines():
    for path in sorted((ROOT / "sim" / "pipeline").glob("*.py")):
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 300, path.name

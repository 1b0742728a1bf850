"""Fuzzing the workload readers: random and mutated inputs either parse or raise the project's
InputError naming file/line/field — never another exception."""

from __future__ import annotations

from conftest import SEED_512, SEED_1024, SEED_OPTABLE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.errors import InputError
from sim.workload.aicb import read_aicb
from sim.workload.optable import read_optable
from sim.workload.registry import read_workload
from sim.workload.stages import LayoutOptions, build_program

AICB_SEEDS = [SEED_1024.read_text(), SEED_512.read_text()]
OPTABLE_SEED = SEED_OPTABLE.read_text()
TOKENS = ["ALLREDUCE", "ALLGATHER_EP", "REDUCESCATTER_DP_EP", "NONE", "BROADCAST", "FOO", "-1",
          "0", "1e400", "nan", "-5", "99999999999999999999999", "1.5", "", "\t", "ga:", "pp:"]
SETTINGS = settings(max_examples=1500, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def _check(fn, text: str) -> None:
    try:
        fn(text)
    except InputError as e:
        msg = str(e)
        assert msg and "\n" not in msg
        assert msg.startswith("f.txt") or e.field, msg


def _aicb_pipeline(text: str) -> None:
    w = read_aicb(text, "f.txt")
    build_program(w, LayoutOptions(default_gpus=1 << 20))


def _optable_pipeline(text: str) -> None:
    w = read_optable(text, "f.txt")
    build_program(w, LayoutOptions(default_gpus=64))


@st.composite
def mutated(draw, seeds: list[str]) -> str:
    text = draw(st.sampled_from(seeds))
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "drop", "dup", "token", "cut", "swap", "garbage"]))
        if not lines:
            break
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
            lines[i] = draw(st.text(max_size=40))
        else:
            cols = lines[i].split("\t") if "\t" in lines[i] else lines[i].split(" ")
            k = draw(st.integers(0, len(cols) - 1))
            cols[k] = draw(st.sampled_from(TOKENS))
            lines[i] = "\t".join(cols)
    return "\n".join(lines)


@SETTINGS
@given(mutated(AICB_SEEDS))
def test_aicb_mutations(text):
    _check(_aicb_pipeline, text)


@SETTINGS
@given(st.text(max_size=300))
def test_aicb_random_text(text):
    _check(_aicb_pipeline, "HYBRID_TRANSFORMER_FWD_IN_BCKWD " + text)


@SETTINGS
@given(mutated([OPTABLE_SEED]))
def test_optable_mutations(text):
    _check(_optable_pipeline, text)


@SETTINGS
@given(st.text(max_size=300))
def test_optable_random_text(text):
    _check(_optable_pipeline, OPTABLE_SEED.splitlines()[0] + "\n" + text)


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=200))
def test_registry_on_random_bytes(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("fuzz") / "f.txt"
    p.write_bytes(data)
    try:
        w = read_workload(p)
        build_program(w, LayoutOptions(default_gpus=64))
    except InputError as e:
        assert "\n" not in str(e)

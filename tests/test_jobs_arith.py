"""Shell arithmetic $((...)) (sim.jobs.arith): values worked by hand as POSIX sh / C give them
(precedence, left associativity, truncating division, the remainder's sign), and every
expression it does not evaluate refused naming file, line and the expression."""

import pytest

from sim.cli import main
from sim.errors import InputError
from sim.jobs import arith
from sim.jobs.shell import Shell, Word, tokenize

VARS = {"PP": "4", "TP": "8", "NEG": "-3", "HEX": "0x10", "WORD": "abc"}


def _lookup(name):
    if name not in VARS:
        raise arith.Unknown(f"${name} is unset")
    return VARS[name]


@pytest.mark.parametrize("expr, value", [
    ("3*PP", 12),                 # the SC'21 scripts' NLS=$((3*PP))
    ("64/PP", 16),                # run_figure_13.sh's TP=$((64/PP))
    ("$TP*${PP}", 32),            # with or without $
    ("2+3*4", 14),                # * before +
    ("(2+3)*4", 20),
    ("20-6-4", 10),               # left to right: (20-6)-4
    ("64/4/2", 8),                # (64/4)/2, not 64/(4/2) = 32
    ("7/2", 3), ("-7/2", -3),     # truncation toward zero (C), not floor (-4)
    ("7%3", 1), ("-7%3", -1), ("7%-3", 1),  # the remainder takes the dividend's sign
    ("-PP+10", 6), ("- -PP", 4), ("1 - -2", 3), ("-(2+3)", -5), ("+5", 5),
    ("NEG*2", -6), ("HEX+1", 17), ("010", 8), ("0x1f", 31),
    (" 1 + 2 ", 3),
    ("9223372036854775807", (1 << 63) - 1),
])
def test_values_worked_by_hand(expr, value):
    assert arith.evaluate(expr, _lookup) == value


@pytest.mark.parametrize("expr, why", [
    ("PP/0", "division by zero"), ("PP%(TP-8)", "division by zero"),
    ("9223372036854775807+1", "64-bit"), ("3037000500*3037000500", "64-bit"),
    ("-9223372036854775807-1-1", "64-bit"),
    ("2**3", "'**'"), ("--PP", "'--'"), ("PP++", "'++'"), ("1<<2", "'<<'"),
    ("PP>2", "'>'"), ("X=3", "'='"), ("1?2:3", "'?'"), ("$(nproc)*2", "'$'"),
    ("WORD+1", "'abc' of WORD is not an integer"), ("09", "not an integer constant"),
    ("(1+2", "not closed"), ("1+", "ends where a value"), ("1 2", "unexpected '2'"),
    ("", "empty"), ("(" * 40 + "1" + ")" * 40, "nested"), ("1+" * 600 + "1", "characters"),
])
def test_what_is_not_evaluated_is_refused(expr, why):
    with pytest.raises(arith.ArithError) as e:
        arith.evaluate(expr, _lookup)
    assert why in str(e.value)


def test_an_unset_or_unknown_variable_makes_the_value_unknown():
    with pytest.raises(arith.Unknown):
        arith.evaluate("NODES*8", _lookup)


def test_the_shell_substitutes_the_value_and_refuses_naming_file_line_expression():
    sh = Shell("run.sh")
    sh.assign("PP", Word("2", 1), False)
    words = sh.fields(tokenize("--num-layers=$((3*PP))", "run.sh")[0])
    assert [w.text for w in words] == ["--num-layers=6"] and words[0].unknown is None
    words = sh.fields(tokenize("$((NODES * 8))", "run.sh")[0])
    assert words[0].unknown and "$NODES is unset" in words[0].unknown
    with pytest.raises(InputError) as e:
        sh.fields(tokenize("\n\n$((PP / (PP - 2)))", "run.sh")[-1])
    assert str(e.value) == "run.sh:3: arithmetic $((PP / (PP - 2))): division by zero"


def test_a_script_with_bad_arithmetic_exits_2_in_one_line(tmp_path, capsys):
    f = tmp_path / "run.sh"
    f.write_text("#!/bin/bash\nGPUS=8\nNODES=0\nDP=$(( GPUS / NODES ))\n"
                 "torchrun pretrain_gpt.py --num-layers 2\n")
    assert main(["--megatron-args", str(f), "--topo", "tiny-2x2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{f}:4: arithmetic $(( GPUS / NODES )): division by zero" in err

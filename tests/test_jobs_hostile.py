"""The job readers are bounded: devices, deep nesting, exponential expansions and huge TOML
end in one-line errors (exit 2), never a traceback or a hang."""

import pytest

from sim.cli import main
from sim.errors import InputError
from sim.jobs.script import launch_arguments
from sim.jobs.shell import MAX_VALUE


@pytest.mark.parametrize("flag", ["--megatron-args", "--job-config"])
def test_devices_are_refused(flag, capsys):
    assert main([flag, "/dev/zero", "--topo", "tiny-2x2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/dev/zero" in err and "character device" in err


def test_deeply_nested_expansion_is_one_error():
    text = "X=" + "${A:-" * 5000 + "x" + "}" * 5000 + "\npython pretrain_gpt.py --seed $X\n"
    with pytest.raises(InputError) as e:
        launch_arguments(text, "deep.sh")
    assert str(e.value).startswith("deep.sh:")


def test_doubling_a_value_stops_at_the_bound():
    text = "A=xxxxxxxx\n" + 'A="$A$A"\n' * 40 + "python pretrain_gpt.py --seed 1\n"
    with pytest.raises(InputError) as e:
        launch_arguments(text, "grow.sh")
    assert f"over {MAX_VALUE} characters" in str(e.value)


@pytest.mark.parametrize("text, needle", [
    ("python pretrain_gpt.py --num-layers 'unterminated\n", "unterminated ' quote"),
    ("if [[ a == a ]]; then\npython pretrain_gpt.py --seed 1\n", "'if' opened here"),
    ("python a.py --seed 1\npython b.py --seed 2\n", "two training commands (lines 1 and 2)"),
    ("echo hello\n", "no training command"),
])
def test_broken_scripts_name_file_and_line(text, needle):
    with pytest.raises(InputError) as e:
        launch_arguments(text, "s.sh")
    assert needle in str(e.value) and str(e.value).startswith("s.sh")


@pytest.mark.parametrize("model, needle", [
    ("  num_layers: ${.hidden_size}\n  hidden_size: ${.num_layers}\n",
     ": interpolations nested too deep"),
    ("  num_layers: ${multiply:" + "9" * 5000 + ", 2}\n",
     "model.num_layers: the interpolation ${multiply:"),
    ("  num_layers: " + "${.a}" * 40 + "\n  a: 1\n", "model.num_layers: too many interpolations"),
])
def test_nemo_interpolations_are_bounded(tmp_path, capsys, model, needle):
    f = tmp_path / "bad.yaml"
    f.write_text("run:\n  name: x\ntrainer:\n  num_nodes: 1\nmodel:\n" + model)
    assert main(["--job-config", str(f), "--topo", "tiny-2x2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_a_yaml_neither_nemo_nor_bridge_names_the_flag(tmp_path, capsys):
    f = tmp_path / "spec.yaml"
    f.write_text("name: x\nlayers: 2\n")
    assert main(["--job-config", str(f), "--topo", "tiny-2x2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "spec.yaml: --job-config: not a job config" in err, err


def test_a_script_sourcing_itself_stops_at_the_bound(tmp_path, capsys):
    f = tmp_path / "loop.sh"
    f.write_text(". `pwd`/loop.sh\npython pretrain_gpt.py --seed 1\n")
    assert main(["--megatron-args", str(f), "--topo", "tiny-2x2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than 16 sourced files" in err, err

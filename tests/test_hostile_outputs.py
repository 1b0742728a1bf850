"""Hostile outputs (issue 13, class 1 and the temp files of class 7): an output never clobbers
an input or another output, never replaces a device, a FIFO or a read-only file, writes through
symlinks, keeps modes, and '-' / '/dev/stdout' put JSON on standard output."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hostile_support import ROOT, run_bounded

import sim.files.outputs
from sim.errors import InputError, UsageError
from sim.files.outputs import atomic_write, check_output_paths
from sim.runtime.process import Terminated

TINY = str(ROOT / "topologies" / "tiny-2x2.yaml")
OPTABLE = ROOT / "workloads" / "optable-gpt2-large-block.tsv"
MODEL = ROOT / "workloads" / "models" / "gpt2-medium.yaml"


def _exit_2(o, needle: str) -> None:
    assert not o.killed_after_timeout and o.returncode == 2, o.stderr[-2000:]
    assert o.stdout == ""
    line = o.one_line("simrun")
    assert needle in line, line


@pytest.fixture
def short_tmp():
    """A fresh directory with a short path: an error message cuts a word over 80 characters
    (sim.errors), and pytest-xdist's tmp_path (…/popen-gwN/<test name>0/) can exceed that."""
    d = Path(tempfile.mkdtemp(prefix="simrun-out-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def files(short_tmp):
    tmp_path = short_tmp
    w = tmp_path / "w.txt"
    w.write_bytes(OPTABLE.read_bytes())
    t = tmp_path / "t.yaml"
    t.write_text((ROOT / "topologies" / "tiny-2x2.yaml").read_text())
    m = tmp_path / "m.yaml"
    m.write_text(MODEL.read_text())
    return w, t, m


@pytest.mark.parametrize("case", ["json=workload", "trace=workload", "json=topo", "trace=json",
                                  "json=hardlink-of-workload", "plot=symlink-to-topo"])
def test_an_output_that_is_an_input_or_another_output_is_refused(case, files, short_tmp):
    tmp_path = short_tmp
    w, t, _ = files
    before = {p: p.read_bytes() for p in (w, t)}
    os.link(w, tmp_path / "hard.txt")
    os.symlink(t, tmp_path / "to-topo.png")
    args = {
        "json=workload": (["--json", str(w)], f"--json: '{w}' is the same file as the input of "
                                              f"--workload ({w}); simrun would overwrite it"),
        "trace=workload": (["--trace", str(w)], "--trace: "),
        "json=topo": (["--json", str(t)], f"is the same file as the input of --topo ({t})"),
        "trace=json": (["--json", str(tmp_path / "x.json"), "--trace",
                        str(tmp_path / "x.json")], "--trace: "),
        "json=hardlink-of-workload": (["--json", str(tmp_path / "hard.txt")],
                                      "is the same file as the input of --workload"),
        "plot=symlink-to-topo": (["--plot", str(tmp_path / "to-topo.png")],
                                 "is the same file as the input of --topo"),
    }[case]
    o = run_bounded("--workload", str(w), "--topo", str(t), *args[0])
    _exit_2(o, args[1])
    assert "same file as the" in o.stderr
    assert {p: p.read_bytes() for p in (w, t)} == before
    assert not (tmp_path / "x.json").exists()


def test_generate_refuses_to_overwrite_its_model(files):
    _, t, m = files
    before = m.read_bytes()
    o = run_bounded("generate", "--model", str(m), "--topo", str(t), "--microbatches", "1",
                    "--out", str(m))
    assert o.returncode == 2 and o.stdout == ""
    assert f"--out: '{m}' is the same file as the input of --model" in o.one_line(
        "simrun generate: error:")
    assert m.read_bytes() == before


def test_validate_refuses_to_overwrite_its_validation_file(short_tmp):
    v = short_tmp / "v.yaml"
    v.write_text("topology: t\ncases: []\n")
    o = run_bounded("validate", str(v), "--json", str(v))
    _exit_2(o, f"--json: '{v}' is the same file as the input of FILE ({v})")
    assert v.read_text() == "topology: t\ncases: []\n"


@pytest.mark.parametrize("flag", ["--json", "--trace"])
def test_devices_and_fifos_are_never_replaced(flag, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    for target, kind in (("/dev/full", "a character device"), (str(fifo), "a FIFO")):
        o = run_bounded("--workload", str(OPTABLE), "--topo", TINY, "--quiet", flag, target)
        _exit_2(o, f"{target}: {flag}: exists and is {kind}, not a regular file")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_read_only_output_is_refused_and_untouched(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("keep")
    out.chmod(0o444)
    o = run_bounded("--workload", str(OPTABLE), "--topo", TINY, "--quiet", "--json", str(out))
    _exit_2(o, f"{out}: --json: is read-only (mode 0444); simrun does not replace it")
    assert out.read_text() == "keep" and stat.S_IMODE(out.stat().st_mode) == 0o444


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_json_to_standard_output(name, tmp_path):
    ref = tmp_path / "r.json"
    a = run_bounded("--workload", str(OPTABLE), "--topo", TINY, "--json", name)
    b = run_bounded("--workload", str(OPTABLE), "--topo", TINY, "--quiet", "--json", str(ref))
    assert a.returncode == 0 and a.stderr == "" and b.returncode == 0
    assert a.stdout == ref.read_text()  # the JSON only: no report table mixed in
    json.loads(a.stdout)
    c = run_bounded("collective", "--topo", TINY, "--sizes", "1K:4K", "--json", name)
    assert c.returncode == 0 and [r["size_bytes"] for r in json.loads(c.stdout)] == [
        1024, 2048, 4096]


def test_standard_output_only_for_json_and_only_once(tmp_path):
    _exit_2(run_bounded("--workload", str(OPTABLE), "--topo", TINY, "--trace", "-"),
            "--trace: cannot write '-' (standard output) here; give a file name")
    with pytest.raises(UsageError, match="is the same file as the output of --json"):
        check_output_paths({"--json": "-", "--other": "/dev/stdout"}, {},
                           stdout_ok=("--json", "--other"))


def test_dev_null_discards_and_stays_a_device():
    if not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        pytest.skip("/dev/null on this machine is not a device")
    o = run_bounded("--workload", str(OPTABLE), "--topo", TINY, "--quiet", "--json",
                    os.devnull, "--trace", os.devnull)
    assert o.returncode == 0 and o.stderr == ""
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_symlinked_output_is_written_through_and_keeps_its_mode(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    atomic_write(link, lambda f: f.write("new"))
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.read_text() == "new" and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_stale_temp_files_of_dead_simrun_processes_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, timeout=60)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".r.json.simrun-{dead_pid}-0a1b2c3d.tmp"
    live = tmp_path / f".r.json.simrun-{os.getpid()}-0a1b2c3d.tmp"
    other = tmp_path / f".other.json.simrun-{dead_pid}-0a1b2c3d.tmp"
    for p in (stale, live, other):
        p.write_text("x" * 1000)
    atomic_write(tmp_path / "r.json", lambda f: f.write("{}"))
    assert not stale.exists()  # its process is gone
    assert live.exists() and other.exists()  # running process; another target


def test_sigterm_mid_write_leaves_no_temp_file(tmp_path):
    def write(f):
        f.write("partial")
        raise Terminated(15)

    out = tmp_path / "r.json"
    with pytest.raises(Terminated):
        atomic_write(out, write)
    assert list(tmp_path.iterdir()) == []


def test_check_output_path_refuses_a_directory_and_a_missing_directory(tmp_path):
    with pytest.raises(InputError, match="is a directory; give a file name"):
        sim.files.outputs.check_output_path(tmp_path, "--json")
    with pytest.raises(InputError, match="does not exist"):
        sim.files.outputs.check_output_path(tmp_path / "no" / "r.json", "--json")

"""Files and exit codes: 0 on success, 2 on bad input or usage, 1 on internal error; messages on
stderr (one line), nothing on stdout when failing; every output file written atomically (temp
file + rename: an interrupted or failed write leaves neither a partial file nor a temp file);
YAML read with safe loading only."""

from __future__ import annotations

import errno
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SEED_OPTABLE, TOPOLOGIES, WORKLOADS

import sim.files.outputs
from sim.cli import main
from sim.errors import InputError
from sim.models.vocab.spec import load_model
from sim.topology.load import load_topology

TINY = str(TOPOLOGIES / "tiny-2x2.yaml")
GPT2M = str(WORKLOADS / "models" / "gpt2-medium.yaml")
RUN = ["--workload", str(SEED_OPTABLE), "--topo", TINY, "--quiet"]


def _proc(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], cwd=cwd, capture_output=True,
                          text=True, env=e, timeout=300)


def _one_line(err: str, prefix: str = "simrun: error: ") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return lines[0]


# ---- exit codes, from real processes -----------------------------------------------------------
def test_success_exits_0_with_the_report_on_stdout_and_nothing_on_stderr():
    r = _proc("--workload", str(SEED_OPTABLE), "--topo", TINY)
    assert r.returncode == 0 and r.stderr == ""
    assert "iteration" in r.stdout and "assumptions" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--workload", str(SEED_OPTABLE)], "the following arguments are required: --topo"),
    ([*RUN, "--frobnicate"], "unrecognized arguments: --frobnicate"),
    ([*RUN, "--tp", "two"], "argument --tp: expected a positive integer, got 'two'"),
    (["--workload", "missing.txt", "--topo", TINY], "missing.txt: no such file"),
    (["--workload", str(SEED_OPTABLE), "--topo", "missing.yaml"],
     "missing.yaml: --topo: cannot read topology file: no such file"),
    (["collective", "--topo", TINY, "--gpus", "99"], "--gpus: must be between 2 and the "
                                                      "topology's 4 GPUs, got 99"),
    # one operation: an algorithm that never runs it is refused, not replaced by auto's
    (["collective", "--topo", TINY, "--op", "allreduce", "--algorithm", "direct"],
     "--algorithm: direct does not run allreduce (for allreduce: ring, tree, hierarchical, "
     "nvls, nvlstree, collnet or auto)"),
    (["inspect", str(WORKLOADS / "models" / "missing.yaml")], "missing.yaml: cannot read model "
                                                                "spec: no such file"),
    (["generate", "--model", GPT2M, "--topo", TINY, "--global-batch", "8", "--out",
      "/nonexistent-dir/x.txt"], "directory '/nonexistent-dir' does not exist"),
    (["sweep", "--model", GPT2M, "--topo", TINY], "--global-batch"),
    (["validate", "missing.yaml"], "missing.yaml"),
])
def test_bad_input_or_usage_exits_2_with_one_line_on_stderr(args, needle):
    r = _proc(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == ""
    line = _one_line(r.stderr, "simrun")
    assert "error: " in line and needle in line, line


def test_internal_error_exits_1_with_one_line_and_a_traceback_only_on_request(monkeypatch,
                                                                               capsys):
    import sim.report

    def broken(*a, **k):
        raise RuntimeError("report builder exploded")

    monkeypatch.setattr(sim.report, "build_report", broken)
    assert main(RUN) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == ("simrun: internal error: RuntimeError: report builder exploded (set "
                       "SIMRUN_DEBUG=1 for a traceback)\n")
    monkeypatch.setenv("SIMRUN_DEBUG", "1")
    assert main(RUN) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.rstrip().endswith(
        "(set SIMRUN_DEBUG=1 for a traceback)")


def test_failed_nic_on_a_rail_optimised_single_level_fabric_is_not_an_internal_error(capsys):
    rc = main([*RUN, "--fail-nic", "0.1"])
    assert rc in (0, 2), capsys.readouterr().err


def test_sigint_style_interrupt_exits_130(monkeypatch, capsys):
    import sim.report

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.report, "build_report", interrupted)
    assert main(RUN) == 130
    assert capsys.readouterr().err == "simrun: interrupted\n"


# ---- every output is written atomically --------------------------------------------------------
OUTPUTS = {  # name: (argv with {d} for the directory, file to check, validate content)
    "report json": ([*RUN, "--json", "{d}/report.json"], "report.json"),
    "trace": ([*RUN, "--trace", "{d}/trace.json"], "trace.json"),
    "trace gz": ([*RUN, "--trace", "{d}/trace.json.gz"], "trace.json.gz"),
    "timeline png": ([*RUN, "--plot", "{d}/timeline.png"], "timeline.png"),
    "breakdown svg": ([*RUN, "--breakdown-plot", "{d}/breakdown.svg"], "breakdown.svg"),
    "generate --out": (["generate", "--model", GPT2M, "--topo", TINY, "--global-batch", "8",
                        "--out", "{d}/gen.txt"], "gen.txt"),
    "collective --json": (["collective", "--topo", TINY, "--gpus", "4", "--sizes", "1K:4K",
                           "--json", "{d}/coll.json"], "coll.json"),
    "sweep csv": (["sweep", "--model", GPT2M, "--topo", TINY, "--global-batch", "8", "--out",
                   "{d}/sweep", "--workers", "1", "--quiet", "--no-progress", "--no-plot"],
                  "sweep/results.csv"),
    "sweep json": (["sweep", "--model", GPT2M, "--topo", TINY, "--global-batch", "8", "--out",
                    "{d}/sweep", "--workers", "1", "--quiet", "--no-progress", "--no-plot"],
                   "sweep/results.json"),
}


def _argv(name: str, d: Path) -> tuple[list[str], Path]:
    argv, target = OUTPUTS[name]
    return [a.replace("{d}", str(d)) for a in argv], d / target


def _temp_files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*.tmp"))


def _fail_for(target: Path, exc: BaseException, real):
    def fake(src, dst, *a, **k):
        if Path(dst) == target:
            raise exc
        return real(src, dst, *a, **k)
    return fake


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_interrupted_write_leaves_the_old_file_and_no_temp_file(name, tmp_path, monkeypatch,
                                                                 capsys):
    """Ctrl-C after the temp file is complete but before the rename."""
    argv, target = _argv(name, tmp_path)
    target.parent.mkdir(exist_ok=True)
    if name.startswith("sweep"):
        argv.append("--overwrite")
    target.write_bytes(b"old\n")
    monkeypatch.setattr(sim.files.outputs.os, "replace",
                        _fail_for(target, KeyboardInterrupt(), os.replace))
    assert main(argv) == 130
    assert target.read_bytes() == b"old\n"
    assert _temp_files(tmp_path) == []
    capsys.readouterr()


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_disk_full_leaves_no_partial_file_and_exits_2(name, tmp_path, monkeypatch, capsys):
    argv, target = _argv(name, tmp_path)
    real_fsync = os.fsync

    def full(fd):
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(f".{target.name}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(sim.files.outputs.os, "fsync", full)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    if name.startswith("sweep"):  # the sweep announces what it runs first (stderr)
        err = err.strip().splitlines()[-1]
    line = _one_line(err, "simrun")
    assert f"{target}:" in line and "cannot write: No space left on device" in line
    assert not target.exists() and _temp_files(tmp_path) == []


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_successful_write_replaces_the_file_completely(name, tmp_path, capsys):
    argv, target = _argv(name, tmp_path)
    assert main(argv) == 0
    data = target.read_bytes()
    if target.suffix == ".json":
        json.loads(data)
    elif target.suffix == ".gz":
        json.loads(gzip.decompress(data))
    elif target.suffix == ".png":
        assert data.startswith(b"\x89PNG")
    elif target.suffix == ".svg":
        assert data.rstrip().endswith(b"</svg>")
    else:
        assert data.endswith(b"\n") and len(data) > 100
    assert _temp_files(tmp_path) == []
    capsys.readouterr()


@pytest.mark.parametrize("bad,needle", [
    ("{d}", "is a directory; give a file name"),
    ("{d}/missing/r.json", "does not exist"),
])
def test_bad_output_path_fails_before_simulating(bad, needle, tmp_path, monkeypatch, capsys):
    import sim.engine

    def never(*a, **k):
        raise AssertionError("simulated although the output path is bad")

    monkeypatch.setattr(sim.engine, "simulate", never)
    assert main([*RUN, "--json", bad.replace("{d}", str(tmp_path))]) == 2
    assert needle in _one_line(capsys.readouterr().err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to read-only directories")
def test_read_only_directory_is_an_input_error(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert main([*RUN, "--json", str(ro / "r.json")]) == 2
        assert "is not writable" in _one_line(capsys.readouterr().err)
    finally:
        ro.chmod(0o755)


# ---- YAML: safe loading only ------------------------------------------------------------------
EVIL = "!!python/object/apply:os.system ['touch {marker}']"


@pytest.mark.parametrize("loader,text", [
    (load_topology, "name: {evil}\nnodes: 1\n"),
    (load_topology, "nodes: !!python/object:sim.topology.spec.Topology {{}}\n"),
    (load_model, "name: x\nlayers: {evil}\n"),
    (load_model, "!!python/name:os.system\n"),
])
def test_python_tags_are_rejected_and_never_executed(loader, text, tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(text.format(evil=EVIL.format(marker=marker)))
    with pytest.raises(InputError) as e:
        loader(str(path))
    assert str(e.value).startswith(f"{path}:")
    assert "could not determine a constructor for the tag 'tag:yaml.org,2002:python/" in str(
        e.value)
    assert not marker.exists()


def test_python_tags_through_the_cli_exit_2(tmp_path):
    marker = tmp_path / "pwned"
    topo = tmp_path / "evil.yaml"
    topo.write_text(f"name: {EVIL.format(marker=marker)}\nnodes: 1\n")
    r = _proc("--workload", str(SEED_OPTABLE), "--topo", str(topo))
    assert r.returncode == 2 and r.stdout == ""
    assert f"{topo}:1: not valid YAML: could not determine a constructor" in _one_line(r.stderr)
    assert not marker.exists()


@pytest.mark.parametrize("text,needle", [
    ("name: a\nnodes: 1\nnodes: 2\n", "3: not valid YAML: duplicate key 'nodes' (first given "
                                      "on line 2)"),
    ("name: a\nnodes: !!int x\n", "2: not valid YAML: bad scalar value (ValueError"),
    ("name: a\nnodes: !!int\n", "2: not valid YAML: bad scalar value (IndexError"),
    ("name: a\nnodes: 2001-13-45\n", "2: not valid YAML: bad scalar value (ValueError: month"),
    ("name: &a [*a, *a]\nnodes: 1\n", "1: not valid YAML: alias *a is inside the node it "
                                    "names (a cycle)"),
    ("[" * 5000, "not valid YAML"),
    ("name: a\x07\n", "1: encoding: not valid YAML: control character U+0007 is not allowed"),
])
def test_yaml_pitfalls_are_input_errors(text, needle, tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        load_topology(str(path))
    assert needle in str(e.value) and str(e.value).startswith(str(path))


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_byte_order_marked_files_read_like_utf8(encoding, tmp_path, capsys):
    """Windows tools (PowerShell's '>' writes UTF-16 with a BOM) produce these."""
    src = (TOPOLOGIES / "tiny-2x2.yaml").read_text()
    topo = tmp_path / "t.yaml"
    topo.write_bytes(src.encode(encoding))
    wl = tmp_path / "w.tsv"
    wl.write_bytes(SEED_OPTABLE.read_text().encode(encoding))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["--workload", str(SEED_OPTABLE), "--topo", TINY, "--quiet", "--json",
                 str(a)]) == 0
    assert main(["--workload", str(wl), "--topo", str(topo), "--quiet", "--json", str(b)]) == 0
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert ra["iteration_time_s"] == rb["iteration_time_s"] and ra["stages"] == rb["stages"]


def test_latin1_file_names_the_line_and_byte(tmp_path):
    wl = tmp_path / "w.tsv"
    text = SEED_OPTABLE.read_text().splitlines()
    text[3] = text[3].replace("getitem", "getitém", 1)
    data = "\n".join(text).encode("latin-1")
    wl.write_bytes(data)
    offset = data.index(bytes([0xE9]))
    r = _proc("--workload", str(wl), "--topo", TINY)
    assert r.returncode == 2
    assert _one_line(r.stderr) == (f"simrun: error: {wl}:4: encoding: not UTF-8 text (byte 0xe9 "
                                   f"at offset {offset}); save the file as UTF-8")


@pytest.mark.parametrize("data,needle", [
    (b"topology: t\ncases: [\xe9]\n", ":2: encoding: not UTF-8 text (byte 0xe9"),
    (b"topology: t\ncases: !!int x\n", ":2: not valid YAML: bad scalar value"),
    (b"topology: t\ncases: &a [*a]\n", ":2: not valid YAML: alias *a is inside the node"),
])
def test_validation_files_get_the_same_treatment(data, needle, tmp_path):
    path = tmp_path / "v.yaml"
    path.write_bytes(data)
    r = _proc("validate", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert f"{path}{needle}" in _one_line(r.stderr)

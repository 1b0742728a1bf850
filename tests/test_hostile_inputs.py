"""Hostile inputs (issue 13, classes 2, 4 and 5): YAML that would crash or exhaust the loader,
inputs that are not files, and an accepted input that would deadlock. Every case runs simrun as
a real process under an address-space and CPU limit and must answer with exit 2 and one line
on stderr, using under 1 GB of memory and 10 s of CPU time (docs/errors.md, "Limits")."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hostile_support import GB, ROOT, run_bounded

TINY = str(ROOT / "topologies" / "tiny-2x2.yaml")
OPTABLE = str(ROOT / "workloads" / "optable-gpt2-large-block.tsv")
MODEL = ROOT / "workloads" / "models" / "gpt2-medium.yaml"
MB = 1 << 20


def _merge_bomb(levels: int = 7) -> str:
    """534 bytes: m_n merges ten copies of m_{n-1}, so m_7 expands to 10^7 keys."""
    lines = ["m0: &m0 {a: 1}"]
    lines += [f"m{n}: &m{n} {{<<: [{', '.join([f'*m{n - 1}'] * 10)}]}}"
              for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def _laughs(levels: int = 9) -> str:
    """The "billion laughs": l_n is a list of ten l_{n-1}, 10^9 strings once expanded."""
    lines = ['l0: &l0 ["lol"]']
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 10)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def _deep_map(size: int) -> str:
    depth = (size - 20) // 6
    return "name: x\nnodes: " + "{a: " * depth + "1" + "}" * depth + "\n"


# (name, file text, needle of the one-line message)
YAML_CASES = [
    ("flow-25000", "nodes: " + "[" * 25000 + "]" * 25000 + "\n",
     ":1: not valid YAML: nested more than 64 levels deep"),
    ("flow-1MB", "nodes: " + "[" * (MB // 2 - 8) + "]" * (MB // 2 - 8) + "\n",
     ":1: not valid YAML: nested more than 64 levels deep"),
    ("map-100KB", _deep_map(100_000), ":2: not valid YAML: nested more than 64 levels deep"),
    ("block-1MB", "a:\n" + "".join(" " * i + "a:\n" for i in range(1, 1400)),
     ":64: not valid YAML: nested more than 64 levels deep"),
    ("merge-bomb", _merge_bomb(), ":6: not valid YAML: expands to more than 100,000 values"),
    ("laughs", _laughs(), ":6: not valid YAML: expands to more than 100,000 values"),
    ("flat-1MB", "name: x\nnodes: [" + "0," * (MB // 2 - 10) + "]\n",
     ":2: not valid YAML: expands to more than 100,000 values"),
    ("cycle", "name: x\nnodes: &a [1, *a]\n", ":2: not valid YAML: alias *a is inside the node"),
]


def _check(o, needle: str, prefix: str = "simrun") -> str:
    """Exit 2, nothing on stdout, one line naming ``needle``, within 1 GB and 10 s of CPU."""
    assert not o.killed_after_timeout, "did not answer in time"
    assert o.returncode == 2, (o.returncode, o.stderr[-2000:])
    assert o.stdout == ""
    line = o.one_line(prefix)
    assert needle in line, line
    assert o.max_rss_bytes < 1 * GB, f"{o.max_rss_bytes / GB:.2f} GB"
    assert o.cpu_s < 10, f"{o.cpu_s:.1f} s of CPU"
    return line


@pytest.mark.parametrize("name,text,needle", YAML_CASES, ids=[c[0] for c in YAML_CASES])
def test_hostile_yaml_as_topology(name, text, needle, tmp_path):
    assert len(text.encode()) <= MB + 16
    path = tmp_path / "t.yaml"
    path.write_text(text)
    _check(run_bounded("--workload", OPTABLE, "--topo", str(path)), f"{path}{needle}")


@pytest.mark.parametrize("name,text,needle", [YAML_CASES[0], YAML_CASES[4], YAML_CASES[5]],
                         ids=["flow-25000", "merge-bomb", "laughs"])
def test_hostile_yaml_as_model_and_validation_file(name, text, needle, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    _check(run_bounded("--model", str(path), "--topo", TINY, "--microbatches", "1"),
           f"{path}{needle}")
    _check(run_bounded("inspect", str(path)), f"{path}{needle}", "simrun inspect")
    _check(run_bounded("validate", str(path)), f"{path}{needle}")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_devices_are_refused_by_every_reader(device):
    assert os.path.exists(device)
    for args, needle in [
        (["--workload", device, "--topo", TINY], f"{device}: is a character device, not a file"),
        (["--workload", OPTABLE, "--topo", device],
         f"{device}: --topo: cannot read topology file: is a character device, not a file"),
        (["--model", device, "--topo", TINY, "--microbatches", "1"],
         f"{device}: cannot read model spec: is a character device, not a file"),
        (["validate", device], f"{device}: cannot read validation file: is a character device"),
    ]:
        _check(run_bounded(*args), needle)
    _check(run_bounded("inspect", device), f"{device}: is a character device, not a file",
           "simrun inspect")


def test_fifo_without_writer_answers_at_once(tmp_path):
    fifo = tmp_path / "w.fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    o = run_bounded("--workload", str(fifo), "--topo", TINY, timeout_s=30)
    _check(o, f"{fifo}: a pipe or FIFO with no data (nothing is writing to it)")
    assert time.monotonic() - t0 < 20


def test_fifo_with_a_writer_is_read(tmp_path):
    """A FIFO (like a shell's process substitution) that is written to works like the file."""
    fifo = tmp_path / "w.fifo"
    os.mkfifo(fifo)
    data = Path(OPTABLE).read_bytes()

    def write() -> None:
        with open(fifo, "wb") as f:  # blocks until simrun opens it
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    o = run_bounded("--workload", str(fifo), "--topo", TINY, "--json", str(a), timeout_s=60)
    writer.join(timeout=5)
    ref = run_bounded("--workload", OPTABLE, "--topo", TINY, "--json", str(b), timeout_s=60)
    assert o.returncode == 0 and ref.returncode == 0, o.stderr
    assert o.stdout.replace(str(fifo), OPTABLE) == ref.stdout
    assert a.read_text().replace(str(fifo), OPTABLE) == b.read_text()


def test_input_size_cap_is_stated_and_overridable(tmp_path):
    size = Path(OPTABLE).stat().st_size
    o = run_bounded("--workload", OPTABLE, "--topo", TINY, "--quiet",
                    env={"SIMRUN_MAX_INPUT_BYTES": str(size - 1)})
    _check(o, f"{OPTABLE}: file is {size:,} bytes; simrun reads at most {size - 1:,} bytes "
              "(set SIMRUN_MAX_INPUT_BYTES to change the limit)")
    assert run_bounded("--workload", OPTABLE, "--topo", TINY, "--quiet",
                       env={"SIMRUN_MAX_INPUT_BYTES": str(size)}).returncode == 0
    _check(run_bounded("--workload", OPTABLE, "--topo", TINY,
                       env={"SIMRUN_MAX_INPUT_BYTES": "1_000"}),
           "SIMRUN_MAX_INPUT_BYTES: expected a whole number of bytes ≥ 1, got '1_000'")


PP_COLLECTIVE = (
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 2 ga: 1 all_gpus: 2 "
    "pp_comm: 1024\n1\nlayer\t-1\t1000\t{kind}\t1024\t1000\tNONE\t0\t1000\tNONE\t0\t100\n")


@pytest.mark.parametrize("kind", ["ALLREDUCE_PP", "BROADCAST_PP", "allgather_pp"])
def test_collective_in_the_pp_group_is_refused_at_read_time(kind, tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(PP_COLLECTIVE.format(kind=kind))
    line = _check(run_bounded("--workload", str(path), "--topo", TINY),
                  f"{path}:3: forward_comm_type: '{kind}': a collective over the pipeline (PP) "
                  "group cannot run in a pipeline schedule")
    assert "pp_comm" in line


def test_collective_in_the_pp_group_of_an_operator_table(tmp_path):
    rows = Path(OPTABLE).read_text().splitlines()
    header = rows[0].split("\t")
    col = header.index("forward_comm_type")
    cells = rows[1].split("\t")
    cells[col] = "ALLREDUCE_PP"
    rows[1] = "\t".join(cells)
    path = tmp_path / "w.tsv"
    path.write_text("\n".join(rows) + "\n")
    _check(run_bounded("--workload", str(path), "--topo", TINY),
           f"{path}:2: forward_comm_type: 'ALLREDUCE_PP': a collective over the pipeline (PP)")

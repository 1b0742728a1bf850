"""Docs that cannot drift: every fenced code block of README.md and docs/*.md runs.

- ``python`` blocks are executed (from a directory where ``workloads/`` and ``topologies/``
  are the repository's); a ``# prints: TEXT`` line says what the block prints, and is checked.
- Shell blocks: every command is ``simrun …`` (run in process, ``sim.cli.main``) or
  ``python scripts/…`` (a subprocess), from such a directory, and must exit 0. A command
  written ``$ simrun …`` is followed by what it prints: each line shown (``...`` elides; a
  line may end in ``...``) is a line, or the start of a line, of what the command prints, so
  the numbers shown are the numbers it prints.
- A block that cannot run in a test (an installation, the test suite itself, a GPU, a command
  over ~20 s) has ``<!-- not-run: reason -->`` on the line before it;
  :func:`test_blocks_not_run_are_marked_with_a_reason` lists them, so none is skipped silently.
- Other blocks (formulas, op orders, error messages, file excerpts) have no command: text.

One run per distinct command (a session cache), so a command shown twice runs once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

from sim.cli import main

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!-- not-run: (.+?) -->$")
SHELL_LANGS = {"bash", "sh", "shell", "console"}
# a line that is a command (after an optional "$ " prompt)
COMMAND = re.compile(r"^(\$ )?(simrun|python3?|pip|dask|ruff|\.) ")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None  # the reason, where marked

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        if self.not_run is not None:
            return "not-run"
        if self.lang == "python":
            return "python"
        lines = self.text.splitlines()
        if self.lang in SHELL_LANGS or any(COMMAND.match(x) for x in lines):
            return "shell"
        return "text"


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marked = NOT_RUN.match(prev.strip())
        out.append(Block(path, i + 1, m[1], "\n".join(lines[i + 1:end]),
                         marked[1] if marked else None))
        i = end + 1
    return out


ALL = [b for p in DOCS for b in blocks(p)]


def _ids(bs: list[Block]) -> list[str]:
    return [b.where for b in bs]


def shell_commands(block: Block) -> list[tuple[list[str], list[str]]]:
    """``(argv after 'simrun', lines shown as its output)`` per command of a shell block (a
    script of ``scripts/``: its whole argv, from ``python``)."""
    cmds: list[tuple[list[str], list[str]]] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        prompt = line.startswith("$ ")
        cmd = line[2:] if prompt else line
        while cmd.endswith("\\"):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        i += 1
        argv = shlex.split(cmd, comments=True)
        script = len(argv) > 1 and argv[0] == "python" and argv[1].startswith("scripts/")
        assert argv and (argv[0] == "simrun" or script) and not {"&&", "|", ";"} & set(argv), (
            f"{block.where}: {cmd!r} is not a simrun command or a script of scripts/: run "
            "only those in a doc block, or mark the block <!-- not-run: reason -->")
        shown: list[str] = []
        while prompt and i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        cmds.append((argv if script else argv[1:], shown))
    return cmds


@pytest.fixture(scope="session")
def docs_dir(tmp_path_factory) -> Path:
    """A working directory where the docs' relative paths are the repository's inputs."""
    d = tmp_path_factory.mktemp("docs")
    for name in ("workloads", "topologies", "scripts", "tests"):
        (d / name).symlink_to(ROOT / name)
    return d


@pytest.fixture(scope="session")
def simrun(docs_dir):
    """``simrun(argv) -> (exit code, stdout, stderr)``, each distinct argv run once."""
    cache: dict[tuple[str, ...], tuple[int, str, str]] = {}

    def run(argv: list[str]) -> tuple[int, str, str]:
        key = tuple(argv)
        if key not in cache and argv[0] == "python":  # a script of scripts/
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            r = subprocess.run([sys.executable, *argv[1:]], cwd=docs_dir, env=env,
                               capture_output=True, text=True, timeout=120)
            cache[key] = (r.returncode, r.stdout, r.stderr)
        if key not in cache:
            out, err = io.StringIO(), io.StringIO()
            here = os.getcwd()
            os.chdir(docs_dir)  # contextlib.chdir is Python 3.11+
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    rc = main(list(argv))
            finally:
                os.chdir(here)
            cache[key] = (rc, out.getvalue(), err.getvalue())
        return cache[key]

    return run


def assert_shown(where: str, shown: list[str], printed: str) -> None:
    """Each shown line (``...`` elided) is a printed line, or the start of one."""
    got = printed.splitlines()
    for line in shown:
        want = line.rstrip()
        if want.endswith("..."):
            want = want[:-3].rstrip()
        if not want.strip():
            continue
        assert any(g.rstrip() == want or g.startswith(want) for g in got), (
            f"{where}: shown {line!r}, but the command printed:\n{printed}")


SHELL = [b for b in ALL if b.kind == "shell"]
PYTHON = [b for b in ALL if b.kind == "python"]


@pytest.mark.parametrize("block", SHELL, ids=_ids(SHELL))
def test_shell_block_runs_and_prints_what_it_shows(block, simrun):
    for argv, shown in shell_commands(block):
        rc, out, err = simrun(argv)
        assert rc == 0, f"{block.where}: simrun {shlex.join(argv)} exited {rc}: {err}"
        assert_shown(block.where, shown, out)


@pytest.mark.parametrize("block", PYTHON, ids=_ids(PYTHON))
def test_python_block_runs_and_prints_what_it_says(block, docs_dir, monkeypatch, capsys):
    monkeypatch.chdir(docs_dir)
    # a page's python blocks are one session: the blocks before this one run first (a later
    # block may use their names), their output not checked here
    namespace = {"__name__": "__doc_block__"}
    for earlier in (b for b in PYTHON if b.path == block.path and b.line < block.line):
        exec(compile(earlier.text, earlier.where, "exec"), namespace)
    capsys.readouterr()
    exec(compile(block.text, block.where, "exec"), namespace)
    out = capsys.readouterr().out
    says = [x.split("# prints: ", 1)[1] for x in block.text.splitlines() if "# prints: " in x]
    assert_shown(block.where, says, out)


# The blocks marked <!-- not-run: reason --> (file, start of the block's first line): a new
# marker is added here too, so no block stops running unnoticed.
NOT_RUN_BLOCKS = [
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install . "),
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install -e "),
    ("README.md", "simrun sweep --model llama3-70b --topo dgx-h100-1024 --gpus 256 "),
    ("README.md", "python -m pytest -q -n auto "),
    ("docs/calibration.md", "simrun calibrate --megatron-log train.log "),
    ("docs/job-formats.md", "$ simrun --megatron-args tests/data/megatron/train_gpt3_175b"),
    ("docs/job-formats.md", "$ simrun --job-config tests/data/nemo/gpt3_175b.yaml "),
    ("docs/kernel-tables.md", "simrun profile "),
    ("docs/sweeps.md", "simrun sweep --model workloads/models/gpt3-175b.yaml "),
    ("docs/sweeps.md", "dask scheduler "),
    ("docs/validation.md", "simrun validate "),
    ("docs/validation.md", "python scripts/validation_bands.py "),
    ("docs/visualisation.md", "python scripts/make_gallery.py"),
]


def test_blocks_not_run_are_marked_with_a_reason():
    """The blocks that do not run are the listed ones, each with its reason (-rA or -s prints
    them)."""
    marked = [b for b in ALL if b.kind == "not-run"]
    for b in marked:
        print(f"not run: {b.where}: {b.not_run}")
        assert len(b.not_run) >= 10, f"{b.where}: say why the block cannot run"
    got = [(str(b.path.relative_to(ROOT)), b.text.splitlines()[0]) for b in marked]
    assert len(got) == len(NOT_RUN_BLOCKS), got
    for (path, first), (want_path, want) in zip(got, NOT_RUN_BLOCKS, strict=True):
        assert path == want_path and first.startswith(want), (path, first)
    # every marker sits right before a block (a marker elsewhere marks nothing)
    for path in DOCS:
        lines = path.read_text().splitlines()
        for i, x in enumerate(lines):
            if NOT_RUN.match(x.strip()):
                nxt = next(y for y in lines[i + 1:] if y.strip())
                assert FENCE.match(nxt), f"{path.name}:{i + 1}: not-run marker before no block"
    assert marked and SHELL and PYTHON


def test_readme_sample_output_is_the_main_command_and_architecture_counts_its_events(
        simrun, docs_dir):
    """README "What you get" shows the quick start's command; docs/architecture.md gives its
    event count (``simulation.events`` of the JSON report)."""
    readme = ROOT / "README.md"
    quick = next(b for b in blocks(readme) if "pip install ." in b.text)
    sample = next(b for b in SHELL if b.path == readme and b.text.startswith("$ simrun"))
    assert quick.text.split("&& simrun ", 1)[1] == sample.text.splitlines()[0][len("$ simrun "):]
    argv = [*shell_commands(sample)[0][0], "--quiet", "--json", "seed-1024.json"]
    assert simrun(argv)[0] == 0
    events = json.loads((docs_dir / "seed-1024.json").read_text())["simulation"]["events"]
    arch = (ROOT / "docs" / "architecture.md").read_text()
    assert f"runs as {events:,} events" in arch


PATH_IN_DOCS = re.compile(r"(?<![\w./-])sim/[\w./-]*[\w/]")


def test_every_sim_path_the_docs_name_exists_and_architecture_maps_every_package():
    missing = [f"{p.name}: {m[0]}" for p in DOCS for m in PATH_IN_DOCS.finditer(p.read_text())
               if not (ROOT / m[0]).exists()]
    assert missing == []
    arch = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(str(d.relative_to(ROOT)) for d in (ROOT / "sim").rglob("*")
                      if (d / "__init__.py").is_file() and "data" not in d.parts)
    unmapped = [d for d in packages if f"{d}/" not in arch]
    assert unmapped == [], "docs/architecture.md does not say what these packages hold"


def test_readme_not_modelled_list_is_true(simrun, docs_dir):
    """Each item names the doc that states it as not modelled; what the intro says is modelled
    runs (NVLS inside a node, SHARP / CollNet Direct, the tied-embedding all-reduce, the
    zero-bubble and DualPipe schedules)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Not modelled (yet)", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n- ", section)[1:]
    assert len(items) == 4
    for item in items:
        docs = re.findall(r"docs/[\w-]+\.md", item)
        assert docs, item
        for doc in docs:
            assert "not model" in (ROOT / doc).read_text().lower(), (doc, item)
    coll = ["collective", "--topo", "topologies/dgx-h100-1024.yaml", "--op", "allreduce",
            "--sizes", "1G"]
    rc, out, _ = simrun([*coll, "--gpus", "8", "--algorithm", "nvls"])
    assert rc == 0 and "nvls/Simple" in out
    sharp = docs_dir / "dgx-h100-1024-sharp.yaml"
    sharp.write_text((ROOT / "topologies" / "dgx-h100-1024.yaml").read_text().replace(
        "\nfabric:\n", "\nfabric:\n  sharp: true\n", 1))
    coll[2] = str(sharp)
    rc, out, err = simrun([*coll, "--gpus", "16", "--algorithm", "collnet",
                           "--nccl-collnet-enable", "1"])
    assert rc == 0 and "collnet/Simple" in out, err
    # the tied-embedding gradient all-reduce: the EMB group of the README's sample output
    assert "EMB 1.406 ms" in readme
    for schedule in ("zb-h1", "zb-h2", "zb-v", "dualpipe"):
        rc, _, err = simrun(["--model", "workloads/models/gpt2-medium.yaml", "--topo",
                             "topologies/tiny-2x2.yaml", "--tp", "1", "--pp", "2",
                             "--global-batch", "8", "--schedule", schedule, "--quiet"])
        assert rc == 0, (schedule, err)

"""A hostile-input campaign: every numeric field of every input format, and every numeric flag,
against the numeric edge cases; each case run as ``simrun`` would run it, classified.

Each case runs ``sim.cli.main(argv)`` in a forked child (the modules are imported once, in the
parent) under a 2 GB address-space limit and a 20 s CPU-time limit (CPU, not wall-clock time:
on a loaded machine a 2-second run can take 20 s of wall time), with its own temporary
directory. Classes:

- ``refused``: exit 2 with one line that names the file (and line or key) or the flag;
- ``refused-unclear``: exit 2, but the line names neither;
- ``ran``: exit 0;
- ``internal``: exit 1 with ``internal error`` (an arithmetic or other bug reached the user);
- ``traceback``: a Python traceback on stderr, or an exception out of ``main``;
- ``hang``: 20 s of CPU time spent (the limit's SIGXCPU stops it: exit 152) or 10 minutes of
  wall-clock time; ``crash``: killed by a signal or out of memory;
- ``clobbered``: an input file changed; ``leftover``: a temp file left in the directory.

    python scripts/hostile_campaign.py              # all cases, counts by class and format
    python scripts/hostile_campaign.py --json out.json --only model
    python scripts/hostile_campaign.py --root /path/to/other/checkout   # the same cases there

The seeds are shipped files (a model spec, a topology, an AICB workload, an operator table, a
kernel table, a validation file); their numbers are found by pattern, so the campaign follows
the files as they change.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

EDGES = ["0", "-0", "-1", "nan", ".nan", "inf", ".inf", "-.inf", "1e308", "1e-308", "4.9e-324",
         str(2**63 - 1), str(2**63), str(2**64), "1" * 400, "1_0", "٣", "true", "x", "2.5",
         "1e400", ""]
"""Edge values put in every numeric field (YAML spellings of NaN and infinity included)."""

CPU_LIMIT_S = 20
WALL_LIMIT_S = 600.0
MEMORY_BYTES = 2 << 30


def _yaml_scalars(text: str) -> list[tuple[int, str]]:
    """(line index, key) of every ``key: number`` line of a YAML text."""
    out = []
    for i, line in enumerate(text.split("\n")):
        m = re.match(r"^(\s*-?\s*)([A-Za-z_][\w]*):\s*([-+0-9.][^#\s]*)\s*(#.*)?$", line)
        if m:
            out.append((i, m.group(2)))
    return out


def _yaml_cases(name: str, text: str, argv) -> list[tuple[str, str, list[str]]]:
    """Cases of a YAML seed: each numeric value replaced by each edge."""
    lines = text.split("\n")
    cases = []
    for i, key in _yaml_scalars(text):
        for edge in EDGES:
            new = list(lines)
            head = lines[i].split(":", 1)[0]
            new[i] = f"{head}: {edge}" if edge else f"{head}:"
            cases.append((f"{name}:{key}={edge[:12]}", "\n".join(new), argv))
    return cases


def _column_cases(name: str, text: str, sep: str, argv, first_row: int,
                  rows: int) -> list[tuple[str, str, list[str]]]:
    """Cases of a table seed: each numeric cell of ``rows`` rows from ``first_row`` on."""
    lines = text.split("\n")
    cases = []
    for i in range(first_row, min(first_row + rows, len(lines))):
        cells = lines[i].split(sep) if sep else lines[i].split()
        for j, cell in enumerate(cells):
            if not re.fullmatch(r"[-+0-9.eE]+", cell.strip() or "x"):
                continue
            for edge in EDGES:
                new_cells = list(cells)
                new_cells[j] = edge
                new = list(lines)
                new[i] = (sep or " ").join(new_cells)
                cases.append((f"{name}:{i + 1}:{j}={edge[:12]}", "\n".join(new), argv))
    return cases


def build_cases(root: Path) -> list[tuple[str, str, str | None, list[str]]]:
    """(format, case id, file text or None, argv with ``{F}`` for the file)."""
    topo8 = str(root / "topologies" / "tiny-fattree-8.yaml")
    seeds = []
    for name in ("gpt2-medium", "moe-gpt-small", "llama3-8b"):
        model = (root / "workloads" / "models" / f"{name}.yaml").read_text()
        seeds += [("model", *c) for c in _yaml_cases(name, model, [
            "--model", "{F}", "--topo", topo8, "--tp", "1", "--global-batch", "8"])]
    for name in ("tiny-fattree-8", "dgx-h100-1024"):
        topo = (root / "topologies" / f"{name}.yaml").read_text()
        seeds += [("topology", *c) for c in _yaml_cases(name, topo, [
            "collective", "--topo", "{F}", "--sizes", "1M"])]
    val = (root / "workloads" / "validation" / "torchtitan-a100-fsdp.yaml").read_text()
    val = val.replace("../../topologies/", str(root / "topologies") + "/").replace(
        "../models/", str(root / "workloads" / "models") + "/")
    seeds += [("validation", *c) for c in _yaml_cases("validation", val, [
        "validate", "{F}", "--only", "Llama2-13B"])]
    aicb = (root / "workloads" / "aicb-gpt13b-tp8-pp8-512gpu.txt").read_text()
    a512 = str(root / "topologies" / "dgx-a100-512.yaml")
    seeds += [("aicb", *c) for c in _column_cases("aicb", aicb, "", [
        "--workload", "{F}", "--topo", a512], 0, 8)]
    opt = (root / "workloads" / "optable-gpt2-large-block.tsv").read_text()
    seeds += [("optable", *c) for c in _column_cases("optable", opt, "\t", [
        "--workload", "{F}", "--topo", topo8], 1, 12)]
    kt = (root / "sim" / "data" / "kernels" / "h100-sxm.csv").read_text().split("\n")
    head = next(i for i, t in enumerate(kt) if t.startswith("kind,"))
    kt_text = "\n".join(kt[: head + 40])
    h100 = str(root / "topologies" / "dgx-h100-scalable.yaml")
    seeds += [("kernel-table", *c) for c in _column_cases("kernels", kt_text, ",", [
        "--model", "gpt2-medium", "--topo", h100, "--nodes", "1", "--tp", "8", "--global-batch",
        "8", "--kernel-table", "{F}"], head + 1, 12)]
    cases = [(fmt, cid, text, argv) for fmt, cid, text, argv in seeds]
    cases += _flag_cases(root, topo8)
    return cases


FLAGS = ["--tp", "--pp", "--dp", "--vpp", "--cp", "--ep", "--microbatches", "--micro-batch",
         "--global-batch", "--gpus", "--nodes", "--compute-scale", "--jitter", "--samples",
         "--seed", "--max-sim-time-s", "--moe-load-imbalance", "--host-dispatch-us"]


def _flag_cases(root: Path, topo8: str) -> list[tuple[str, str, None, list[str]]]:
    """Every numeric flag of a run and of ``simrun collective`` with every edge value, and
    ``--set`` entries."""
    base = ["--model", "gpt2-medium", "--topo", topo8, "--tp", "1", "--global-batch", "8"]
    cases = []
    for flag in FLAGS:
        for edge in EDGES:
            extra = ["--jitter", "0.1"] if flag in ("--samples", "--seed") else []
            cases.append(("flags", f"{flag}={edge[:12]}", None, [*base, *extra, f"{flag}={edge}"]))
    for flag in ("--gpus", "--nodes", "--sizes"):
        for edge in EDGES:
            cases.append(("collective", f"{flag}={edge[:12]}", None,
                          ["collective", "--topo", topo8, f"{flag}={edge}"]))
    for flag in ("--slow-gpu", "--slow-node"):
        for edge in EDGES:
            for form in (f"1:{edge}", f"{edge}:2"):
                cases.append(("faults", f"{flag}={form[:14]}", None, [*base, f"{flag}={form}"]))
    for edge in EDGES:
        for form in (f"nic:0.0:{edge}", f"nic:{edge}.0:0.5", f"nvlink:{edge}:0.5"):
            cases.append(("faults", f"--degrade-link={form[:16]}", None,
                          [*base, f"--degrade-link={form}"]))
    for key in ("nodes", "node.gpus", "fabric.link_bandwidth_gbps", "fabric.efficiency"):
        for edge in EDGES:
            cases.append(("set", f"--set {key}={edge[:12]}", None,
                          [*base, "--set", f"{key}={edge}"]))
    return cases


def _child(argv: list[str], wfd: int) -> None:
    """In the forked child: run ``main(argv)`` and send (code, stderr) to the parent."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S + 5))
    from sim.cli import main

    err, out = io.StringIO(), io.StringIO()
    try:
        with redirect_stderr(err), redirect_stdout(out):
            code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: BLE001 - what escapes main is what the campaign counts
        code = -1
        err.write(f"Traceback (escaped main): {type(e).__name__}: {e}\n")
    os.write(wfd, json.dumps({"code": code, "err": err.getvalue()[-4000:]}).encode())
    os._exit(0)


def run_case(argv: list[str], cwd: Path) -> tuple[dict | None, str]:
    """Fork, run, wait at most :data:`WALL_LIMIT_S`: (result or None, "hang"/"crash"/"")."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        os.chdir(cwd)
        _child(argv, wfd)
    os.close(wfd)
    chunks, end = [], time.monotonic() + WALL_LIMIT_S
    while True:
        left = end - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(rfd)
            return None, "hang"
        ready, _, _ = select.select([rfd], [], [], left)
        if ready:
            data = os.read(rfd, 1 << 16)
            if not data:
                break
            chunks.append(data)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    if not chunks:  # killed: by the CPU-time limit (a hang) or otherwise (a crash)
        spent = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU,
                                                                     signal.SIGKILL)
        return None, "hang" if spent else "crash"
    return json.loads(b"".join(chunks)), ""


def classify(res: dict | None, how: str, file: Path | None) -> str:
    if res is None:
        return how
    code, err = res["code"], res["err"]
    if code == 128 + signal.SIGXCPU:  # the CPU-time limit
        return "hang"
    if "Traceback" in err or code == -1:
        return "traceback"
    if code == 0:
        return "ran"
    if code == 1 and "internal error" in err:
        return "internal"
    if code == 2:
        lines = [x for x in err.strip().split("\n") if x.startswith("simrun")]
        last = lines[-1] if lines else ""
        named = (file is not None and file.name in last) or re.search(r"--[a-z]", last)
        return "refused" if len(lines) == 1 and named else "refused-unclear"
    return f"exit-{code}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--only", help="formats to run (comma-separated)")
    ap.add_argument("--json", type=Path, help="write every non-clean case here")
    args = ap.parse_args()
    sys.path.insert(0, str(args.root))
    import sim.cli  # noqa: F401 - imported once, before forking

    cases = build_cases(args.root)
    if args.only:
        cases = [c for c in cases if c[0] in args.only.split(",")]
    counts: Counter = Counter()
    by_format: dict[str, Counter] = {}
    bad = []
    t0 = time.monotonic()
    for fmt, cid, text, argv in cases:
        work = Path(tempfile.mkdtemp(prefix="simrun-campaign-"))
        try:
            file = None
            if text is not None:
                file = work / "input"
                file.write_text(text)
                argv = [a.replace("{F}", str(file)) for a in argv]
            res, how = run_case([*argv, "--json", str(work / "out.json")]
                                if argv[0] not in ("validate",) else argv, work)
            cls = classify(res, how, file)
            if file is not None and file.read_text() != text:
                cls = "clobbered"
            left = [p.name for p in work.iterdir() if p.name.endswith(".tmp")]
            if left:
                cls = "leftover"
        finally:
            shutil.rmtree(work, ignore_errors=True)
        counts[cls] += 1
        by_format.setdefault(fmt, Counter())[cls] += 1
        if cls not in ("refused", "ran"):
            bad.append({"format": fmt, "case": cid, "class": cls, "argv": argv,
                        "stderr": (res or {}).get("err", "")[-400:]})
    print(f"{len(cases)} cases in {time.monotonic() - t0:.0f} s")
    for fmt, c in by_format.items():
        print(f"  {fmt:13s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    print("total: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "bad": bad}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``simrun sweep`` takes the run's training and execution flags (sim/cli/sweep_args.py):

- every flag of ``simrun`` is a sweep flag with the same parsing, or refused in a sweep with a
  one-line reason (:data:`~sim.cli.sweep_args.EXCLUDED`): a new run flag cannot be forgotten;
- a swept layout with a flag gives exactly the single run's result with that flag;
- a flag that does not apply to a layout skips it with the single run's reason (or, known only
  after simulating, marks its row ``inapplicable``); none applying anywhere is an error;
- the store's identity (``--resume``) includes the new flags.
"""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from sim.cli import build_parser as run_parser
from sim.cli import main
from sim.cli.sweep import build_parser as sweep_parser
from sim.cli.sweep_args import EXCLUDED, LISTS, refused
from sim.options import applicable

# attributes that make two argparse options parse the same
SAME = ("type", "choices", "nargs", "const", "metavar", "default")
# a sweep needs them (a run: --workload instead, or --microbatches); --global-batch-size is
# Megatron-LM's name of --global-batch
REQUIRED = {"--model", "--global-batch", "--global-batch-size"}


def _options(parser) -> dict:
    return {o: a for a in parser._actions for o in a.option_strings if o.startswith("--")}


def test_every_run_flag_is_a_sweep_flag_or_refused_with_a_reason(capsys):
    run, sweep = _options(run_parser()), _options(sweep_parser())
    assert set(EXCLUDED) <= set(run)  # no stale exclusion
    for flag, action in run.items():
        assert flag in sweep, f"{flag}: add it to simrun sweep or to sweep_args.EXCLUDED"
        mine = sweep[flag]
        if flag in EXCLUDED:
            assert refused(mine) and EXCLUDED[flag].strip()
            continue
        assert not refused(mine)
        assert mine.dest == action.dest, flag
        if flag in LISTS:  # a comma-separated list of the run's values
            assert mine.type is None and mine.metavar == "LIST", flag
            continue
        assert type(mine) is type(action), flag
        for attr in SAME:
            assert getattr(mine, attr) == getattr(action, attr), (flag, attr)
        assert mine.required == (action.required or flag in REQUIRED), flag
    # each refused flag: exit 2, one line, the reason, whatever its argument
    base = ["sweep", "--model", "gpt2-medium", "--topo", "tiny-2x2", "--global-batch", "8"]
    for flag, why in EXCLUDED.items():
        assert main([*base, flag, "x"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{flag}: not a sweep flag: " in err, err
        assert why.split()[0] in err
    # and every run flag is in the table of verdicts the per-layout checks use
    assert set(run) - {"--help", "--version"} <= {o for f in applicable.TABLE
                                                  for o in run[f].option_strings}


GPT = ["--model", "gpt2-medium", "--topo", "tiny-2x2", "--global-batch", "8"]
P2 = [*GPT, "--tp", "1", "--pp", "2"]  # DP 2, 4 microbatches
T2 = [*GPT, "--tp", "2", "--pp", "1", "--sequence-parallel"]
P2V = [*P2, "--vpp", "2"]  # interleaved: where Megatron's delayed reduction changes the run
D4 = [*GPT, "--tp", "1", "--pp", "1"]
H100 = ["--model", "gpt2-medium", "--topo", "dgx-h100-1024", "--gpus", "8", "--tp", "2",
        "--pp", "1", "--global-batch", "8"]
LLAMA = ["--model", "llama3-8b", "--topo", "dgx-a100-1024", "--gpus", "8", "--tp", "1",
         "--pp", "1", "--global-batch", "8", "--fsdp"]
# 24 layers + the loss = 25 over 5 stages (24 alone do not split: compared with the embedding
# counted instead, as tests/test_no_silent_whatifs.py does)
P5 = [*GPT, "--tp", "1", "--pp", "5", "--nodes", "3", "--gpus", "5"]
BEFORE = {"--account-for-loss-in-pipeline-split": ["--account-for-embedding-in-pipeline-split"]}
MOE = ["--model", "moe-gpt-small", "--topo", "tiny-2x2", "--tp", "1", "--pp", "1", "--ep", "4",
       "--global-batch", "4"]  # the EP group spans both nodes
# (layout and shared options, the flag(s) under test, whether they change the result)
CASES = [
    (P2, ["--defer-embedding-wgrad-compute"], True),
    (P2, ["--defer-embedding-wgrad-compute", "--wgrad-deferral-limit", "1"], True),
    (P2V, ["--no-delay-grad-reduce"], True),
    (P2, ["--grad-reduce-in-bf16"], True),
    (P2, ["--distributed-optimizer", "--overlap-param-gather"], True),
    (P2, ["--decoder-first-pipeline-num-layers", "10"], True),
    (P5, ["--account-for-loss-in-pipeline-split"], True),
    (P2, ["--vpp", "2", "--microbatch-group-size", "4"], True),
    (P2, ["--host-dispatch-us", "20"], True),
    (P2, ["--nccl-channels", "64"], True),
    (P2, ["--comm-overlap-slowdown", "3"], True),
    (P2, ["--compute-efficiency", "0.5"], True),
    (P2, ["--set", "node.nics.bandwidth_gbps=40"], True),
    (P2, ["--overlap-grad-reduce"], False),  # states the default
    (P2, ["--max-sim-time-s", "1000"], False),  # the watchdog
    (T2, ["--tp-comm-overlap"], True),
    (D4, ["--fsdp"], True),
    (H100, ["--dtype", "fp8", "--fp8-recipe", "tensorwise"], True),
    (H100, ["--dtype", "fp8", "--distributed-optimizer", "--fp8-param-gather"], True),
    (H100, ["--kernel-table", "none"], True),
    (LLAMA, ["--no-compile"], True),
    (LLAMA, ["--no-compile", "--norm-type", "fused_rmsnorm"], True),
    (LLAMA, ["--no-rope-fusion"], True),
    (LLAMA, ["--use-torch-fsdp2"], True),
    (MOE, ["--moe-load-imbalance", "1.5"], True),
    (MOE, ["--moe-expert-capacity-factor", "0.5"], True),
    (MOE, ["--moe-token-dispatcher-type", "flex"], True),
    (MOE, ["--moe-shared-expert-intermediate-size", "512"], True),
    (MOE, ["--overlap-moe-expert-parallel-comm"], True),
]


def _run(tmp_path, args: list[str]) -> dict:
    out = tmp_path / "run.json"
    assert main([*args, "--json", str(out), "--quiet"]) == 0
    return json.loads(out.read_text())


def _sweep(tmp_path, args: list[str], name: str = "s") -> dict:
    out = tmp_path / name
    assert main(["sweep", *args, "--out", str(out), "--workers", "1", "--no-plot",
                 "--no-progress", "--quiet"]) == 0
    return json.loads((out / "results.json").read_text())


@pytest.mark.parametrize(("base", "flags", "changes"), CASES,
                         ids=[" ".join(f) for _, f, _ in CASES])
def test_a_swept_layout_with_a_flag_is_the_single_run_with_it(base, flags, changes, tmp_path):
    rows = _sweep(tmp_path, [*base, *flags])["rows"]
    assert len(rows) == 1 and rows[0]["status"] == "ok", rows
    row = rows[0]
    rep = _run(tmp_path, [*base, *flags])
    assert row["iteration_time_s"] == rep["iteration_time_s"]
    assert row["memory_per_gpu_bytes"] == rep["memory"]["peak_bytes"]["total_bytes"]
    assert row["mfu"] == rep["mfu"] and row["events"] == rep["simulation"]["events"]
    without = _run(tmp_path, [*base, *BEFORE.get(flags[0], [])])
    differs = (without["iteration_time_s"], without["memory"]["peak_bytes"]["total_bytes"]) != (
        rep["iteration_time_s"], rep["memory"]["peak_bytes"]["total_bytes"])
    assert differs == changes


def test_grad_reduce_in_bf16_in_a_sweep_by_hand(tmp_path):
    """GPT-2 medium at TP 1, PP 2: stage 0 (the busiest) holds 12 layers of 12h² + 13h
    parameters (h = 1024), the word embedding (vocabulary 50257 padded to 50304, a multiple of
    Megatron's 128) and 1024 positions: 12·12,596,224 + 50,304·1024 + 1024·1024 = 203,714,560
    parameters. --grad-reduce-in-bf16 keeps their gradients in 2 bytes instead of 4, so the
    stage's peak memory falls by 2 × 203,714,560 = 407,429,120 bytes; the iteration time is
    the single run's with the flag (its smaller DP reduce-scatter)."""
    params = 12 * (12 * 1024**2 + 13 * 1024) + 50304 * 1024 + 1024 * 1024
    assert params == 203_714_560
    base = [*GPT, "--tp", "1", "--pp", "2"]
    rows = _sweep(tmp_path, [*base, "--pp", "1,2"], "fp32")["rows"]
    bf16 = _sweep(tmp_path, [*base, "--pp", "1,2", "--grad-reduce-in-bf16"], "bf16")["rows"]
    key = "tp1-pp2-dp2-vpp1-mb1"
    a = next(r for r in rows if r["layout"] == key)
    b = next(r for r in bf16 if r["layout"] == key)
    assert a["memory_per_gpu_bytes"] - b["memory_per_gpu_bytes"] == 2 * params
    single = _run(tmp_path, [*base, "--grad-reduce-in-bf16"])
    assert b["iteration_time_s"] == single["iteration_time_s"] < a["iteration_time_s"]


def test_a_flag_skips_the_layouts_where_the_single_run_refuses_it(tmp_path, capsys):
    # Megatron-Core refuses the deferral at PP 1; --tp-comm-overlap needs TP > 1 with SP
    data = _sweep(tmp_path, [*GPT, "--tp", "1,2", "--pp", "1,2", "--sequence-parallel",
                             "--tp-comm-overlap", "--defer-embedding-wgrad-compute"])
    assert [r["layout"] for r in data["rows"]] == ["tp2-pp2-dp1-vpp1-mb1"]
    skipped = {s["layout"]: s["reason"] for s in data["skipped_invalid"]}
    assert skipped["tp2-pp1-dp2-vpp1-mb1"].startswith("--defer-embedding-wgrad-compute: ")
    assert skipped["tp1-pp2-dp2-vpp1-mb1"].startswith("--tp-comm-overlap: needs")
    err = capsys.readouterr().err  # and the command line says so
    assert "  --tp-comm-overlap does not apply to 2 layouts, skipped (e.g. needs" in err
    assert "  --defer-embedding-wgrad-compute does not apply to 1 layout, skipped" in err
    # a flag that changes nothing in a layout: skipped with the single run's reason (here
    # --no-delay-grad-reduce in non-interleaved 1F1B), which is exactly the run's refusal
    data = _sweep(tmp_path, [*GPT, "--tp", "1", "--pp", "2", "--vpp", "1,2",
                             "--no-delay-grad-reduce"], "d")
    assert [r["layout"] for r in data["rows"]] == ["tp1-pp2-dp2-vpp2-mb1"]
    why = data["skipped_invalid"][0]["reason"]
    assert main([*P2, "--no-delay-grad-reduce", "--quiet"]) == 2
    assert why in capsys.readouterr().err
    # known only after simulating: no asynchronous collective at DP 1 (no DP gradients)
    data = _sweep(tmp_path, [*GPT, "--tp", "2", "--pp", "1,2", "--nccl-channels", "16"], "n")
    st = {r["layout"]: r for r in data["rows"]}
    assert st["tp2-pp2-dp1-vpp1-mb1"]["status"] == "inapplicable"
    assert st["tp2-pp2-dp1-vpp1-mb1"]["reason"].startswith("--nccl-channels: the run has no")
    assert st["tp2-pp1-dp2-vpp1-mb1"]["status"] == "ok" and data["inapplicable"] == 1
    # no layout where it applies: an error naming why
    assert main(["sweep", *D4, "--no-rope-fusion", "--out", str(tmp_path / "x")]) == 2
    assert "--no-rope-fusion: applies to no layout of the sweep (1 layout; e.g. " in (
        capsys.readouterr().err)


SMALL = ["sweep", *GPT, "--tp", "1,2", "--pp", "1,2", "--workers", "1", "--no-plot",
         "--no-progress", "--quiet"]


@pytest.mark.parametrize(("flags", "differs"), [
    (["--grad-reduce-in-bf16"], "training"),
    (["--decoder-first-pipeline-num-layers", "10"], "training"),
    (["--no-compile"], "training"),
    (["--host-dispatch-us", "5"], "simulation"),
    (["--nccl-channels", "4"], "simulation"),
    (["--nccl-channels", "8"], "flags"),  # its default, given: layouts may be inapplicable
    (["--kernel-table", "none"], "compute"),
    (["--set", "node.nics.bandwidth_gbps=40"], "topology"),
])
def test_resume_refuses_a_store_made_without_the_new_flag(flags, differs, tmp_path, capsys):
    out = ["--out", str(tmp_path / "s")]
    if "--no-compile" in flags:  # torchtitan's Llama block: a llama spec
        base = [a for a in SMALL if a != "gpt2-medium"]
        base.insert(base.index("--model") + 1, str(ROOT / "tests/data/tiny-llama-2layer.yaml"))
    else:
        base = SMALL
    assert main([*base, *out, "--limit", "1"]) == 0
    capsys.readouterr()
    assert main([*base, *flags, *out, "--resume"]) == 2
    err = capsys.readouterr().err
    assert differs in err.split("differs in: ")[1].split(")")[0].split(", "), err
    # a store made with the flag resumes with it
    out2 = ["--out", str(tmp_path / "t")]
    assert main([*base, *flags, *out2, "--limit", "1"]) == 0
    assert main([*base, *flags, *out2, "--resume"]) == 0
    assert "1 already done" in capsys.readouterr().err

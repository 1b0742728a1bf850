"""--jitter CV / --samples N / --seed S: the stated distribution, draws independent of event
order, the slowest member deciding a collective, and byte-identical output for a seed."""

import json
import math

import pytest
from conftest import ROOT

from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.engine.jitter import Jitter
from sim.network.simple import AlphaBetaNetwork
from sim.parallel.placement import Placement
from sim.parallel.rank_classes import RankClasses
from sim.program.pipeline import PipelineProgram, StageProgram
from sim.program.workload import Layer, Phase

TOPO = str(ROOT / "topologies" / "dgx-a100-1024.yaml")
GPT22 = str(ROOT / "workloads" / "models" / "gpt-22b.yaml")
GPT2M = str(ROOT / "workloads" / "models" / "gpt2-medium.yaml")


def test_factors_are_lognormal_with_mean_one_and_the_given_cv():
    """20,000 draws: sample mean within 4 standard errors of 1 (SE = CV/√n = 0.0014), sample
    CV within 5% of 0.2, and ln(factor) symmetric around −σ²/2."""
    j = Jitter(0.2, seed=3)
    xs = [j.factor("k", i) for i in range(20000)]
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    assert abs(mean - 1) < 4 * 0.2 / math.sqrt(len(xs))
    assert sd / mean == pytest.approx(0.2, rel=0.05)
    logs = sorted(math.log(x) for x in xs)
    assert logs[len(logs) // 2] == pytest.approx(-math.log1p(0.04) / 2, abs=0.01)


def test_draws_depend_only_on_seed_sample_and_what():
    a, b = Jitter(0.1, 5), Jitter(0.1, 5)
    keys = [(r, "F", m) for r in range(3) for m in range(4)]
    fwd = {k: a.factor(*k) for k in keys}
    rev = {k: b.factor(*k) for k in reversed(keys)}
    assert fwd == rev
    assert Jitter(0.1, 6).factor(0, "F", 0) != fwd[(0, "F", 0)]
    assert Jitter(0.1, 5, sample=1).factor(0, "F", 0) != fwd[(0, "F", 0)]
    # transfers only ever get longer
    assert all(Jitter(0.5, s).transfer_extra_ns(1000, "t") >= 0 for s in range(200))


def tp_program() -> PipelineProgram:
    """TP 2, one stage, one microbatch: a 1000 ns forward kernel, then a blocking TP all-reduce
    of 100 bytes (2(n−1)/n · S at 1 GB/s = 100 ns)."""
    ar = Comm(CollKind.ALLREDUCE, GroupKind.TP, 100)
    lay = Layer("L", Phase(1000, ar))
    return PipelineProgram(tp=2, pp=1, dp=1, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [(lay,)])], schedule="1f1b")


def test_the_collective_waits_for_its_slowest_member():
    """Per rank: rank r's kernel takes round(1000 · f(r, mb 0, chunk 0, F, step 0, part 0));
    the all-reduce starts when the slower rank arrives and takes 100 ns + its transfer extra
    (keyed by group TP, first member 0, sequence 0), the same for both members."""
    j = Jitter(0.3, seed=11)
    prog = tp_program()
    pl = Placement(2, 1, 1)
    res = simulate(prog, AlphaBetaNetwork(0, {GroupKind.TP: 1.0}), placement=pl,
                   classes=RankClasses.per_rank(pl), jitter=j)
    k = [j.kernel_ns(1000, r, 0, 0, "F", 0, 0) for r in (0, 1)]
    assert k[0] != k[1]
    start = max(k)
    assert res.iteration_ns == start + 100 + j.transfer_extra_ns(100, GroupKind.TP, 0, 0)
    for st in res.ranks:  # the faster rank's wait is exposed TP time
        assert st.compute_ns == k[st.rank]
        assert st.exposed_comm_ns[GroupKind.TP] == res.iteration_ns - k[st.rank]


def run_cli(tmp_path, *extra, name="r.json"):
    """GPT-2 medium on 8 GPUs of one node, TP 2 × PP 2 × DP 2: every rank simulated."""
    out = tmp_path / name
    rc = main(["--model", GPT2M, "--topo", TOPO, "--tp", "2", "--pp", "2", "--dp", "2",
               "--global-batch", "4", "--nodes", "1", "--quiet", "--json", str(out), *extra])
    assert rc == 0
    return out.read_bytes()


def test_same_seed_gives_byte_identical_output_and_slowest_members_slow_the_mean(tmp_path):
    a = run_cli(tmp_path, "--jitter", "0.1", "--samples", "2", "--seed", "7", name="a.json")
    b = run_cli(tmp_path, "--jitter", "0.1", "--samples", "2", "--seed", "7", name="b.json")
    c = run_cli(tmp_path, "--jitter", "0.1", "--samples", "2", "--seed", "8", name="c.json")
    assert a == b and a != c
    rep = json.loads(a)
    v = rep["variability"]
    assert v["samples"] == 2 and len(v["iteration_times_s"]) == 2
    assert v["p50_iteration_s"] <= v["p90_iteration_s"] <= v["p99_iteration_s"]
    assert v["deterministic_iteration_s"] == rep["iteration_time_s"]
    # 8 ranks, each synchronisation waits for the slowest of its members: slower on average
    # although every kernel factor has mean 1
    assert v["mean_slowdown"] > 1.0
    assert any("every synchronisation waits for its slowest member" in x
               for x in rep["assumptions"])


@pytest.mark.parametrize("flags", [["--samples", "3"], ["--seed", "1"]])
def test_samples_and_seed_need_jitter(capsys, flags):
    rc = main(["--model", GPT22, "--topo", TOPO, "--tp", "8", "--global-batch", "1", *flags])
    assert rc == 2 and "needs --jitter" in capsys.readouterr().err

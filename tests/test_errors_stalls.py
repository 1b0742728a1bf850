"""No hangs: when ranks wait for something that never comes, the simulation stops and says which
rank waits on what; a watchdog bounds runaway simulations (``--max-sim-time-s``).

Every stall here is provoked on purpose with a tiny hand-built program; the programs simrun
builds from workload files never stall (a stall through the CLI is an internal error, exit 1).
"""

from __future__ import annotations

import json

import pytest
from conftest import SEED_512, TOPOLOGIES

import sim.engine.core as core
from sim.cli import main
from sim.comm import CollKind, Comm, GroupKind
from sim.engine import simulate
from sim.errors import SimulationStalled, WatchdogExpired
from sim.network.simple import FreeNetwork
from sim.program.pipeline import PipelineProgram, StageProgram, Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.runtime.watchdog import simulate_watched

LAYER = Layer("l", Phase(100), Phase(50), Phase(50))
TOPO_512 = str(TOPOLOGIES / "dgx-a100-512.yaml")


def _program(pp=2, m=2, prologues=None, epilogues=None, pp_bytes=0, layer=LAYER):
    stages = [StageProgram(s, [(layer,)], prologue=(prologues or {}).get(s, ()),
                           epilogue=(epilogues or {}).get(s, ())) for s in range(pp)]
    return PipelineProgram(tp=1, pp=pp, dp=1, ep=1, vpp=1, microbatches=m, pp_bytes=pp_bytes,
                           stages=stages, schedule="1f1b")


def _sync(kind=CollKind.ALLREDUCE, size=1024, label="embedding_grads"):
    return (Task(label, TaskKind.GRAD_SYNC, 0, Comm(kind, GroupKind.PP, size)),)


@pytest.mark.parametrize("per_rank", [False, True])
def test_collective_some_members_never_reach(per_rank):
    """Stage 0 all-reduces with the last stage before its first forward; stage 1 never does,
    and waits for the activation stage 0 never sends."""
    prog = _program(prologues={0: _sync()})
    with pytest.raises(SimulationStalled) as e:
        simulate(prog, FreeNetwork(), per_rank=per_rank)
    assert str(e.value) == (
        "simulation stopped at t = 0.000000 s with 2 rank(s) still waiting: "
        "rank 0: ALLREDUCE in PP group (0, 1) (embedding_grads); "
        "rank 1: receive of F microbatch 0 for virtual stage 1")
    assert e.value.exit_code == 1


def test_collective_in_one_epilogue_only_stalls_that_rank_at_its_time():
    # 1F1B, p = 2, M = 2, f = 100, b = 100: stage 0 ends its last backward at t = 600 ns
    prog = _program(epilogues={0: _sync(label="tied_embedding_sync")})
    with pytest.raises(SimulationStalled) as e:
        simulate(prog, FreeNetwork(), per_rank=True)
    assert str(e.value) == ("simulation stopped at t = 0.000001 s with 1 rank(s) still waiting: "
                            "rank 0: ALLREDUCE in PP group (0, 1) (tied_embedding_sync)")


def test_receive_whose_send_never_comes(monkeypatch):
    """Stage 0's schedule loses its second forward: stage 1 waits for that activation."""
    real = core.schedule_table

    def lossy(name, p, m, v=1, n=None, ep_a2a_overlap=False):
        table = real(name, p, m, v, n, ep_a2a_overlap)
        table[0] = [op for op in table[0] if not (op.kind == "F" and op.microbatch == 1)]
        table[0] = [op for op in table[0] if not (op.kind == "B" and op.microbatch == 1)]
        return table

    monkeypatch.setattr(core, "schedule_table", lossy)
    with pytest.raises(SimulationStalled) as e:
        simulate(_program(pp_bytes=10), FreeNetwork(), per_rank=True)
    assert "1 rank(s) still waiting: rank 1: receive of F microbatch 1 for virtual stage 1" \
        in str(e.value)


def test_many_stalled_ranks_fit_on_one_line():
    prog = PipelineProgram(tp=1, pp=2, dp=12, ep=1, vpp=1, microbatches=1, pp_bytes=0,
                           stages=[StageProgram(0, [(LAYER,)], prologue=_sync()),
                                   StageProgram(1, [(LAYER,)])], schedule="1f1b")
    with pytest.raises(SimulationStalled) as e:
        simulate(prog, FreeNetwork(), per_rank=True)
    msg = str(e.value)
    assert "\n" not in msg and "with 24 rank(s) still waiting" in msg
    assert msg.endswith("(and 16 more)") and msg.count("rank ") == 8


def test_collective_sizes_that_do_not_match_are_reported():
    prog = _program(prologues={0: _sync(size=1024), 1: _sync(size=4096)})
    with pytest.raises(SimulationStalled, match="1024.*4096|4096.*1024"):
        simulate(prog, FreeNetwork(), per_rank=True)


def test_collective_kinds_that_do_not_match_are_reported():
    prog = _program(prologues={0: _sync(CollKind.ALLREDUCE), 1: _sync(CollKind.ALLGATHER)})
    with pytest.raises(SimulationStalled, match="ALLGATHER"):
        simulate(prog, FreeNetwork(), per_rank=True)


def test_send_without_its_receive_is_reported(monkeypatch):
    """Stage 0's schedule loses its last backward: stage 1 sends a gradient nobody receives."""
    real = core.schedule_table

    def lossy(name, p, m, v=1, n=None, ep_a2a_overlap=False):
        table = real(name, p, m, v, n, ep_a2a_overlap)
        table[0] = [op for op in table[0] if not (op.kind == "B" and op.microbatch == m - 1)]
        return table

    monkeypatch.setattr(core, "schedule_table", lossy)
    with pytest.raises(SimulationStalled, match="never received"):
        simulate(_program(pp_bytes=10), FreeNetwork(), per_rank=True)


# ---- the watchdog --------------------------------------------------------------------------
LONG = Layer("long", Phase(10**12), Phase(10**12), Phase(10**12))  # 1000 s per phase


def test_watchdog_stops_a_runaway_simulation_at_the_limit():
    prog = _program(layer=LONG)  # iteration (M + p − 1)(f + b) = 3 × 3000 s = 9000 s
    with pytest.raises(WatchdogExpired) as e:
        simulate_watched(simulate, prog, FreeNetwork(), max_sim_time_s=3600.0)
    msg = str(e.value)
    assert msg.startswith("max_sim_time_s: watchdog: the iteration had not finished after "
                          "3600 s of simulated time")
    # 1F1B, p = 2, M = 2, f = 1000 s, b = 2000 s: at 3600 s stage 1 computes B0 (2000-4000 s)
    # and stage 0 waits for its gradient
    assert "ranks then: rank 0: receive of B microbatch 0 for virtual stage 0; rank 1: running." \
        in msg and e.value.exit_code == 2
    ok = simulate_watched(simulate, prog, FreeNetwork(), max_sim_time_s=9000.0)
    assert ok.iteration_ns == 9000 * 10**9  # finishes exactly at the limit: allowed
    assert ok.iteration_ns == simulate(prog, FreeNetwork()).iteration_ns


def test_watchdog_does_not_hide_a_deadlock_behind_the_limit():
    """With a limit SimPy advances the clock to it even when nothing can happen; the deadlock
    must still be reported as such, at the time it happened (0 s), not as a watchdog."""
    with pytest.raises(SimulationStalled) as e:
        simulate_watched(simulate, _program(prologues={0: _sync()}), FreeNetwork(),
                         max_sim_time_s=5.0)
    assert not isinstance(e.value, WatchdogExpired)
    assert str(e.value).startswith("simulation stopped at t = 0.000000 s with 2 rank(s)")


def test_cli_watchdog_exit_2_and_default_changes_nothing(tmp_path, capsys):
    base = ["--workload", str(SEED_512), "--topo", TOPO_512, "--quiet"]
    assert main([*base, "--max-sim-time-s", "0.001", "--json", str(tmp_path / "w.json")]) == 2
    err = capsys.readouterr().err.strip()
    # the workload file the iteration came from, then the flag (issue 31: the file was missing)
    assert err.count("\n") == 0 and err.startswith(f"simrun: error: {SEED_512}: --max-sim-time-s: "
                                                   "watchdog: the iteration had not finished "
                                                   "after 0.001 s")
    assert not (tmp_path / "w.json").exists()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*base, "--json", str(a)]) == 0
    assert main([*base, "--json", str(b), "--max-sim-time-s", "1e9"]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert 0.001 < json.loads(a.read_text())["iteration_time_s"] < 1e6  # the default 1e6 s


def test_cli_reports_a_stall_in_one_line_with_exit_1(monkeypatch, capsys):
    """If a bug ever made the CLI build a stalling program: one line naming the ranks, exit 1."""
    import sim.workload.stages as stages

    monkeypatch.setattr(stages, "build_program", lambda w, opts: _program(
        prologues={0: _sync()}))
    rc = main(["--workload", str(SEED_512), "--topo", str(TOPOLOGIES / "tiny-2x2.yaml")])
    out = capsys.readouterr()
    assert rc == 1 and out.out == ""
    assert out.err == ("simrun: error: simulation stopped at t = 0.000000 s with 2 rank(s) still "
                       "waiting: rank 0: ALLREDUCE in PP group (0, 1) (embedding_grads); rank 1: "
                       "receive of F microbatch 0 for virtual stage 1\n")

"""Why a what-if moves the iteration or cannot (sim/scenario/whatif.py), and the compute line's
sources (kernel table or roofline, by share).

Reaches are hand-derived from the placement (rank = tp + TP·dp + TP·DP·pp, 8 GPUs per node)
and the fat tree's leaf sizes: dgx-a100-1024's 40-port non-blocking leaves take 20 nodes per
rail, its 4:1 variant 32; dgx-h100-scalable's 64-port leaves take 32 nodes per rail (48 at 3:1).
A claim that an override cannot change the run is checked by simulating it.
"""

from __future__ import annotations

import json

from sim.cli import main
from sim.comm import GroupKind
from sim.parallel.placement import Placement
from sim.scenario import whatif
from sim.topology import load_topology

KINDS = {GroupKind.TP, GroupKind.PP, GroupKind.DP, GroupKind.EMB}


def test_reach_on_the_a100_cluster_by_hand():
    """TP8 DP8 PP16 on 128 DGX A100: a DP group is 8 consecutive nodes (8k … 8k+7); the group
    of nodes 16–23 straddles the 20-node leaves, so DP reaches the spine; with 32-node leaves
    (the 4:1 variant) every DP group stays under one leaf. The pipeline (nodes 0, 8, … 120)
    and the embedding pair (nodes 0 and 120) cross leaves on both."""
    pl = Placement(8, 8, 16)
    r = whatif.reach(load_topology("dgx-a100-1024"), pl, KINDS)
    assert {k: lv for k, (lv, _) in r.items()} == {
        GroupKind.TP: "node", GroupKind.PP: 2, GroupKind.DP: 2, GroupKind.EMB: 2}
    r4 = whatif.reach(load_topology("dgx-a100-1024-oversub4"), pl, KINDS)
    assert r4[GroupKind.DP] == (1, False) and r4[GroupKind.PP][0] == 2


def test_reach_samples_at_most_the_stated_pairs_at_65536_gpus():
    """8,192 nodes: the line says it examined a sample, and still finds the pipeline's
    farthest pair (stage 0 and stage 1 are 1,024 nodes apart: beyond a 32·32-node pod)."""
    topo = load_topology("dgx-h100-scalable", nodes=8192)
    r = whatif.reach(topo, Placement(8, 1024, 8), KINDS)
    assert r[GroupKind.PP] == (3, True)
    assert "at most 1024 rank pairs" in whatif.reach_line(topo, Placement(8, 1024, 8), KINDS)


def _run(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    args = ["--model", "llama3-8b", "--topo", "dgx-h100-scalable", "--nodes", "32", "--tp", "8",
            "--pp", "2", "--global-batch", "32", *extra, "--quiet", "--json", str(out)]
    assert main(args) == 0
    return json.loads(out.read_text())


def test_an_override_no_traffic_crosses_says_so_and_changes_nothing(tmp_path):
    """32 DGX H100 nodes, TP8 PP2 DP16: DP groups are nodes 0–15 and 16–31, the pipeline pairs
    node n with n + 16: all under one 32-node leaf per rail. Oversubscribing the leaves 3:1
    (48 down, 16 up ports) touches only their up-links: the report says it cannot change the
    iteration, and the simulation agrees to the nanosecond."""
    base = _run(tmp_path, "base")
    over = _run(tmp_path, "over", "--set", "fabric.levels[0].oversubscription=3")
    (line,) = [a for a in over["assumptions"] if a.startswith("effect of --set")]
    assert line == (
        "effect of --set fabric.levels[0].oversubscription=3: changes the up-links of level-1 "
        "switches, which no traffic of this run crosses (TP inside a node, PP under one leaf "
        "switch, DP under one leaf switch): it cannot change the iteration time")
    assert over["iteration_time_s"] == base["iteration_time_s"]
    assert not any(a.startswith("effect of --set") for a in base["assumptions"])


def test_an_override_on_crossed_up_links_says_routes_can_move_either_way(tmp_path):
    """The AICB seed on dgx-a100-1024 (TP8 PP16 DP8): the pipeline and the embedding pair
    cross the leaves' up-links, which D-mod-K assigns by the destination's port modulo their
    count — the line names the groups and says the iteration can move either way."""
    out = tmp_path / "a.json"
    assert main(["--workload", "workloads/aicb-gpt-h16384-tp8-pp16-dp8-1024gpu.txt", "--topo",
                 "dgx-a100-1024", "--set", "fabric.levels[0].oversubscription=4", "--quiet",
                 "--json", str(out)]) == 0
    (line,) = [a for a in json.loads(out.read_text())["assumptions"]
               if a.startswith("effect of --set")]
    assert "which the traffic of PP, EMB crosses" in line
    assert "D-mod-K" in line and "either way" in line


def test_a_peak_override_names_the_roofline_share_it_can_move(tmp_path):
    """With the H100 kernel table, a datasheet peak only times the roofline's part: the line
    gives the report's own roofline share, and compute_time_sources sums to one."""
    rep = _run(tmp_path, "peak", "--set", "node.gpu.peak_tflops.bf16=2000")
    src = rep["compute_time_sources"]
    assert set(src) == {"kernel_table", "roofline"}
    assert abs(sum(src.values()) - 1.0) < 1e-12 and src["kernel_table"] > 0.5
    (line,) = [a for a in rep["assumptions"] if a.startswith("effect of --set")]
    assert f"roofline's share of compute ({src['roofline'] * 100:.1f}%)" in line


def test_the_compute_line_says_table_or_roofline_by_share(tmp_path, capsys):
    """The bottleneck line says what timed the compute, the larger source first; when the
    kernel table timed most of it, its line is the one the summary shows for compute."""
    rep = _run(tmp_path, "share")
    src = rep["compute_time_sources"]
    assert main(["--model", "llama3-8b", "--topo", "dgx-h100-scalable", "--nodes", "32",
                 "--tp", "8", "--pp", "2", "--global-batch", "32"]) == 0
    text = capsys.readouterr().out
    want = (f"(timed {src['kernel_table'] * 100:.1f}% by the measured kernel table, "
            f"{src['roofline'] * 100:.1f}% by the roofline)")
    assert want in text
    shown = text.split("assumptions that matter most")[1]
    assert "compute time per iteration summed over stages: " \
           f"{src['kernel_table'] * 100:.1f}% from the kernel table" in shown
    assert "compute model (H100): roofline per operator" not in shown


def test_a_roofline_only_run_leads_with_the_roofline(tmp_path):
    """``--kernel-table none``: all compute from the roofline, no table share."""
    rep = _run(tmp_path, "roof", "--kernel-table", "none")
    assert rep["compute_time_sources"] == {"kernel_table": 0.0, "roofline": 1.0}

"""--nccl-algo / --nccl-proto parse NCCL_ALGO / NCCL_PROTO as NCCL does and restrict auto."""

from __future__ import annotations

import pytest
from conftest import TOPOLOGIES

from sim.cli import main as simrun
from sim.comm import CollKind, GroupKind
from sim.errors import UsageError
from sim.network import build_network
from sim.network.base import CommRequest
from sim.network.nccl_env import parse_nccl_algo, parse_nccl_proto
from sim.topology import load_topology

AR, AG, RS, BC = (CollKind.ALLREDUCE, CollKind.ALLGATHER, CollKind.REDUCESCATTER,
                  CollKind.BROADCAST)


def test_nccl_list_syntax():
    # a list for every function; '^' enables all but the names; prefixes per function
    assert parse_nccl_algo("ring,tree")[AR] == {"ring", "tree"}
    assert parse_nccl_algo("^nvls")[AR] == {"ring", "tree", "nvlstree", "collnet"}
    got = parse_nccl_algo("Ring;allreduce:Tree,NVLS")
    assert (got[AR], got[AG], got[BC]) == ({"tree", "nvls"}, {"ring"}, {"ring"})
    got = parse_nccl_algo("allreduce:tree")
    assert got[AR] == {"tree"} and \
        got[AG] == {"ring", "tree", "nvls", "nvlstree", "collnet"}  # untouched
    assert parse_nccl_proto("^LL128;allreduce:LL128")[AR] == {"LL128"}
    assert parse_nccl_proto("^LL128;allreduce:LL128")[RS] == {"LL", "Simple"}
    assert parse_nccl_algo(None) is None and parse_nccl_proto(None) is None


@pytest.mark.parametrize("text, what", [
    ("bogus", "unknown name"), ("allreduce:ring;tree", "needs a function prefix"),
    ("gather:ring", "unknown function"), ("collnetchain,pat", "no algorithm the model has"),
    ("allreduce:^ring,tree,nvls,collnetdirect,collnetchain,nvlstree,pat", "no algorithm")])
def test_bad_lists_are_refused(text, what):
    with pytest.raises(UsageError, match=what):
        parse_nccl_algo(text)
    with pytest.raises(UsageError, match="no protocol"):
        parse_nccl_proto("^ll,ll128,simple")


def test_auto_chooses_only_what_is_enabled():
    topo = load_topology(str(TOPOLOGIES / "dgx-h100-1024.yaml"))
    req = CommRequest(AR, GroupKind.TP, tuple(range(8)), 1 << 30)
    assert build_network(topo).isolated(req).algorithm == "nvls/Simple"
    assert build_network(topo, nccl_algo="^nvls").isolated(req).algorithm.startswith("ring/")
    assert build_network(topo, nccl_algo="tree").isolated(req).algorithm.startswith("tree/")
    got = build_network(topo, nccl_algo="ring", nccl_proto="LL").isolated(req).algorithm
    assert got == "ring/LL"
    # nothing enabled applies (NVLS only, across two nodes): NCCL's "no algorithm" error
    req16 = CommRequest(AR, req.group, tuple(range(16)), 1 << 20)
    with pytest.raises(UsageError, match="no enabled algorithm"):
        build_network(topo, nccl_algo="nvls").isolated(req16)


def test_cli_flags_change_the_result_or_exit_2(capsys):
    topo = str(TOPOLOGIES / "dgx-h100-1024.yaml")
    assert simrun(["collective", "--topo", topo, "--sizes", "1G"]) == 0
    assert "nvls/Simple" in capsys.readouterr().out
    for flags in (["--nccl-nvls-enable", "0"], ["--nccl-algo", "^nvls"]):
        assert simrun(["collective", "--topo", topo, "--sizes", "1G", *flags]) == 0
        assert "nvls/Simple" not in capsys.readouterr().out
    assert simrun(["collective", "--topo", topo, "--sizes", "1G", "--nccl-algo", "pat"]) == 2
    assert "--nccl-algo" in capsys.readouterr().err
    # a switch that would change nothing on the topology: refused (no silent what-if)
    a100 = str(TOPOLOGIES / "dgx-a100-1024.yaml")
    for flag in ("--nccl-nvls-enable", "--nccl-collnet-enable"):
        assert simrun(["collective", "--topo", a100, "--sizes", "1G", flag, "1"]) == 2
        assert flag in capsys.readouterr().err

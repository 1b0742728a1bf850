"""AICB reader: both seed variants and the format's quirks."""

import pytest
from conftest import SEED_512, SEED_1024, SEED_OPTABLE

from sim.comm import CollKind, GroupKind
from sim.errors import InputError
from sim.workload.aicb import read_aicb
from sim.workload.registry import read_workload

ROW = "attn\t-1\t100\tALLREDUCE\t64\t50\tNONE\t0\t60\tNONE\t0\t100"


def aicb(header: str, rows: list[str], count: bool = True) -> str:
    return "\n".join([header] + ([str(len(rows))] if count else []) + rows) + "\n"


def test_seed_1024_header_and_rows():
    w = read_workload(SEED_1024)
    h = w.header
    assert (h.tp, h.pp, h.ep, h.ga, h.all_gpus, h.vpp, h.pp_comm_bytes) == (8, 16, 1, 16, 1024,
                                                                             None, None)
    assert len(w.layers) == h.declared_rows == 557
    gp = w.layers[1]
    assert gp.name == "grad_param_comm"
    c = gp.weight_grad.comm
    assert (c.kind, c.group, c.size_bytes, c.blocking) == (CollKind.REDUCESCATTER, GroupKind.DP,
                                                           12_802_064_384, False)
    assert c.size_bytes > 2**31
    # zero-size collectives are no-ops
    assert w.layers[4].name == "moe_grad_norm1" and w.layers[4].weight_grad.comm is None


def test_seed_512_header_with_vpp_and_pp_comm():
    w = read_workload(SEED_512)
    h = w.header
    assert (h.tp, h.pp, h.vpp, h.ga, h.all_gpus, h.pp_comm_bytes) == (8, 8, 8, 1, 512, 20971520)
    assert len(w.layers) == 172
    norm = w.layers[0]
    assert norm.forward.comm.kind is CollKind.BROADCAST and norm.forward.comm.group is GroupKind.TP


@pytest.mark.parametrize("header", [
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 2 ga: 1 all_gpus: 8",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD all_gpus: 8 ga: 1 pp: 2 model_parallel_NPU_group: 2",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD   model_parallel_NPU_group:2\tpp:2  all_gpus:8",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 pp: 2 all_gpus: 8 pp_comm 4096",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 pp: 2 all_gpus: 8 "
    "checkpoints: 2 3 7 checkpoint_initiates: 0",
])
def test_header_tokens_any_order_spacing_and_pp_comm_without_colon(header):
    w = read_aicb(aicb(header, [ROW]), "x.txt")
    assert (w.header.tp, w.header.pp, w.header.all_gpus) == (2, 2, 8)
    if "pp_comm" in header:
        assert w.header.pp_comm_bytes == 4096


def test_missing_fields_are_none():
    w = read_aicb(aicb("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 4", [ROW]), "x.txt")
    assert (w.header.tp, w.header.ga, w.header.all_gpus, w.header.pp) == (None, None, None, 4)


def test_spaces_instead_of_tabs_and_comm_suffixes():
    rows = ["moe -1 10 ALLTOALL_EP 1024 10 ALLTOALL_EP 1024 10 ALLREDUCE_DP_EP 2048 100",
            "big -1 10 ALLGATHER 3000000000 10 REDUCESCATTER 0 10 REDUCESCATTER 5 100"]
    w = read_aicb(aicb("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 1", rows), "x.txt")
    moe, big = w.layers
    assert (moe.forward.comm.group, moe.forward.comm.blocking) == (GroupKind.EP, True)
    assert (moe.weight_grad.comm.group, moe.weight_grad.comm.blocking) == (GroupKind.DP_EP, False)
    assert big.forward.comm.size_bytes == 3_000_000_000
    assert big.input_grad.comm is None  # size 0 -> no-op
    assert big.weight_grad.comm.group is GroupKind.DP


@pytest.mark.parametrize("text,where", [
    (aicb("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 2", [ROW.replace("100", "abc", 1)]),
     "x.txt:3: forward_compute_ns"),
    (aicb("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 2", [ROW.replace("ALLREDUCE", "ALLREDUCEX")]),
     "x.txt:3: forward_comm_type"),
    (aicb("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 2", [ROW + "\t7"]), "x.txt:3: row"),
    (aicb("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 2", [ROW.replace("64", "-64")]),
     "x.txt:3: forward_comm_bytes"),
    (aicb("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp:", [ROW]), "x.txt:1: pp"),
    (aicb("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 0", [ROW]), "x.txt:1: pp"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 2\n3\n" + ROW + "\n", "x.txt:2: row_count"),
    ("NOT_A_POLICY pp: 2\n1\n" + ROW + "\n", "x.txt:1: header"),
])
def test_bad_input_names_file_line_and_field(text, where):
    with pytest.raises(InputError) as e:
        read_aicb(text, "x.txt")
    assert str(e.value).startswith(where)
    assert "\n" not in str(e.value)


def test_registry_sniffs_and_format_can_be_forced(tmp_path):
    assert read_workload(SEED_OPTABLE).format == "optable"
    assert read_workload(SEED_1024).format == "aicb"
    with pytest.raises(InputError, match="expected a policy word|first token"):
        read_workload(SEED_OPTABLE, "aicb")
    junk = tmp_path / "junk.txt"
    junk.write_bytes(b"hello world\n")
    with pytest.raises(InputError, match="unrecognised workload format"):
        read_workload(junk)
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\x00\x01\x02")
    with pytest.raises(InputError, match="binary"):
        read_workload(binary)
    with pytest.raises(InputError, match="no such file"):
        read_workload(tmp_path / "missing.txt")

"""Kernel tables: the reader's errors (file, line, field; exit code 2), the writer round trip,
and the shipped H100 SXM table."""

import pytest

from sim.errors import InputError
from sim.kernels.table import KernelRow, KernelTable, read_table, shipped_table, write_table

HEADER = "# gpu: H100-SXM5-80GB\nkind,time_ms,m,k,n,tokens,h\n"


def _read(tmp_path, text):
    p = tmp_path / "t.csv"
    p.write_text(text, encoding="utf-8")
    return read_table(p)


def test_round_trip_through_the_writer(tmp_path):
    rows = [KernelRow("gemm_bf16", (("m", 512), ("k", 1024), ("n", 1024)), 0.00816),
            KernelRow("layernorm_fwd", (("tokens", 8192), ("h", 1024)), 0.02515),
            KernelRow("attn_flash_fwd", (("b", 8), ("s", 1024), ("hq", 16), ("hkv", 16),
                                         ("d", 64), ("causal", 1)), 0.10368),
            KernelRow("adamw_fused_fp32", (("params", 50_000_000),), 0.53864)]
    table = KernelTable("H100-SXM5-80GB", rows, meta={"date": "2026-11-22", "source": "x"})
    write_table(table, tmp_path / "out.csv")
    back = read_table(tmp_path / "out.csv")
    assert back.gpu == "H100-SXM5-80GB"
    assert back.meta["date"] == "2026-11-22"
    assert [(r.kind, r.shape, r.time_ms) for r in back.rows] == [
        (r.kind, r.shape, r.time_ms) for r in rows]


@pytest.mark.parametrize("text, line, field, words", [
    ("kind,time_ms\n", 1, "gpu", "missing '# gpu"),
    (HEADER.replace("tokens", "tokenz"), 2, "tokenz", "unknown column"),
    (HEADER + "gemm_bf16,0.1,512,1024\n", 3, None, "cells"),
    (HEADER + "gemm_bf17,0.1,512,1024,1024,,\n", 3, "kind", "unknown kind"),
    (HEADER + "gemm_bf16,0.1,512,,1024,,\n", 3, "k", "needed by kind gemm_bf16"),
    (HEADER + "gemm_bf16,0.1,512,-4,1024,,\n", 3, "k", "positive integer"),
    (HEADER + "gemm_bf16,0,512,1024,1024,,\n", 3, "time_ms", "number of milliseconds from"),
    (HEADER + "gemm_bf16,nan,512,1024,1024,,\n", 3, "time_ms", "number of milliseconds from"),
    (HEADER + "layernorm_fwd,0.1,,,,8192,x\n", 3, "h", "positive integer"),
    # issue 31: values no GPU can have, and numbers Python's int()/float() would take
    (HEADER + "gemm_bf16,1e-300,512,1024,1024,,\n", 3, "time_ms", "from 0.0001 to 100000"),
    (HEADER + "gemm_bf16,1e300,512,1024,1024,,\n", 3, "time_ms", "from 0.0001 to 100000"),
    (HEADER + "gemm_bf16,1_0,512,1024,1024,,\n", 3, "time_ms", "milliseconds"),
    (HEADER + "gemm_bf16,0.1,5_12,1024,1024,,\n", 3, "m", "positive integer"),
    (HEADER + "gemm_bf16,0.1,512,1024,1099511627777,,\n", 3, "n", "≤ 2^40"),
    # 2·8192³ FLOPs in 0.5 ms = 2199 TFLOP/s > H100's dense bf16 989.4 (the catalogue's peak)
    (HEADER + "gemm_bf16,0.5,8192,8192,8192,,\n", 3, "time_ms", "above the H100-SXM5-80GB"),
    (HEADER + "gemm_bf16,0.1,512,1024,1024,,\ngemm_bf16,0.2,512,1024,1024,,\n", 4, "kind",
     "same kind and shape as line 3"),
])
def test_reader_names_file_line_and_field(tmp_path, text, line, field, words):
    with pytest.raises(InputError) as e:
        _read(tmp_path, text)
    err = e.value
    assert err.exit_code == 2
    assert err.file.endswith("t.csv") and err.line == line and err.field == field
    assert words in str(err) and "\n" not in str(err)


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_table(tmp_path / "absent.csv")


def test_shipped_h100_table_cites_its_measurement():
    t = shipped_table("h100-sxm.csv")
    assert t.gpu == "H100-SXM5-80GB" and t.meta["date"].startswith("2026-11-22; 2026-11-28")
    assert "do_bench" in t.meta["source"] and "132 SMs" in t.meta["source"]
    assert "scripts/assemble_h100_table.py" in t.meta["source"]
    kinds = {r.kind for r in t.rows}
    assert {"gemm_bf16", "gemm_fp8", "attn_flash_fwd", "attn_cudnn_bwd", "layernorm_bwd",
            "adamw_fused_fp32", "gemm_fp8_fastacc", "gemm_fp8_acc32", "gemm_bf16_acc32",
            "gelu_bwd"} <= kinds
    # 2026-11-22: 184 measured rows minus the 3 memory-efficient attention shapes that failed
    # to run; 2026-11-28: three GEMM variants on the 40 GEMM shapes, the MHA twins of 3 GQA
    # shapes and 4 shapes without the causal mask for 4 attention kinds, GeLU backward on 5
    assert len(t.rows) == 181 + 3 * 40 + (3 + 4) * 4 + 5
    assert (t.meta["sustained_slowdown_bf16"], t.meta["sustained_slowdown_fp8"]) == (
        "1.046", "1.065")

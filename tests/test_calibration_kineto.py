"""PyTorch profiler traces → kernel table (sim/calibration/kineto.py): a trace made here in
Kineto's event layout round-trips through --kernel-table; the public HolisticTraceAnalysis
traces (tests/data/kineto/NOTICE) are read, every kernel accounted for in the match report;
a trace of another GPU is refused with file and line."""

import gzip
import json
from pathlib import Path

from sim.calibration.kineto import check_gpu, kernel_table, read_trace
from sim.cli import main
from sim.kernels.table import read_table

DATA = Path(__file__).parent / "data" / "kineto"
PUBLIC = [str(DATA / "sampled_rank-0.json.gz"), str(DATA / "sampled_rank-1.json.gz")]


def _trace(path, rank, gemm_us, gpu="NVIDIA A100-SXM4-80GB"):
    """One rank: an aten::linear in bf16 ([1, 1024, 1024] @ [1536, 1024]^T) launching two
    kernels of ``gemm_us`` / 2 each, a bf16 layer norm, an fp32 mm and an NCCL kernel."""
    ev, corr = [], 100

    def op(name, ts, dur, dims, types, kernels):
        nonlocal corr
        ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                   "dur": dur, "args": {"Input Dims": dims, "Input type": types}})
        for k, (kname, kdur) in enumerate(kernels):
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": ts + 1 + k, "dur": 1, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7,
                       "ts": ts + 10 + k * 100, "dur": kdur, "args": {"correlation": corr}})

    half = gemm_us / 2
    op("aten::linear", 0, 50, [[1, 1024, 1024], [1536, 1024], []],
       ["c10::BFloat16", "c10::BFloat16", ""],
       [("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", half), ("cutlass_80_splitk_gemm", half)])
    op("aten::native_layer_norm", 100, 20, [[1, 1024, 1024], [1024], [1024], [1024], []],
       ["c10::BFloat16", "", "c10::BFloat16", "c10::BFloat16", "Scalar"],
       [("void at::native::vectorized_layer_norm_kernel<c10::BFloat16>", 12.0)])
    op("aten::mm", 200, 20, [[64, 64], [64, 64]], ["float", "float"],
       [("ampere_sgemm_32x32_sliced1x4_tn", 5.0)])
    ev.append({"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_bfloat16",
               "pid": 0, "tid": 8, "ts": 300, "dur": 40.0, "args": {"correlation": 9999}})
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": gpu, "numSms": 108}],
           "distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": ev}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f, indent=1)
    return str(path)


def test_made_trace_round_trip(tmp_path, capsys):
    files = [_trace(tmp_path / "r0.json.gz", 0, 300.0), _trace(tmp_path / "r1.json.gz", 1, 340.0)]
    out = tmp_path / "table.csv"
    assert main(["calibrate", "--kineto", *files, "--kernel-table-out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "10 kernels, 2 table rows" in text  # 5 kernels per rank
    assert "gemm: 6 kernels, 4 in table rows; not rows: 2 fp32 GEMM" in text
    assert "nccl: 2 kernels, 0 in table rows" in text
    table = read_table(out)  # what --kernel-table reads
    assert table.gpu == "A100-SXM4-80GB"
    rows = {(r.kind, r.shape): r.time_ms for r in table.rows}
    # the two kernels of one call summed (300 and 340 µs), the median over the two ranks
    assert rows[("gemm_bf16", (("m", 1024), ("k", 1024), ("n", 1536)))] == 0.32
    assert rows[("layernorm_fwd", (("tokens", 1024), ("h", 1024)))] == 0.012
    rep = tmp_path / "run.json"
    assert main(["--model", "gpt2-medium", "--topo", "dgx-a100-512", "--nodes", "1", "--tp",
                 "2", "--global-batch", "8", "--kernel-table", str(out), "--json", str(rep),
                 "--quiet"]) == 0
    lines = [a for a in json.loads(rep.read_text())["assumptions"]
             if a.startswith("compute time per iteration")]
    assert lines and "0.0%) from the kernel table" not in lines[0]


def test_public_traces_every_kernel_accounted(tmp_path, capsys):
    traces = [read_trace(p) for p in PUBLIC]
    assert [t.rank for t in traces] == [0, 1] and traces[0].gpu is None
    table, rep = kernel_table(traces, check_gpu(traces, "A100-SXM4-80GB"))
    seen = sum(rep.kernels.values())
    n_kernels = sum(1 for t in traces for e in t.events if e.get("cat") == "kernel")
    assert seen == n_kernels == 2258
    accounted = sum(rep.written.values()) + sum(n for r in rep.fallback.values()
                                                for n in r.values())
    assert accounted == seen
    # a recommendation model trained in fp32 (TF32 cutlass GEMMs): no bf16 GEMM rows
    assert rep.fallback["gemm"]["fp32 GEMM (the table times bf16/fp16/fp8 GEMMs)"] == 692
    assert rep.kernels["nccl"] == 20 and table.rows == []
    out = tmp_path / "t.csv"
    assert main(["calibrate", "--kineto", *PUBLIC, "--gpu", "A100-SXM4-80GB",
                 "--kernel-table-out", str(out)]) == 0
    assert read_table(out).rows == []
    # without --gpu the traces cannot say which GPU they ran on
    capsys.readouterr()
    assert main(["calibrate", "--kineto", *PUBLIC, "--kernel-table-out", str(out)]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_trace_of_another_gpu_refused(tmp_path, capsys):
    a = _trace(tmp_path / "a.json.gz", 0, 100.0)
    b = _trace(tmp_path / "h.json.gz", 1, 100.0, gpu="NVIDIA H100 80GB HBM3")
    assert main(["calibrate", "--kineto", a, b, "--kernel-table-out",
                 str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip()
    line = next(i for i, s in enumerate(gzip.open(b, "rt").read().splitlines(), 1)
                if "H100" in s)
    assert len(err.splitlines()) == 1 and f"h.json.gz:{line}: deviceProperties.name:" in err
    (tmp_path / "bad.json").write_text('{"traceEvents": [\n{"ph": "X",, }]}')
    assert main(["calibrate", "--kineto", str(tmp_path / "bad.json"), "--gpu",
                 "A100-SXM4-80GB"]) == 2
    assert "bad.json:2:" in capsys.readouterr().err

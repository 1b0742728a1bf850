"""GEMM table kinds by pass, and the sustained-load factor on kernel-table times
(docs/kernel-tables.md, "GEMM kinds" and "Sustained load").

* Transformer Engine runs FP8 forward GEMMs with fast accumulation and dgrad / wgrad with the
  split accumulator (``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True``);
  Megatron's gradient-accumulation fusion adds weight gradients into fp32 main grads. Each
  GEMM takes its kind's row: asserted on a hand-made table whose rows differ per kind.
* A table's ``sustained_slowdown_<dtype>`` multiplies every time the table gives (never the
  roofline's); ``--sustained-slowdown F`` replaces it; an end-to-end run is linear in F.
"""

import json
import math

import pytest
from par_support import make_par

from sim.cli import main
from sim.errors import InputError, UsageError
from sim.kernels.lookup import TableLookup
from sim.kernels.table import KernelRow, KernelTable, parse_table, shipped_table, write_table
from sim.models.compute import H100, Timer, gemm_table_kind
from sim.models.compute_setup import ComputeOptions, resolve_compute
from sim.models.vocab.ops import FPROP, elementwise, gemm, wgrad
from sim.topology.gpu import GpuSpec

H100_SXM = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}, 80, 3350)
MKN = (("m", 1024), ("k", 2048), ("n", 4096))
# one row per kind at one shape, each time distinct: which row answered is read off the time
TIMES_MS = {"gemm_fp8": 0.010, "gemm_fp8_fastacc": 0.009, "gemm_fp8_acc32": 0.011,
            "gemm_bf16": 0.020, "gemm_bf16_acc32": 0.025}


def _table(kinds=tuple(TIMES_MS), meta=None) -> KernelTable:
    return KernelTable("H100-SXM5-80GB", [KernelRow(k, MKN, TIMES_MS[k]) for k in kinds],
                       meta=dict(meta or {}))


def _timer(table, **kw) -> Timer:
    return Timer(H100_SXM, H100, TableLookup(table, slots=132), **kw)


# ops at the table's one shape: forward/dgrad C[1024×4096] = A[1024×2048]·B; the weight
# gradient dW[2048×4096] = Xᵀ[2048×1024]·dY, whose table shape is (m, k, n) = (2048, 1024, 4096)
FWD = gemm("fc1", 1024, 2048, 4096, role=FPROP)
DGRAD = gemm("fc1_dgrad", 1024, 2048, 4096)
WGRAD = wgrad("fc1_wgrad", 2048, 1024, 4096)  # shape (1024, 2048, 4096)


def test_each_pass_picks_its_kind():
    assert WGRAD.shape == (1024, 2048, 4096)
    assert gemm_table_kind(FWD, "fp8", True) == "gemm_fp8_fastacc"
    assert gemm_table_kind(DGRAD, "fp8", True) == "gemm_fp8"
    assert gemm_table_kind(WGRAD, "fp8", True) == "gemm_fp8_acc32"
    assert gemm_table_kind(WGRAD, "fp8", False) == "gemm_fp8"  # bf16 main grads, ZeRO/FSDP
    assert gemm_table_kind(FWD, "bf16", True) == "gemm_bf16"  # no fast-accumulation mode
    assert gemm_table_kind(WGRAD, "bf16", True) == "gemm_bf16_acc32"
    assert gemm_table_kind(WGRAD, "fp16", False) == "gemm_fp16"


def test_the_timer_takes_each_gemm_from_its_kinds_row():
    t = _timer(_table())
    got = {op.name: t.op_ns(op, "fp8")[0] for op in (FWD, DGRAD, WGRAD)}
    assert got == {"fc1": 9000.0, "fc1_dgrad": 10000.0, "fc1_wgrad": 11000.0}
    assert t.op_ns(FWD, "bf16")[0] == 20000.0 and t.op_ns(WGRAD, "bf16")[0] == 25000.0
    # the bf16 output layer of an fp8 run (op dtype bf16): its weight gradient accumulates too
    assert t.op_ns(wgrad("logits_wgrad", 2048, 1024, 4096, dtype="bf16"), "fp8")[0] == 25000.0
    bf16_grads = _timer(_table(), main_grad_fp32=False)
    assert bf16_grads.op_ns(WGRAD, "fp8")[0] == 10000.0
    assert t.missing == set() and bf16_grads.missing == set()


def test_a_table_without_the_variants_times_them_by_the_dtypes_rows_and_says_so():
    t = _timer(_table(("gemm_fp8", "gemm_bf16")))
    assert [t.op_ns(op, "fp8")[0] for op in (FWD, DGRAD, WGRAD)] == [10000.0] * 3
    assert t.missing == {"gemm_fp8_fastacc", "gemm_fp8_acc32"}


def test_sustained_factor_multiplies_table_times_only():
    roof = elementwise("norm", 8 * 2**20)  # no kernel kind: the roofline times it
    base, slow = _timer(_table()), _timer(_table(), sustained=1.5)
    assert slow.op_ns(FWD, "fp8")[0] == pytest.approx(1.5 * base.op_ns(FWD, "fp8")[0])
    assert slow.op_ns(roof, "fp8") == base.op_ns(roof, "fp8")
    assert base.op_ns(roof, "fp8")[1] == "roofline"


def _setup(tmp_path, meta, **opts):
    path = tmp_path / "t.csv"
    write_table(_table(meta=meta), path)
    return resolve_compute(H100_SXM, ComputeOptions(kernel_table=str(path), **opts))


def test_the_tables_measured_factor_per_dtype_and_the_override(tmp_path):
    meta = {"sustained_slowdown_bf16": "1.2", "sustained_slowdown_fp8": "1.5"}
    s = _setup(tmp_path, meta)
    assert s.sustained("fp8")[0] == 1.5 and s.sustained("bf16")[0] == 1.2
    assert s.sustained("fp16")[0] == 1.2  # fp16 tensor cores: the 16-bit measurement
    assert "sustained_slowdown_fp8" in s.sustained("fp8")[1]
    over = _setup(tmp_path, meta, sustained_slowdown=1.0)
    assert over.sustained("fp8") == (1.0, "sustained load: kernel-table times × 1 "
                                          "(--sustained-slowdown)")
    none = _setup(tmp_path, {})
    assert none.sustained("fp8")[0] == 1.0 and "not modelled" in none.sustained("fp8")[1]


def test_the_factor_applies_only_on_the_gpu_it_was_measured_on(tmp_path):
    """A GPU's clock under its power limit is its own: the H100 table's factor is not carried
    to an A100 run given that table (``--kernel-table``), and the report says so; on the H100
    the report prints the uncertainty the table states."""
    meta = {"sustained_slowdown_fp8": "1.5", "sustained_slowdown_bf16": "1.2",
            "sustained_uncertainty_bf16": "one run, spread not measured"}
    path = tmp_path / "t.csv"
    write_table(_table(meta=meta), path)
    a100 = GpuSpec("A100-SXM4-80GB", {"bf16": 312.0, "fp16": 312.0}, 80, 2039)
    other = resolve_compute(a100, ComputeOptions(kernel_table=str(path)))
    factor, note = other.sustained("bf16")
    assert factor == 1.0
    assert note.startswith("sustained load: not applied (the table's sustained_slowdown_bf16 "
                           "1.2 was measured on H100-SXM5-80GB, this run's GPU is "
                           "A100-SXM4-80GB")
    own = resolve_compute(H100_SXM, ComputeOptions(kernel_table=str(path)))
    assert own.sustained("bf16")[0] == 1.2
    assert "; uncertainty: one run, spread not measured;" in own.sustained("bf16")[1]
    assert "uncertainty" not in own.sustained("fp8")[1]  # none stated for fp8 here
    shipped = shipped_table("h100-sxm.csv").meta  # the shipped table states both
    assert "not measured" in shipped["sustained_uncertainty_bf16"]
    assert "1.129" in shipped["sustained_uncertainty_fp8"]


def test_refused_without_a_kernel_table():
    with pytest.raises(UsageError) as e:
        resolve_compute(H100_SXM, ComputeOptions(kernel_table="none", sustained_slowdown=1.1))
    assert e.value.field == "sustained_slowdown"


@pytest.mark.parametrize("line, why", [("# sustained_slowdown_fp8: 0.9", "from 1 to 3"),
                                       ("# sustained_slowdown_fp8: fast", "from 1 to 3"),
                                       ("# sustained_slowdown_fp4: 1.1", "unknown header key")])
def test_bad_factor_in_a_table_names_file_line_and_key(line, why):
    text = f"# gpu: X\n{line}\nkind,time_ms,m,k,n\ngemm_bf16,0.01,1,1,1\n"
    with pytest.raises(InputError) as e:
        parse_table(text, "t.csv")
    msg = str(e.value)
    assert "t.csv" in msg and ":2" in msg and line.split()[1][:-1] in msg and why in msg


def test_the_shipped_h100_factors_are_the_measured_layer_loops():
    """docs/measured/h100-2026-11-28: last-quarter ÷ first-10 median iteration of the layer
    loops (bf16: Llama 3 8B 23.24 / 22.12 and GPT-3 175B TP 8 20.19 / 19.37, mean; fp8: the
    emulated Llama 3 8B layer 14.83 / 13.93)."""
    meta = shipped_table("h100-sxm.csv").meta
    bf16 = (23.239456176757812 / 22.11732769012451 + 20.18772792816162 / 19.372655868530273) / 2
    assert float(meta["sustained_slowdown_bf16"]) == pytest.approx(bf16, abs=5e-4)
    assert float(meta["sustained_slowdown_fp8"]) == pytest.approx(
        14.832223892211914 / 13.931007862091064, abs=5e-4)


def _iteration_s(tmp_path, factor: str) -> float:
    out = tmp_path / f"r{factor}.json"
    assert main(["--model", "gpt2-medium", "--topo", "dgx-h100-1024", "--gpus", "1", "--tp", "1",
                 "--global-batch", "2", "--dtype", "fp8", "--sustained-slowdown", factor,
                 "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert any(a.startswith(f"sustained load: kernel-table times × {factor}")
               for a in report["assumptions"])
    return report["iteration_time_s"]


def test_one_gpu_iteration_is_linear_in_the_factor(tmp_path):
    """One GPU, no communication: the iteration is table time × F + roofline time, so the
    run at F = 1.5 lies halfway between those at 1 and 2 (to the ns rounding of its ops)."""
    t1, t15, t2 = (_iteration_s(tmp_path, f) for f in ("1", "1.5", "2"))
    assert t2 > t15 > t1
    assert math.isclose(t15, (t1 + t2) / 2, rel_tol=1e-6)


def test_the_layer_generator_marks_each_weight_gemm_with_its_pass():
    """Llama 3 8B, fp8, full recompute: the four linears' forward GEMMs (and their recomputed
    copies in the backward) are forward passes, their weight gradients wgrad, dgrad unmarked."""
    from conftest import WORKLOADS

    from sim.models import load_model
    from sim.models.layers import transformer_layer_rows
    from sim.models.vocab.dims import Dims

    model = load_model(WORKLOADS / "models" / "llama3-8b.yaml")
    par = make_par(dtype="fp8", recompute="full")
    rows = transformer_layer_rows(model, par, Dims.of(model, par), 0)
    gemms = [op for r in rows for op in (*r.fwd, *r.ig, *r.wg) if op.kernel == "gemm"]
    by_role = {}
    for op in gemms:
        by_role.setdefault(op.role, []).append(op.name)
    assert sorted(by_role["fprop"]) == sorted(
        ["qkv", "proj", "fc1", "fc2", "recompute_qkv", "recompute_proj", "recompute_fc1",
         "recompute_fc2"])
    assert sorted(by_role["wgrad"]) == ["fc1_wgrad", "fc2_wgrad", "proj_wgrad", "qkv_wgrad"]
    assert sorted(by_role[""]) == ["fc1_dgrad", "fc2_dgrad", "proj_dgrad", "qkv_dgrad"]


def test_the_report_names_a_missing_variant(tmp_path):
    """The shipped H100 table without its fast-accumulation rows: an FP8 run says that its
    forward GEMMs were timed by the split-accumulator rows; with the whole table it says
    nothing of the kind."""
    table = shipped_table("h100-sxm.csv")
    path = tmp_path / "no-fastacc.csv"
    write_table(KernelTable(table.gpu, [r for r in table.rows if r.kind != "gemm_fp8_fastacc"],
                            meta=table.meta), path)
    notes = {}
    for name, extra in (("whole", []), ("cut", ["--kernel-table", str(path)])):
        out = tmp_path / f"{name}.json"
        assert main(["--model", "gpt2-medium", "--topo", "dgx-h100-1024", "--gpus", "1",
                     "--tp", "1", "--global-batch", "2", "--dtype", "fp8", "--json", str(out),
                     "--quiet", *extra]) == 0
        notes[name] = [a for a in json.loads(out.read_text())["assumptions"]
                       if "rows: those GEMMs are timed by" in a]
    assert notes["whole"] == []
    assert notes["cut"] == ["the kernel table has no gemm_fp8_fastacc rows: those GEMMs are "
                            "timed by its gemm_fp8 rows (FP8 forward GEMMs at the "
                            "split-accumulator rate, where Transformer Engine runs them with "
                            "fast accumulation)"]

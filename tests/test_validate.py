"""``simrun validate``: the measured iterations of docs/calibration.md section B, shipped as data,
predicted end to end; the error table and its accuracy bound."""

from __future__ import annotations

import json
import re

import pytest
from conftest import WORKLOADS

from sim.cli import main
from sim.errors import InputError
from sim.models.vocab.spec import load_model
from sim.validation.cases import load_cases

CASES = WORKLOADS / "validation" / "korthikanti2022-selene.yaml"
# docs/calibration.md section B, s/iteration: (full recompute, sequence parallel + selective
# recompute)
MEASURED = {"22B": (1.42, 1.10), "175B": (18.13, 13.75), "530B": (49.05, 37.83),
            "1T": (94.42, 71.49)}
# Accuracy bound. Today the mean absolute error is 6.6% (all cases under-predicted, max 9.6%;
# docs/validation.md traces most of it to the network model's bus bandwidth at the 25-100 MB TP
# messages). 10% is the level at which the layout comparisons of a sweep stay meaningful (the
# layouts of one sweep typically differ by 5-20%); it leaves 3.4 points for the network model
# still being refined and fails on any change that degrades the model by more than that.
MEAN_ABS_ERROR_BOUND_PCT = 10.0
CASE_ERROR_BOUND_PCT = 15.0


def test_shipped_cases_are_the_published_measurements():
    source, cases = load_cases(CASES)
    assert "Korthikanti" in source and len(cases) == 8
    for c in cases:
        size = c.name.split()[0]
        full, sel = MEASURED[size]
        if c.recompute == "full":
            assert c.measured_s == full and not c.sequence_parallel
        else:
            assert c.recompute == "selective" and c.sequence_parallel and c.measured_s == sel
        assert c.tp == 8 and c.dp == 1 and c.micro_batch == (4 if size == "22B" else 1)
        # the release's default (Megatron-LM 739cb43dae, 2022-05): asynchronous TP backward
        assert c.async_tensor_model_parallel_allreduce and c.role == "calibration"
        assert c.vpp == (3 if size in ("175B", "530B") else 1)
        assert c.global_batch == {"22B": 4, "175B": 64, "530B": 280, "1T": 512}[size]
        assert c.global_batch == c.tp * c.pp if size != "22B" else c.pp == 1


@pytest.mark.slow
def test_simrun_validate_prints_the_error_table(tmp_path, capsys):
    out = tmp_path / "v.json"
    assert main(["validate", str(CASES), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    head = next(i for i, x in enumerate(lines) if x.split()[:1] == ["case"])
    assert lines[head].split() == ["case", "GPU", "GPUs", "layout", "measured_s", "predicted_s",
                                   "error_%", "MFU_meas_%", "MFU_pred_%"]
    data = json.loads(out.read_text())
    assert len(data["cases"]) == 8
    # all eight calibrate (the 22B cases: the compute model was checked on the 22B layer times;
    # the others: their errors shaped the NCCL per-size model and the blocking-TP default,
    # docs/validation.md); the group is printed under its title with its own statistics
    assert {c["role"] for c in data["cases"]} == {"calibration"}
    assert not any("evaluation cases" in x for x in lines)
    cal = lines.index(next(x for x in lines if "calibration cases" in x))
    printed = lines[cal + 1: cal + 9]
    ordered = data["cases"]
    for line, case in zip(printed, ordered, strict=True):
        assert line.strip().startswith(case["name"])
        err = float(re.search(r"([+-]\d+\.\d)\s+(\S+)\s+(\S+)$", line).group(1))
        assert err == pytest.approx(case["error_pct"], abs=0.051)
        # the error is what it says: predicted vs measured
        assert case["error_pct"] == pytest.approx(
            (case["predicted_s"] - case["measured_s"]) / case["measured_s"] * 100)
        assert case["memory_feasible"]  # every measured run fits in the memory model
        # MFU_meas: simrun's model FLOPs over the measured time, which is the paper's MFU where
        # it gives one (same FLOP formula; tests/test_models_flops.py)
        assert case["mfu_at_measured_s"] == pytest.approx(
            case["predicted_mfu"] * case["predicted_s"] / case["measured_s"])
        if case["measured_mfu"]:
            assert case["mfu_at_measured_s"] == pytest.approx(case["measured_mfu"], abs=0.006)
        assert abs(case["error_pct"]) < CASE_ERROR_BOUND_PCT, case["name"]
    for role, n in (("calibration", 8),):
        errs = [abs(c["error_pct"]) for c in ordered if c["role"] == role]
        assert data["summary"][role]["cases"] == n
        assert data["summary"][role]["mean_abs_error_pct"] == pytest.approx(sum(errs) / n)
        assert data["summary"][role]["max_abs_error_pct"] == pytest.approx(max(errs))
        assert (f"{role}: mean absolute error {sum(errs) / n:.1f}% over {n} cases" in text)
    mean_abs = sum(abs(c["error_pct"]) for c in data["cases"]) / 8
    assert data["summary"]["all"]["mean_abs_error_pct"] == pytest.approx(mean_abs)
    assert data["summary"]["all"]["cases"] == len(data["cases"]) == 8  # count and rows apart
    assert f"all: mean absolute error {mean_abs:.1f}% over 8 cases" in text
    assert mean_abs < MEAN_ABS_ERROR_BOUND_PCT
    # the model reproduces the measured ordering: selective + SP beats full recompute
    by = {c["name"]: c for c in data["cases"]}
    for size in MEASURED:
        assert by[f"{size} SP + selective"]["predicted_s"] < by[f"{size} full recompute"][
            "predicted_s"]


def test_bad_validation_files_name_file_line_and_key(tmp_path):
    bad = tmp_path / "v.yaml"
    bad.write_text("topology: x.yaml\ncases:\n  - {name: a, model: m.yaml, tp: 8, pp: 1,\n"
                   "     global_batch: 4, micro_batch: 4, measured_s: 1.0, tpp: 3}\n")
    with pytest.raises(InputError) as e:
        load_cases(bad)
    assert str(e.value).startswith(f"{bad}:4: cases[0].tpp: unknown key (allowed: name, model, "
                                   "role, calibrates, source, url, published, not_modelled, "
                                   "measured_s, measured_tokens_per_s_per_gpu, "
                                   "measured_tflops_per_gpu, measured_mfu, nccl_nvls_enable, "
                                   "host_dispatch_us, tp, ")
    bad.write_text("topology: x.yaml\ncases:\n  - {name: a, model: m.yaml, tp: 8, pp: 1,\n"
                   "     global_batch: 4, micro_batch: 4, measured_s: -1}\n")
    with pytest.raises(InputError, match=r"v.yaml:4: cases\[0\].measured_s: expected a number "
                                         r"in \(0, 1e\+06\], got -1"):
        load_cases(bad)
    for extra, needle in [
        ("role: tuning", r"cases\[0\].role: expected one of calibration, evaluation"),
        ("measured_tokens_per_s_per_gpu: 10", r"cases\[0\]: give exactly one of measured_s or "
                                              "measured_tokens_per_s_per_gpu"),
        ("not_modelled: [1]", r"cases\[0\].not_modelled: expected a list of strings"),
        ("nccl_nvls_enable: 2", r"cases\[0\].nccl_nvls_enable: expected 0 or 1, got 2"),
        ("nccl_nvls_enable: true", r"cases\[0\].nccl_nvls_enable: expected 0 or 1, got True"),
        ("host_dispatch_us: 0", r"cases\[0\].host_dispatch_us: expected a number in \(0, 1000\]"),
        ("host_dispatch_us: 1001", r"cases\[0\].host_dispatch_us: expected a number in "
                                   r"\(0, 1000\], got 1001"),
    ]:
        bad.write_text("topology: x.yaml\ncases:\n  - {name: a, model: m.yaml, tp: 8, pp: 1,\n"
                       f"     global_batch: 4, micro_batch: 4, measured_s: 1.0, {extra}}}\n")
        with pytest.raises(InputError, match=rf"v.yaml:\d: {needle}"):
            load_cases(bad)


def test_measured_throughput_becomes_the_iteration_time(tmp_path):
    """A published tokens/s/GPU is turned into seconds per iteration by the identity
    ``global_batch · seq_len / (tokens/s/GPU · GPUs)``: GBS 256 of 4096-token sequences on
    TP2 PP2 DP2 (8 GPUs) at 1000 tokens/s/GPU is 256·4096/8000 = 131.072 s."""
    (tmp_path / "m.yaml").write_text(
        "name: m\nlayers: 4\nhidden: 256\nheads: 4\nvocab: 1000\nseq_len: 4096\n")
    v = tmp_path / "v.yaml"
    v.write_text("topology: t.yaml\ncases:\n  - {name: a, model: m.yaml, tp: 2, pp: 2, dp: 2,\n"
                 "     global_batch: 256, micro_batch: 1, measured_tokens_per_s_per_gpu: 1000,\n"
                 "     role: calibration, calibrates: nothing, not_modelled: [tp_comm_overlap],\n"
                 "     attention_backend: fused, overlap_param_gather: true,\n"
                 "     distributed_optimizer: true, dtype: fp8, cp: 1}\n")
    _, (case,) = load_cases(v)
    assert case.measured_s == 131.072
    assert (case.role, case.not_modelled) == ("calibration", ("tp_comm_overlap",))
    assert (case.par.backend, case.par.overlap_param_gather, case.par.dtype) == (
        "fused", True, "fp8")


def test_measured_teraflops_become_the_iteration_time_by_the_sc21_flop_count(tmp_path):
    """A teraFLOP/s per GPU published by Narayanan et al. (SC'21, Eq. 3) is turned back into
    seconds per iteration with the paper's own count F = 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)).
    By hand: B 8, s 1024, l 2, h 1024, V 2048 gives 96·8·1024·2·1024² = 1572864·2^20 =
    1,649,267,441,664 = 48·2^35 times (1 + 1/6 + 1/16) = 59/48, so F = 59·2^35 =
    2,027,224,563,712 FLOPs; at 100 teraFLOP/s on each of 8 GPUs one iteration takes
    F / 8e14 = 2.53403070464 ms."""
    (tmp_path / "m.yaml").write_text(
        "name: m\nlayers: 2\nhidden: 1024\nheads: 8\nvocab: 2048\nseq_len: 1024\n")
    v = tmp_path / "v.yaml"
    v.write_text("topology: t.yaml\ncases:\n  - {name: a, model: m.yaml, tp: 2, pp: 2, dp: 2,\n"
                 "     global_batch: 8, micro_batch: 1, measured_tflops_per_gpu: 100}\n")
    _, (case,) = load_cases(v)
    assert case.measured_s == pytest.approx(59 * 2**35 / 8e14, rel=1e-12)
    assert case.measured_s == pytest.approx(2.53403070464e-3, rel=1e-12)


def _sc21_seconds(text: str, c) -> float:
    """Seconds per iteration from a Table 1 row's quoted teraFLOP/s, GPUs and batch, with the
    paper's Eq. 3 written out here (not the reader's function)."""
    tf = int(re.search(r"(\d+) teraFLOP/s per GPU", text).group(1))
    gpus = int(re.search(r"(\d+) GPUs", text).group(1))
    b = int(re.search(r"batch size (\d+)", text).group(1))
    m = load_model(c.model_path)
    s, layers, h, v = m.seq_len, m.layers, m.hidden, m.vocab
    flops = 96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    return flops / (tf * 1e12 * gpus)


def _check_step_time_row(text: str, c) -> None:
    """An LLM Benchmarking Collection row: GPUs, GBS, MBS, TP/PP/CP/VP and the step time as
    quoted, and the table's tokens per second the same step time (GBS · seq / step)."""
    gpus = int(re.search(r"(\d+)x H100 GPUs", text).group(1))
    gbs = int(re.search(r"GBS (\d+)", text).group(1))
    seq = int(re.search(r"seq (\d+)", text).group(1))
    step = float(re.search(r"step time ([\d.]+) seconds per step", text).group(1))
    tok = int(re.search(r"\((\d+) tokens per second\)", text).group(1))
    assert (gpus, gbs, step) == (c.par.world_size, c.global_batch, c.measured_s), c.name
    assert f"MBS {c.micro_batch}," in text, c.name
    layout = re.search(r"TP(\d+) PP(\d+) CP(\d+) VP(\d+)", text).groups()
    assert tuple(map(int, layout)) == (c.tp, c.pp, c.cp, c.vpp), c.name
    assert tok == round(gbs * seq / step), c.name


def _check_sc21_row(text: str, c) -> None:
    """A Table 1 case: GPUs, batch, hidden, layers and model-parallel size as the README image
    quotes them, TP/PP/MBS as the authors' run_table_1.sh sets them."""
    assert f"{c.par.world_size} GPUs" in text and f"batch size {c.global_batch}," in text
    mp = int(re.search(r"model-parallel size (\d+)", text).group(1))
    assert mp == c.tp * c.pp, c.name
    assert f"TP {c.tp}, PP {c.pp}, MBS {c.micro_batch}, GBS {c.global_batch}" in text
    m = load_model(c.model_path)
    assert f"hidden size {m.hidden}, {m.layers} layers" in text, c.name
    assert c.measured_s == pytest.approx(_sc21_seconds(text, c), rel=1e-12), c.name
    lpv = re.search(r"virtual-pipeline-stage (\d+)", text)
    assert c.vpp == (m.layers // c.pp // int(lpv.group(1)) if lpv else 1), c.name
    assert c.overlap_grad_reduce == ("--DDP-impl torch" in text), c.name


def test_every_shipped_case_matches_the_published_numbers_it_cites():
    """Each case's layout, batch and measurement are the ones its ``published`` text quotes
    from the source (the NeMo table rows: GPUs, GBS, MBS, TP/PP/CP/VP, EP, GA, tokens/s/GPU;
    MT-NLG:
    servers, global batch, s/iteration), and every case names its source and role."""
    files = sorted((WORKLOADS / "validation").glob("*.yaml"))
    assert len(files) >= 3
    n = 0
    for f in files:
        _, cases = load_cases(f)
        for c in cases:
            n += 1
            assert c.role in ("calibration", "evaluation") and c.source and c.url, c.name
            assert c.calibrates if c.role == "calibration" else not c.calibrates, c.name
            text = c.published
            if "tokens/s/GPU" in text:
                tok = int(re.search(r"(\d+) tokens/s/GPU", text).group(1))
                gpus = int(re.search(r"(\d+) GPUs", text).group(1))
                gbs = int(re.search(r"GBS (\d+)", text).group(1))
                seq = int(re.search(r"seq (\d+)", text).group(1))
                assert (gpus, gbs) == (c.par.world_size, c.global_batch), c.name
                assert c.measured_s == pytest.approx(gbs * seq / (tok * gpus)), c.name
                if "MBS" in text:
                    assert f"MBS {c.micro_batch}," in text, c.name
                layout = re.search(r"TP(\d+) PP(\d+) CP(\d+) VP(\d+)", text)
                if layout:
                    assert tuple(map(int, layout.groups())) == (c.tp, c.pp, c.cp, c.vpp)
                ep = re.search(r"EP (\d+)", text)
                if ep:  # the Megatron-Bridge tables' expert-parallel column
                    assert int(ep.group(1)) == c.ep, c.name
                ga = re.search(r"GA (\d+)", text)
                if ga:  # gradient accumulation = GBS / (MBS · DP): the microbatch count
                    assert int(ga.group(1)) == c.par.microbatches == gbs // (
                        c.micro_batch * c.dp), c.name
                local = re.search(r"batch size (\d+) \(GBS", text)
                if local:  # torchtitan: one microbatch of the local batch per iteration
                    assert int(local.group(1)) == c.micro_batch == gbs // gpus, c.name
            elif "teraFLOP/s per GPU" in text:  # Narayanan et al. SC'21 Table 1
                _check_sc21_row(text, c)
            elif "seconds per step" in text:  # NVIDIA LLM Benchmarking Collection READMEs
                _check_step_time_row(text, c)
            elif "servers" in text:
                servers = int(re.search(r"(\d+) DGX A100 servers", text).group(1))
                assert servers * 8 == c.par.world_size
                assert f"{c.measured_s} s per iteration" in text
                assert f"global batch {c.global_batch}" in text
    assert n >= 20


def test_a_layout_megatron_refuses_is_named_at_load_time(tmp_path):
    """A case Megatron would refuse (here: 4 layers on PP 3) fails when the file is read, with
    the file, the case's line and the flag, not in the middle of a run."""
    (tmp_path / "m.yaml").write_text(
        "name: m\nlayers: 4\nhidden: 256\nheads: 4\nvocab: 1000\nseq_len: 128\n")
    v = tmp_path / "v.yaml"
    v.write_text("topology: t.yaml\ncases:\n  - {name: a, model: m.yaml, tp: 1, pp: 3,\n"
                 "     global_batch: 6, micro_batch: 1, measured_s: 1.0}\n")
    with pytest.raises(InputError, match=r"v.yaml:3: cases\[0\]: .*\(pp\)"):
        load_cases(v)


def test_a_measured_run_the_memory_model_cannot_fit_is_reported(tmp_path, capsys):
    """A case whose layout needs more memory than the GPU has is still predicted, and the
    report names it with its predicted memory (a finding about the memory model, not hidden):
    two layers of hidden 4096 at micro batch 128 of 4096 tokens keep far more than 80 GB of
    activations on one H100."""
    (tmp_path / "m.yaml").write_text(
        "name: m\nlayers: 2\nhidden: 4096\nheads: 32\nvocab: 1000\nseq_len: 4096\n")
    topo = WORKLOADS.parent / "topologies" / "dgx-h100-1024.yaml"
    v = tmp_path / "v.yaml"
    v.write_text(f"topology: {topo}\ncases:\n  - {{name: big, model: m.yaml, tp: 1, pp: 1,\n"
                 "     global_batch: 128, micro_batch: 128, measured_s: 1.0, source: s}\n")
    out = tmp_path / "v.json"
    assert main(["validate", str(v), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["cases"]
    assert not row["memory_feasible"] and row["memory_per_gpu_bytes"] > 80e9
    text = capsys.readouterr().out
    assert (f"measured runs that do not fit simrun's memory model (predicted anyway): big "
            f"({row['memory_per_gpu_bytes'] / 1e9:.1f} GB)") in text


def test_a_case_is_predicted_as_the_single_run_with_its_nccl_environment(tmp_path):
    """A case runs the single run's stages (sim.scenario.steps) with the
    run's NCCL_NVLS_ENABLE: TP 8 without sequence parallelism all-reduces every layer's
    activations on the NVSwitch, so NVLS on and off predict different times, each the
    iteration time of ``simrun --model ... --nccl-nvls-enable X`` on the same node."""
    (tmp_path / "m.yaml").write_text(
        "name: m\nlayers: 2\nhidden: 4096\nheads: 32\nvocab: 1024\nseq_len: 2048\n")
    topo = WORKLOADS.parent / "topologies" / "dgx-h100-1024.yaml"
    v = tmp_path / "v.yaml"
    v.write_text(f"topology: {topo}\ncases:\n"
                 "  - {name: nvls-on, model: m.yaml, tp: 8, pp: 1, global_batch: 2,\n"
                 "     micro_batch: 1, measured_s: 1.0, dtype: bf16, nccl_nvls_enable: 1}\n"
                 "  - {name: nvls-off, model: m.yaml, tp: 8, pp: 1, global_batch: 2,\n"
                 "     micro_batch: 1, measured_s: 1.0, dtype: bf16, nccl_nvls_enable: 0}\n")
    _, cases = load_cases(v)
    assert [c.nvls_enable for c in cases] == [True, False]
    out = tmp_path / "v.json"
    assert main(["validate", str(v), "--json", str(out), "--workers", "1"]) == 0
    got = {r["name"]: r["predicted_s"] for r in json.loads(out.read_text())["cases"]}
    single = {}
    for name, flag in (("nvls-on", "1"), ("nvls-off", "0")):
        rep = tmp_path / f"{name}.json"
        assert main(["--model", str(tmp_path / "m.yaml"), "--topo", str(topo), "--nodes", "1",
                     "--tp", "8", "--global-batch", "2", "--micro-batch", "1",
                     "--nccl-nvls-enable", flag, "--json", str(rep), "--quiet"]) == 0
        single[name] = json.loads(rep.read_text())["iteration_time_s"]
    assert got == single and got["nvls-on"] != got["nvls-off"]


def test_a_case_runs_with_its_stacks_host_dispatch_time(tmp_path):
    """``host_dispatch_us`` is the run's stack's CPU time to issue one kernel: the case is
    predicted as ``simrun --model ... --host-dispatch-us X``. A small model's kernels take a few
    µs, so at 200 µs per launch the host sets the pace and the time differs from the case
    without it (absent: 0, off)."""
    (tmp_path / "m.yaml").write_text(
        "name: m\nlayers: 2\nhidden: 512\nheads: 8\nvocab: 1024\nseq_len: 256\n")
    topo = WORKLOADS.parent / "topologies" / "dgx-h100-1024.yaml"
    v = tmp_path / "v.yaml"
    v.write_text(f"topology: {topo}\ncases:\n"
                 "  - {name: host, model: m.yaml, tp: 1, pp: 1, global_batch: 2,\n"
                 "     micro_batch: 1, measured_s: 1.0, dtype: bf16, host_dispatch_us: 200}\n"
                 "  - {name: zero, model: m.yaml, tp: 1, pp: 1, global_batch: 2,\n"
                 "     micro_batch: 1, measured_s: 1.0, dtype: bf16}\n")
    _, cases = load_cases(v)
    assert [c.host_dispatch_ns for c in cases] == [200_000, 0]
    out = tmp_path / "v.json"
    assert main(["validate", str(v), "--json", str(out), "--workers", "1"]) == 0
    rows = json.loads(out.read_text())["cases"]
    assert [r["host_dispatch_us"] for r in rows] == [200.0, 0.0]  # the JSON row says it
    got = {r["name"]: r["predicted_s"] for r in rows}
    single = {}
    for name, us in (("host", "200"), ("zero", "0")):
        rep = tmp_path / f"{name}.json"
        assert main(["--model", str(tmp_path / "m.yaml"), "--topo", str(topo), "--nodes", "1",
                     "--dp", "1", "--global-batch", "2", "--micro-batch", "1",
                     "--host-dispatch-us", us,
                     "--json", str(rep), "--quiet"]) == 0
        single[name] = json.loads(rep.read_text())["iteration_time_s"]
    assert got == single and got["host"] > got["zero"]


def test_evaluation_errors_are_also_given_per_source():
    """Each source's evaluation cases get their own statistics (a source with many weak-scaling
    rows would otherwise dominate the mean), calibration cases stay out, file order is kept."""
    from sim.cli.validate import table
    from sim.validation.summary import summary
    rows = [{"name": n, "role": role, "source": src, "error_pct": e, "gpu": "H100-SXM5-80GB",
             "gpus": 8, "layout": "TP1", "measured_s": 2.0, "predicted_s": 2.0,
             "mfu_at_measured_s": 0.4, "predicted_mfu": 0.4}
            for n, role, src, e in (("a", "evaluation", "B", -10.0), ("b", "calibration", "A", 1.0),
                                    ("c", "evaluation", "A", 4.0), ("d", "evaluation", "B", 2.0))]
    by = summary(rows)["evaluation_by_source"]
    assert list(by) == ["B", "A"]
    assert by["B"] == {"cases": 2, "mean_abs_error_pct": 6.0, "mean_error_pct": -4.0,
                       "max_abs_error_pct": 10.0}
    assert by["A"] == {"cases": 1, "mean_abs_error_pct": 4.0, "mean_error_pct": 4.0,
                       "max_abs_error_pct": 4.0}
    text = table(rows, summary(rows))
    at = text.index("evaluation cases by source:")
    assert text[at + 1:] == [
        "  B: mean absolute error 6.0% over 2 cases (mean signed error -4.0%, max 10.0%)",
        "  A: mean absolute error 4.0% over 1 case (mean signed error +4.0%, max 4.0%)",
        # and by GPU family (the catalogue's; here the name's first part), each role apart
        "calibration cases by GPU family:",
        "  H100: mean absolute error 1.0% over 1 case (mean signed error +1.0%, max 1.0%)",
        "evaluation cases by GPU family:",
        "  H100: mean absolute error 5.3% over 3 cases (mean signed error -1.3%, max 10.0%)"]
    assert summary(rows)["calibration_by_source"] == {"A": {
        "cases": 1, "mean_abs_error_pct": 1.0, "mean_error_pct": 1.0, "max_abs_error_pct": 1.0}}
    assert summary(rows)["evaluation_by_gpu_family"]["H100"]["mean_abs_error_pct"] == (
        pytest.approx(16 / 3))


def test_summary_by_gpu_within_a_family():
    """GB200 and GB300 are GPUs of the B200 family: the table gives each GPU its own line
    (hand-computed means), and no per-GPU block where every family is one GPU (above)."""
    from sim.cli.validate import table
    from sim.validation.summary import summary
    rows = [{"name": n, "role": "evaluation", "source": "S", "gpu": gpu, "gpu_family": "B200",
             "error_pct": e, "model": "m", "gpus": 8, "layout": "TP1", "measured_s": 1.0,
             "predicted_s": 1.0 + e / 100, "mfu_at_measured_s": 0.4, "predicted_mfu": 0.4}
            for n, gpu, e in (("a", "GB200", -10.0), ("b", "GB300", 20.0), ("c", "GB200", 4.0))]
    s = summary(rows)
    assert s["evaluation_by_gpu"] == {
        "GB200": {"cases": 2, "mean_abs_error_pct": 7.0, "mean_error_pct": -3.0,
                  "max_abs_error_pct": 10.0},
        "GB300": {"cases": 1, "mean_abs_error_pct": 20.0, "mean_error_pct": 20.0,
                  "max_abs_error_pct": 20.0}}
    text = table(rows, s)
    at = text.index("evaluation cases by GPU:")
    assert text[at + 1:] == [
        "  GB200: mean absolute error 7.0% over 2 cases (mean signed error -3.0%, max 10.0%)",
        "  GB300: mean absolute error 20.0% over 1 case (mean signed error +20.0%, max 20.0%)"]

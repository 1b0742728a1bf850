"""The attention kernel's name follows the GPU's vendor, read from the catalogue's typed
``family`` (sim/data/gpus.csv; ``ROCM_FAMILIES``): on MI300X Transformer Engine's fused
attention is its CK (Composable Kernel) or AOTriton backend (ROCm/TransformerEngine README.rst,
"Fused Attention Backends on ROCm"), never cuDNN, which does not exist on AMD GPUs."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.parallel.config import ROCM_FAMILIES


def _attention_line(tmp_path, topo: str, *extra: str) -> str:
    out = tmp_path / "r.json"
    assert main(["--model", "gpt2-medium", "--topo", topo, "--nodes", "1", "--tp", "8",
                 "--global-batch", "16", "--json", str(out), *extra]) == 0
    return next(a for a in json.loads(out.read_text())["assumptions"] if "attention: " in a)


@pytest.mark.parametrize("extra", [(), ("--attention-backend", "fused")])
def test_mi300x_runs_te_fused_attention_on_ck_or_aotriton(tmp_path, extra):
    line = _attention_line(tmp_path, "mi300x", *extra)
    assert "cuDNN" not in line
    assert line.endswith("Transformer Engine fused attention kernel on ROCm (its CK backend, "
                          "Composable Kernel, else AOTriton)")


def test_nvidia_keeps_cudnn(tmp_path):
    line = _attention_line(tmp_path, "dgx-h100-scalable")
    assert line.endswith("cuDNN fused attention kernel (Transformer Engine)")


def test_the_vendor_comes_from_the_catalogue_family():
    from sim.kernels.gpus import find

    assert find("MI300X").family in ROCM_FAMILIES
    for name in ("H100-SXM5-80GB", "GB200", "A100-SXM4-80GB"):
        assert find(name).family not in ROCM_FAMILIES

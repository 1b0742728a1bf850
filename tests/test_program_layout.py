"""PipelineProgram.layout reports the real DP and CP sizes (the program's ``dp`` is DP×CP)."""

from __future__ import annotations

from conftest import WORKLOADS
from par_support import make_par

from sim.models import generate, load_model
from sim.parallel.layout import Layout
from sim.program.pipeline import PipelineProgram
from sim.topology.gpu import GpuSpec

H100_80 = GpuSpec("H100-SXM5-80GB", {"bf16": 989.4}, 80, 3350)


def test_generated_program_with_cp_reports_dp_and_cp():
    # TP 2 x PP 2 x DP 2 x CP 4 = 32 GPUs: gradients are reduced over DP×CP = 8 ranks
    model = load_model(WORKLOADS / "models/llama3-8b.yaml")
    par = make_par(tp=2, pp=2, dp=2, cp=4, micro_batch=1, global_batch=8,
                         flash_attention=True, sequence_parallel=True)
    prog = generate(model, par, H100_80)
    assert (prog.dp, prog.cp, prog.world_size) == (8, 4, 32)
    lay = prog.layout
    assert (lay.tp, lay.pp, lay.dp, lay.cp) == (2, 2, 2, 4)
    assert lay.world_size == prog.world_size
    assert lay.describe() == "TP 2 x PP 2 x DP 2 x CP 4"


def test_program_of_a_layout_round_trips():
    lay = Layout(tp=2, pp=4, dp=3, cp=2, vpp=2, microbatches=8, schedule="zb-v")
    prog = PipelineProgram.of(lay, pp_bytes=0, stages=[])
    assert (prog.dp, prog.cp) == (6, 2)
    assert prog.layout == lay

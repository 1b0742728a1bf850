"""Reading AICB / SimAI workload files of DeepSpeed ZeRO runs (``--zero N`` with ``--workload``).

AICB ships SimAI text files generated from DeepSpeed runs, e.g.
``workload/simAI/model_workload/L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt`` in aliyun/aicb
(shipped here as ``workloads/aicb-llama7b-deepspeed-zero3-a100.txt``). Their header has
``model_parallel_NPU_group: 1`` (no tensor parallelism), and each row is one of the model's
layers: forward compute with no communication; input-gradient compute followed by an
``ALLGATHER`` (the parameters DeepSpeed ZeRO-3 gathers for the backward: AICB's
``generate_deepspeed_stage3_workload.py`` emits all-gathers of parameters in the data-parallel
group, ``allgather_fn``); weight-gradient compute followed, on the first row only, by a
``REDUCESCATTER`` (the gradient reduce-scatter, ``reduce_scatter_fn``).

Read plainly, an un-suffixed collective of the input-gradient column runs in the
model-parallel group, which has one rank here: a no-op. With ``--zero 3`` simrun reads those
``ALLGATHER`` s as what they are, ZeRO-3 parameter all-gathers in the data-parallel group
(blocking: SimAI runs a row's collective after its compute and waits for it, and the file
says nothing about prefetching), and the ``REDUCESCATTER`` as the gradient reduce-scatter,
issued in every microbatch for stages 2 and 3. Sizes are used as written (the Llama-7B file's
all-gathers are 119–357 kB, far below a Llama-7B layer's ~400 MB of 16-bit parameters: AICB
recorded them so; simrun says so in the assumptions).
"""

from __future__ import annotations

import dataclasses

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import UsageError
from sim.program.pipeline import PipelineProgram
from sim.program.workload import Layer, Phase


def read_as_zero(prog: PipelineProgram, stage: int) -> PipelineProgram:
    """``prog`` (read from an AICB DeepSpeed file) with ZeRO stage ``stage`` semantics."""
    if prog.tp != 1:
        raise UsageError(f"AICB DeepSpeed files have no tensor parallelism; this layout has "
                         f"TP {prog.tp}, whose all-gathers are TP collectives", field="zero")
    gathers = [0]

    def remap(ph: Phase) -> Phase:
        c = ph.comm
        if c is None:
            return ph
        if c.kind is CollKind.ALLGATHER and c.group is GroupKind.TP:
            gathers[0] += 1
            return Phase(ph.compute_ns, Comm(CollKind.ALLGATHER, GroupKind.DP, c.size_bytes,
                                             blocking=True, post_delay_ns=c.post_delay_ns))
        if c.kind is CollKind.REDUCESCATTER and c.group is GroupKind.DP and stage >= 2:
            return Phase(ph.compute_ns, dataclasses.replace(c, per_microbatch=True))
        return ph

    for st in prog.stages:
        st.chunks = [tuple(Layer(lay.name, remap(lay.forward), remap(lay.input_grad),
                                 remap(lay.weight_grad), lay.line) for lay in chunk)
                     for chunk in st.chunks]
    prog.assumptions.append(
        f"--zero {stage}: read as DeepSpeed ZeRO stage {stage} (sim/workload/deepspeed.py): "
        f"{gathers[0]} un-suffixed ALLGATHER rows per pipeline run as blocking parameter "
        "all-gathers in the DP group (not the 1-rank model-parallel group)"
        + ("; REDUCESCATTER gradients issued in every microbatch" if stage >= 2 else "")
        + "; sizes as written in the file")
    return prog

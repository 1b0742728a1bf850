"""No silent what-ifs: which flag of the main run applies to which input, and the refusals.

Every flag of ``simrun`` (the main run) is entered in :data:`TABLE`, once per input kind
(:data:`INPUT_KINDS`: an AICB workload file, an operator table, a model spec given by
``--model``, AICB's physical-format ZeRO-3 log given with the model spec that times it —
``--workload LOG.csv --model SPEC``, its column in
:data:`sim.options.applicable_log.LOG_VERDICTS`), with one of these verdicts:

- ``input``: it names the input (its kind is the column);
- ``changes``: it changes the simulation, and the report's assumptions say how;
- ``states``: it gives the default explicitly (e.g. ``--overlap-grad-reduce``); the assumption
  line of the default says what it means;
- ``mode``: it changes how the simulation is computed, not its result (``--per-rank``,
  ``--no-fuse``: the simulation mode is stated; tests show the modes agree);
- ``output``: what is written or printed, the watchdog (no what-if);
- ``refused``: exit 2 with the one-line reason given here, before any work;
- ``refused-if``: it changes the simulation, but is refused (exit 2, the reason given here)
  where it would change nothing or make the input inconsistent: checked on the parsed workload
  (:func:`check_workload`) or after the run, before anything is written (:func:`check_effect`).

A flag added to the run's parser must be entered here (tests/test_no_silent_whatifs.py fails
otherwise); docs/errors.md lists the refusals. The training options' rows and per-layout
refusals come from their declarations (:mod:`sim.options.registry`); the other model-input
flags' verdicts are in :mod:`sim.options.applicable_model`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sim.assumption import with_key
from sim.comm import GroupKind
from sim.engine.interference import NO_ASYNC
from sim.errors import UsageError
from sim.options.applicable_log import LOG_VERDICTS
from sim.options.applicable_model import MODEL_HOW
from sim.options.registry import FILE_FIXES, refusals, table_rows
from sim.program.workload import Workload
from sim.workload import stages

INPUT_KINDS = ("aicb", "optable", "model", "aicb-csv")
VERDICTS = ("input", "changes", "states", "mode", "output", "refused", "refused-if")


@dataclass(frozen=True)
class Verdict:
    """What a flag does for one input kind: ``verdict`` (one of :data:`VERDICTS`) and ``why``
    (how it changes the simulation, or the reason it is refused)."""

    verdict: str
    why: str


def _all(verdict: str, why: str) -> dict[str, Verdict]:
    return dict.fromkeys(INPUT_KINDS, Verdict(verdict, why))


def _kinds(aicb: tuple[str, str], optable: tuple[str, str],
           model: tuple[str, str]) -> dict[str, Verdict]:
    """The verdicts of the file kinds and the model; the physical log's are in :data:`_CSV`."""
    return {"aicb": Verdict(*aicb), "optable": Verdict(*optable), "model": Verdict(*model)}


_FILE_FIXES = FILE_FIXES
_GENERATED = "applies to workload files (how a file is read); with --model the workload is " \
             "generated, leave it out"
_LAYOUT = "the layout; stated in the report's layout line and assumptions"
# the model-input flags that are not training options (those are declared in the registry)
_MODEL_ONLY = tuple(MODEL_HOW)
_NO_ASYNC = ("refused-if", "SM interference of asynchronous collectives (assumption "
                           "'interference: ...'); refused when the run has none")
_SCALED = ("refused-if", "refused unless the file's compute times are scaled from another GPU "
                         "(the scaling note says by how much)")

TABLE: dict[str, dict[str, Verdict]] = {
    "--workload": _kinds(("input", "the workload"), ("input", "the workload"),
                         ("refused", "give --workload or --model, not both (both only for "
                                     "AICB's physical-format log)")),
    "--format": _kinds(("states", "forces the reader it detects (a file in another format is "
                                  "an error)"),
                       ("states", "forces the reader it detects"), ("refused", _GENERATED)),
    "--megatron-args": {**_all("refused", "a Megatron-LM job is its own input: give it "
                                          "without --workload"),
                        "model": Verdict("input", "a Megatron-LM job: the model spec and "
                                                  "training flags (assumptions 'Megatron-LM "
                                                  "arguments ...'); --model is left out")},
    "--job-config": {**_all("refused", "a job config is its own input: give it without "
                                       "--workload"),
                     "model": Verdict("input", "a torchtitan job config: the model spec and "
                                               "training flags (assumptions 'torchtitan job "
                                               "config ...'); --model is left out")},
    "--topo": _all("changes", "the cluster (report header, network assumptions)"),
    "--set": _kinds(*[("refused-if", "a topology field (assumption 'topology override (--set): "
                                     "KEY = VALUE (file: OLD)'; doubtful combinations as WARNING "
                                     "lines); node.gpu.* refused where the file's compute times "
                                     "are used as written")] * 2,
                    ("changes", "a topology field (assumption 'topology override (--set): KEY = "
                                "VALUE (file: OLD)'; doubtful combinations as WARNING lines)")),
    "--nodes": _all("changes", "the cluster's node count (report header); an AICB header's "
                               "all_gpus keeps the job's size (the report says how many GPUs it "
                               "uses)"),
    "--nproc-per-node": _all("changes", "processes per node: each node's first K GPUs run "
                                        "ranks, rank r on node r // K (assumption "
                                        "'--nproc-per-node K: ...'); K of the node's GPUs is "
                                        "the default"),
    "--tp": _kinds(("refused-if", "refused when it differs from the header's TP "
                                  "(model_parallel_NPU_group): the rows' compute times and sizes "
                                  "are that TP's"),
                   ("changes", "declares the TP the table was measured at (TP group size)"),
                   ("changes", _LAYOUT)),
    "--pp": _kinds(("changes", "stages, each running the file's rows (one stage's layers), so "
                               "the model grows or shrinks with PP: 'pipeline stages: N from --pp "
                               "(file says M)'"),
                   ("changes", "stages, each running the table's rows"), ("changes", _LAYOUT)),
    "--ep": _kinds(("refused-if", "refused when it differs from the header's ep (the rows' "
                                  "sizes are that EP's) or the file has no EP collectives"),
                   ("refused-if", "refused when the file has no EP collectives"),
                   ("refused-if", "refused for a dense model (parallel-layout check)")),
    "--vpp": _all("changes", "model chunks per stage (layout line)"),
    "--microbatches": _all("changes", "microbatches per iteration (layout line)"),
    "--gpus": _all("changes", "GPUs, hence DP (assumption 'data-parallel size DP = ...')"),
    "--schedule": _all("changes", "the pipeline schedule (layout line); zb-v and dualpipe "
                                  "also run two chunks per stage unless --vpp says otherwise; "
                                  "dualpipe is refused for workload files"),
    "--microbatch-group-size": _all("changes", "the interleaved order (refused by the schedule "
                                               "check for other schedules)"),
    "--pp-comm-bytes": _kinds(("changes", "the pipeline message size (assumption)"),
                              ("changes", "the pipeline message size (assumption)"),
                              ("refused", "applies to workload files; with --model the "
                                          "pipeline message is derived from the model")),
    "--row-placement": _kinds(("refused-if", "refused 'all' at PP 1 or when the file has no "
                                             "first- or last-stage rows"),
                              ("refused-if", "refused 'all' at PP 1 or when the file has no "
                                             "first- or last-stage rows"),
                              ("refused", "applies to workload files; generated workloads "
                                          "place rows as Megatron does")),
    "--placement": _all("changes", "the rank-to-GPU order (assumption 'placement: ...')"),
    "--model": _kinds(("refused", "give --workload or --model, not both"),
                      ("refused", "give --workload or --model, not both"),
                      ("input", "the generated workload")),
    **{f: _kinds(_FILE_FIXES, _FILE_FIXES, MODEL_HOW[f]) for f in _MODEL_ONLY},
    "--zero": _kinds(("changes", "an AICB DeepSpeed file read with ZeRO semantics (refused for "
                                 "TP > 1)"),
                     ("refused", "applies to --model runs and AICB DeepSpeed files"),
                     ("refused-if", "refused at DP 1 (nothing to shard over)")),
    "--bytes-per-element": _kinds(
        ("refused", "applies to operator tables only (AICB sizes are bytes); leave it out"),
        ("changes", "bytes of element-count sizes (assumption)"), ("refused", _GENERATED)),
    "--missing-backward-ratio": _kinds(
        ("refused", "applies to operator tables only (AICB files give backward times); "
                    "leave it out"),
        ("refused-if", "refused when the file gives backward times"), ("refused", _GENERATED)),
    "--nccl-channels": _all(*_NO_ASYNC),
    "--comm-overlap-slowdown": _all(*_NO_ASYNC),
    "--jitter": _all("changes", "seeded kernel and transfer noise: the report's variability "
                                "block and assumptions (the breakdown stays deterministic)"),
    "--samples": _all("refused-if", "variability samples; refused without --jitter"),
    "--seed": _all("refused-if", "the noise draws; refused without --jitter"),
    "--host-dispatch-us": _kinds(*[("refused", "--model runs only")] * 2, ("changes", "host wait")),
    "--per-rank": _all("mode", "every rank simulated (simulation mode assumption)"),
    "--no-fuse": _all("mode", "every step its own event (same times)"),
    "--max-sim-time-s": _all("output", "watchdog"),
    "--full-simulation": {**_all("states", "workload files and AICB logs are always simulated "
                                         "microbatch by microbatch: no effect"),
                          "model": Verdict("states", "every microbatch simulated instead of "
                                                   "three short periodic runs; the same report "
                                                   "(sim.scenario.periodic_run)")},
    "--algorithm": _all("changes", "collective algorithm (network assumptions)"),
    "--protocol": _all("changes", "NCCL protocol (network assumptions)"),
    "--routing": _all("changes", "fat-tree routing (network assumptions)"),
    "--nccl-algo": _all("changes", "NCCL_ALGO: the algorithms auto chooses among (network "
                                   "assumptions)"),
    "--nccl-proto": _all("changes", "NCCL_PROTO: the protocols auto chooses among (network "
                                    "assumptions)"),
    "--nccl-nvls-enable": _all("changes", "NCCL_NVLS_ENABLE: NVLS all-reduce on or off (network "
                                          "assumptions); refused where the topology's "
                                          "NVSwitches do not declare nvls: true"),
    "--nccl-collnet-enable": _all("changes", "NCCL_COLLNET_ENABLE: SHARP all-reduce on or off "
                                             "(network assumptions); refused where the "
                                             "topology's fabric does not declare sharp: true"),
    "--kernel-table": _kinds(_SCALED, _SCALED, ("changes", "operator times (compute note)")),
    "--compute-efficiency": _kinds(_SCALED, _SCALED, ("changes", "roofline GEMM efficiency")),
    "--sustained-slowdown": _kinds(*[("refused", "applies to compute timed from a kernel "
                                                 "table (--model runs); a workload file's "
                                                 "compute times are its own")] * 2,
                                   ("changes", "kernel-table times × F ('sustained load' "
                                               "note); refused on a GPU with no kernel table")),
    "--calibration": _kinds(*[("changes", "the profile's network bus-bandwidth factor (link "
                                          "efficiencies); its compute knobs do not apply: the "
                                          "file's compute times are measured")] * 2,
                            ("changes", "every knob of the profile: operator times and link "
                                        "efficiencies (one 'calibrated' assumption per knob)")),
    "--calibration-any-cluster": _all("refused-if", "a --calibration profile of another GPU "
                                                    "or topology is used (a warning) instead "
                                                    "of refused; refused without "
                                                    "--calibration"),
    "--source-gpu": _kinds(_SCALED, _SCALED, ("refused", "applies to workload files (their "
                                                         "measured compute times); leave it out")),
    "--compute-scale": _kinds(("changes", "compute times × F (assumption)"),
                              ("changes", "compute times × F (assumption)"),
                              ("refused", "applies to workload files (their measured compute "
                                          "times); leave it out")),
    **{f: _all("changes", "the affected ranks simulated individually (fault report)")
       for f in ("--slow-gpu", "--slow-node", "--degrade-link", "--fail-nic")},
    **{f: _all("output", "what is written or printed")
       for f in ("--json", "--quiet", "--timing", "--trace", "--plot", "--chakra",
                 "--breakdown-plot", "--help", "--version", "--verbose")},
    "--force": _all("refused-if", "allows a --trace estimated over 200 MB; refused without "
                                  "--trace"),
    "--trace-format": _all("refused-if", "the format of --trace; refused without it"),
    "--trace-ranks": _all("refused-if", "the ranks of --trace and --plot; refused without "
                                        "either"),
    **{f: _all("refused-if", "what the --plot timeline shows; refused without --plot")
       for f in ("--plot-window", "--plot-microbatches")},
}

for _flag, (_verdict, _why) in LOG_VERDICTS.items():
    TABLE[_flag]["aicb-csv"] = Verdict(_verdict, _why)
# the training options' rows, from their declarations (sim.options.registry)
for _flag, _row in table_rows().items():
    TABLE[_flag] = {kind: Verdict(*_row[kind]) for kind in INPUT_KINDS}


def check_given(given: Iterable[str], kind: str) -> None:
    """Refuse the flags whose verdict for input ``kind`` is ``refused`` (first in table order)."""
    given = set(given)
    for flag, verdicts in TABLE.items():
        v = verdicts[kind]
        if flag in given and v.verdict == "refused":
            raise UsageError(v.why, field=flag)


def _refuse_if(given: set[str], flag: str, condition: bool, why: str) -> None:
    if flag in given and condition:
        raise UsageError(f"{why}; leave it out", field=flag)


def check_workload(given: Iterable[str], wl: Workload, tp: int | None, ep: int | None,
                   pp: int | None, row_placement: str) -> None:
    """Refuse the flags that do not apply to the parsed workload file ``wl``: ``refused`` for
    its kind (:func:`check_given`) and the ``refused-if`` checks that need the file; ``tp``,
    ``ep``, ``pp``: the layout flags (``None``: not given)."""
    given = set(given)
    # a Chakra trace holds AICB's rows (ns, bytes; sim.workload.chakra): AICB's verdicts
    check_given(given, "aicb" if wl.format == "chakra" else wl.format)
    h = wl.header
    if wl.format == "aicb":
        for flag, asked, declared, key in (("--tp", tp, h.tp, "model_parallel_NPU_group"),
                                           ("--ep", ep, h.ep, "ep")):
            name = flag[2:].upper()
            if asked is not None and declared is not None and asked != declared:
                raise UsageError(
                    f"{asked} differs from {wl.path}'s {name} {declared} (header {key}, line "
                    f"1): the file's compute times and collective sizes are those of {name} "
                    f"{declared} and would stay so; generate the workload for {name} {asked} "
                    "with --model instead", field=flag)
    _refuse_if(given, "--ep", not _has_group(wl, GroupKind.EP, GroupKind.DP_EP),
               "the file has no expert-parallel (EP or DP_EP) collectives, so the EP size "
               "would change nothing")
    _refuse_if(given, "--missing-backward-ratio", wl.format == "optable" and not with_key(
        wl.assumptions, "missing-backward"),
        "the file gives backward times, so the ratio would change nothing")
    stages_n = pp or h.pp or 1
    _refuse_if(given, "--row-placement", row_placement == "all" and stages_n == 1,
               "with one pipeline stage every row already runs on it")
    _refuse_if(given, "--row-placement", row_placement == "all" and not _placed_rows(wl),
               "the file has no embedding, output or loss rows, so every stage already runs "
               "every row")


def _has_group(wl: Workload, *groups: GroupKind) -> bool:
    return any(ph.comm is not None and ph.comm.group in groups for lay in wl.layers
               for ph in (lay.forward, lay.input_grad, lay.weight_grad))


def _placed_rows(wl: Workload) -> bool:
    """Whether ``wl`` has rows that the 'megatron' placement puts on the first or last stage."""
    pats = (stages.FIRST_STAGE_ROW, stages.LAST_STAGE_ROW, stages.LOSS_ROW,
            stages.TIED_EMBEDDING_ROW)
    return any(p.search(lay.name) for lay in wl.layers for p in pats)


def check_effect(given: Iterable[str], assumptions: list[str], model_run: Any = None,
                 overrides: Iterable[str] = ()) -> None:
    """The ``refused-if`` checks that need the run: called after simulating, before anything
    is written. ``model_run``: the :class:`~sim.scenario.model_run.ModelRun` of a model run,
    ``None`` for a workload file; ``overrides``: the ``--set KEY=VALUE`` texts."""
    given = set(given)
    check_interference(given, assumptions)
    if model_run is None:
        scaled = bool(with_key(assumptions, "compute-scaled"))
        unused = ("the file's compute times are used as written (not scaled from another GPU), "
                  "so it would change nothing")
        for flag in ("--kernel-table", "--compute-efficiency", "--source-gpu"):
            _refuse_if(given, flag, not scaled, unused)
        for text in overrides:
            key = text.partition("=")[0].strip()
            if key.startswith("node.gpu.") and not scaled:
                raise UsageError(f"{unused}; leave it out", field=f"--set {key}")
        return
    check_layout(given, model_run.model, model_run.par)
    _refuse_if(given, "--ignore-memory", model_run.memory.feasible, "the layout fits in GPU "
               "memory, so it changes nothing")


def check_interference(given: Iterable[str], assumptions: list[str]) -> None:
    """The SM-interference flags, refused when the run had no asynchronous collective (its
    ``assumptions`` hold :data:`~sim.engine.interference.NO_ASYNC`)."""
    for flag in ("--nccl-channels", "--comm-overlap-slowdown"):
        _refuse_if(set(given), flag, bool(with_key(assumptions, NO_ASYNC.key)), "the run has "
                   "no asynchronous "
                   "collective (nothing runs beside compute), so it would change nothing")


def check_layout(given: Iterable[str], model: Any, par: Any) -> None:
    """The ``refused-if`` checks of a model run that need only the model spec and the layout
    (:class:`~sim.parallel.config.ParallelConfig`, its ``ep_nodes`` set for the cluster):
    :func:`check_effect`, and ``simrun sweep`` for each layout before simulating it."""
    given = set(given)
    dp = par.dp_cp  # Megatron shards over the DP group with CP
    _refuse_if(given, "--zero", dp == 1, "needs DP > 1 (there is nothing to shard the "
                                         "optimizer state over at DP 1)")
    _refuse_if(given, "--expert-tensor-parallel-size", model.moe is None,
               "applies to mixture-of-experts models (a dense model has no experts)")
    for flag, why in refusals(given, model, par):  # the declared options' (sim.options.registry)
        raise UsageError(f"{why}; leave it out", field=flag)

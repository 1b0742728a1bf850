"""A Megatron-LM training log as a measured run for ``simrun calibrate``.

The log is read by :func:`sim.jobs.megatron_log.read_megatron_log`; its printed arguments
become the run's model spec and simrun flags by the translation of ``--megatron-args``
(:func:`sim.jobs.megatron_args.translate`), parsed by the run's own parser, so the calibrated
run is exactly ``simrun --megatron-args LOG --topo T --nodes N``. The arguments Megatron-LM
derives at start-up and prints with the others (``world_size``, ``data_parallel_size``,
``rank``, ``local_rank``) are not flags: ``world_size`` gives the GPU count (the nodes of the
topology), the others follow from it and the layout. The measured time is the median of
``elapsed time per iteration (ms)`` over the iteration lines after the warm-up; half the
spread between their 10th and 90th percentiles (in percent of the median) is the measurement's
spread, which widens the profile's range.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from sim.calibration.fit import MeasuredRun
from sim.calibration.knobs import Knobs
from sim.calibration.profile import Profile
from sim.cli.jobs import _log_words
from sim.errors import InputError
from sim.jobs.megatron_args import translate
from sim.jobs.megatron_log import MegatronLog, read_megatron_log
from sim.models.vocab.spec import model_from_dict
from sim.topology import load_topology

#: printed arguments Megatron-LM derives at start-up (not command-line flags)
DERIVED = ("world_size", "data_parallel_size", "rank", "local_rank")


def measured_time(log: MegatronLog, warmup: int) -> tuple[float, float, int]:
    """Median iteration time (s) after ``warmup`` iterations, half its 10-90% spread (percent
    of the median) and how many iteration lines it rests on."""
    if not log.arguments:
        raise InputError("the log has no 'arguments' block (Megatron-LM prints it at start; "
                         "without it the run's layout is unknown)", file=log.path,
                         field="arguments")
    kept = [i.elapsed_ms for i in log.iterations if i.iteration > warmup]
    if not kept:
        last = log.iterations[-1] if log.iterations else None
        raise InputError(f"no iteration line after the {warmup} warm-up iterations (a "
                         "truncated log? --warmup N sets the warm-up)", file=log.path,
                         line=last.line if last else None, field="iteration")
    med = statistics.median(kept)
    if len(kept) >= 2:
        q = statistics.quantiles(kept, n=10, method="inclusive")
        spread = (q[-1] - q[0]) / 2 / med * 100
    else:
        spread = 0.0
    return med / 1e3, spread, len(kept)


def log_run(path: str, topo_path: str, warmup: int):
    """The measured run of the log ``path`` on topology ``topo_path``, and that topology."""
    from sim.cli import build_parser
    from sim.cli.run import scenario_of
    from sim.cli.types import given_flags

    log = read_megatron_log(path)
    measured_s, spread, n = measured_time(log, warmup)
    size = log.arguments.get("world_size")
    if size is None or not size.isdigit() or int(size) < 1:
        raise InputError(f"expected the GPU count, got {size!r}", file=path,
                         line=log.line_of("world_size"), field="world_size")
    values = {k: v for k, v in log.arguments.items() if k not in DERIVED}
    job = translate(_log_words(values, log.argument_lines), path, "megatron-log")
    spec = model_from_dict(job.model, file=path)
    probe = load_topology(topo_path)
    nodes = max(1, math.ceil(int(size) / probe.gpus_per_node))
    argv = ["--topo", topo_path, "--nodes", str(nodes), "--model", path, *job.argv]
    parser = build_parser()
    scenario = scenario_of(parser.parse_args(argv), given_flags(parser, argv))
    scenario = dataclasses.replace(scenario,
                                   workload=dataclasses.replace(scenario.workload, spec=spec))
    topo = load_topology(topo_path, nodes=nodes)
    what = (f"Megatron-LM log {path} (median of {n} iteration lines after iteration {warmup}: "
            f"{measured_s:.4g} s, spread +-{spread:.2f}%)")
    return MeasuredRun(f"{path}", measured_s, _Predict(scenario, topo.gpu.name, topo.name),
                       what, spread), topo


@dataclasses.dataclass(frozen=True)
class _Predict:
    """The predicted iteration time (s) of ``scenario`` under given knobs."""

    scenario: object
    gpu: str
    topology: str

    def __call__(self, knobs: Knobs) -> float:
        from sim.scenario import run_scenario

        prof = Profile(gpu=self.gpu, topology=self.topology, knobs=knobs, measurements={})
        s = self.scenario
        s = dataclasses.replace(s, compute=dataclasses.replace(s.compute, calibration=prof))
        return float(run_scenario(s).report["iteration_time_s"])
